#!/usr/bin/env bash
# chain.sh's training, stopped after epoch 1's checkpoint (7000 updates at the measured 0.51 s an update would
# pass 60 minutes) and resumed exactly to 6500 updates; then chain.sh's generate and evaluate steps
set -euo pipefail
cd /work/runs/symbolic/t300k
export PATH=/work/main/.venv/bin:$PATH PYTHONHASHSEED=0
here=/work/main/examples/symbolic_integration
echo "== train (resumed) $(date)"
/usr/bin/time -v seqkit-train --config $here/config.yaml task.data=data-bin checkpoint.save_dir=checkpoints \
  common.precision=bf16 optimization.max_update=6500 2>&1 | tee train-resumed.log
echo "== generate $(date)"
for split in valid test; do
  for beam in 1 10; do
    seqkit-generate path=checkpoints/checkpoint_best.pt task.data=data-bin gen_subset=$split \
      generation.beam=$beam generation.nbest=$beam batch_size=64 common.threads=2 \
      results_path=beam$beam 2>&1 | tee generate-$split-beam$beam.log
  done
done
echo "== evaluate valid $(date)"
python $here/evaluate.py beam1/generate-valid.txt beam10/generate-valid.txt results-valid.json --workers 2 --no-sympy 2>&1 | tee evaluate-valid.log
echo "== evaluate test $(date)"
python $here/evaluate.py beam1/generate-test.txt beam10/generate-test.txt results-test.json --workers 2 2>&1 | tee evaluate-test.log
echo "== done $(date)"
