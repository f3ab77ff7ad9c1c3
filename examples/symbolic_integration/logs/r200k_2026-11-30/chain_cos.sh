#!/usr/bin/env bash
# the learning-rate schedule on valid: cosine from 1e-3 (400 warm-up updates) down to 0 at update 6500, against
# config.yaml's inverse_sqrt at 7e-4; the same data, model and 6500 updates; then valid at beam 1 and 10
set -euo pipefail
cd /work/runs/symbolic/t300k
export PATH=/work/main/.venv/bin:$PATH PYTHONHASHSEED=0
here=/work/main/examples/symbolic_integration
echo "== train $(date)"
/usr/bin/time -v seqkit-train --config $here/config.yaml task.data=data-bin checkpoint.save_dir=checkpoints-cos \
  common.precision=bf16 optimization.max_update=6500 optimizer.lr=0.001 lr_scheduler=cosine \
  lr_scheduler.warmup_updates=400 2>&1 | tee train-cos.log
echo "== generate $(date)"
for beam in 1 10; do
  seqkit-generate path=checkpoints-cos/checkpoint_best.pt task.data=data-bin gen_subset=valid \
    generation.beam=$beam generation.nbest=$beam batch_size=64 common.threads=2 \
    results_path=beam${beam}-cos 2>&1 | tee generate-valid-beam${beam}-cos.log
done
echo "== evaluate valid $(date)"
python $here/evaluate.py beam1-cos/generate-valid.txt beam10-cos/generate-valid.txt results-valid-cos.json --workers 2 --no-sympy 2>&1 | tee evaluate-valid-cos.log
echo "== done $(date)"
