#!/usr/bin/env bash
# after chain_cos.sh: the cosine run's test at beam 1 and 10 (model figures; no sympy)
set -euo pipefail
cd /work/runs/symbolic/t300k
export PATH=/work/main/.venv/bin:$PATH PYTHONHASHSEED=0
here=/work/main/examples/symbolic_integration
until grep -q "== done" chain_cos.log; do sleep 5; done
for beam in 1 10; do
  seqkit-generate path=checkpoints-cos/checkpoint_best.pt task.data=data-bin gen_subset=test \
    generation.beam=$beam generation.nbest=$beam batch_size=64 common.threads=2 \
    results_path=beam${beam}-cos 2>&1 | tee generate-test-beam${beam}-cos.log
done
python $here/evaluate.py beam1-cos/generate-test.txt beam10-cos/generate-test.txt results-test-cos.json --workers 2 --no-sympy 2>&1 | tee evaluate-test-cos.log
echo "== done $(date)"
