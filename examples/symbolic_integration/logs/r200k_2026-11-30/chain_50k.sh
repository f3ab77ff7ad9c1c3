#!/usr/bin/env bash
# data size on valid: the first 50,000 of the 200,000 training problems (nested), the same valid and test,
# the same model and 7000 updates; started when chain.sh's training ends
set -euo pipefail
cd /work/runs/symbolic/t300k
export PATH=/work/main/.venv/bin:$PATH PYTHONHASHSEED=0
here=/work/main/examples/symbolic_integration
until grep -q "== generate" chain.log; do sleep 10; done
mkdir -p raw50k
for side in deriv func; do
  head -n 50000 raw/train.$side > raw50k/train.$side
  cp raw/valid.$side raw/test.$side raw50k/
done
echo "== preprocess $(date)"
seqkit-preprocess source_lang=deriv target_lang=func tokenizer=space trainpref=raw50k/train validpref=raw50k/valid \
  testpref=raw50k/test destdir=data-bin-50k overwrite=true workers=2 2>&1 | tee preprocess-50k.log
echo "== train $(date)"
/usr/bin/time -v seqkit-train --config $here/config.yaml task.data=data-bin-50k checkpoint.save_dir=checkpoints-50k \
  common.precision=bf16 optimization.max_update=6500 2>&1 | tee train-50k.log
echo "== generate $(date)"
for beam in 1 10; do
  seqkit-generate path=checkpoints-50k/checkpoint_best.pt task.data=data-bin-50k gen_subset=valid \
    generation.beam=$beam generation.nbest=$beam batch_size=64 common.threads=2 \
    results_path=beam${beam}-50k 2>&1 | tee generate-valid-beam${beam}-50k.log
done
echo "== evaluate valid $(date)"
python $here/evaluate.py beam1-50k/generate-valid.txt beam10-50k/generate-valid.txt results-valid-50k.json --workers 2 --no-sympy 2>&1 | tee evaluate-valid-50k.log
echo "== done $(date)"
