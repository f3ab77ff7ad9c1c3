#!/usr/bin/env bash
# sympy's integrate (10 CPU s a problem) and the cosine run's test figures again, on a quiet machine
set -euo pipefail
cd /work/runs/symbolic/t300k
export PATH=/work/main/.venv/bin:$PATH PYTHONHASHSEED=0
here=/work/main/examples/symbolic_integration
echo "== evaluate test with sympy $(date)"
/usr/bin/time -v python $here/evaluate.py beam1-cos/generate-test.txt beam10-cos/generate-test.txt results-test-cos-sympy.json --workers 2 2>&1 | tee evaluate-test-cos-sympy.log
echo "== done $(date)"
