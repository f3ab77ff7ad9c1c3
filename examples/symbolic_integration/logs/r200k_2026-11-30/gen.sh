#!/usr/bin/env bash
set -euo pipefail
cd /work/runs/symbolic/t300k
export PATH=/work/main/.venv/bin:$PATH PYTHONHASHSEED=0
echo "== prepare $(date) on $(grep -m1 'model name' /proc/cpuinfo)"
python /work/main/examples/symbolic_integration/prepare.py raw --train ${TRAIN:-300000} --valid 1000 --test 1000 \
  --max-ops 6 --seed 1 --workers 2 --simplify together
echo "== done $(date)"
