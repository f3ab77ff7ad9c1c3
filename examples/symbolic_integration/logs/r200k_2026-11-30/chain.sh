#!/usr/bin/env bash
# after prepare.py (--simplify together): preprocess, train (bf16 autocast, 7000 updates), generate (valid, test;
# beam 1 and 10), evaluate valid (no sympy), then test with sympy's baseline
set -euo pipefail
cd /work/runs/symbolic/t300k
export PATH=/work/main/.venv/bin:$PATH PYTHONHASHSEED=0
here=/work/main/examples/symbolic_integration
while pgrep -f "prepare.py raw --train" >/dev/null; do sleep 10; done
test -f raw/stats.json
echo "== preprocess $(date)"
seqkit-preprocess source_lang=deriv target_lang=func tokenizer=space trainpref=raw/train validpref=raw/valid \
  testpref=raw/test destdir=data-bin overwrite=true workers=2 2>&1 | tee preprocess.log
echo "== train $(date)"
/usr/bin/time -v seqkit-train --config $here/config.yaml task.data=data-bin checkpoint.save_dir=checkpoints \
  common.precision=bf16 optimization.max_update=7000 2>&1 | tee train.log
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
