#!/usr/bin/env bash
# data size and model on valid, each with config.yaml of now (cosine from 1e-3, bf16), started when sympy_test.sh ends:
#  1. the first 50,000 of the 200,000 training problems (nested; data-bin-50k from chain_50k.sh), 6500 updates
#  2. 6+6 layers (else transformer_small's d 256) on the 200,000, 3200 updates: 60 minutes at the ~1.0 s an update
#     measured quietly at 90 updates (2.0x the 3+3 model's 0.51 s)
set -euo pipefail
cd /work/runs/symbolic/t300k
export PATH=/work/main/.venv/bin:$PATH PYTHONHASHSEED=0
here=/work/main/examples/symbolic_integration
until grep -q "== done" sympy_test.log; do sleep 10; done
valid() {  # $1 checkpoint dir, $2 data-bin, $3 tag
  for beam in 1 10; do
    seqkit-generate path=$1/checkpoint_best.pt task.data=$2 gen_subset=valid \
      generation.beam=$beam generation.nbest=$beam batch_size=64 common.threads=2 \
      results_path=beam${beam}-$3 2>&1 | tee generate-valid-beam${beam}-$3.log
  done
  python $here/evaluate.py beam1-$3/generate-valid.txt beam10-$3/generate-valid.txt results-valid-$3.json \
    --workers 2 --no-sympy 2>&1 | tee evaluate-valid-$3.log
}
echo "== train 50k $(date)"
/usr/bin/time -v seqkit-train --config $here/config.yaml task.data=data-bin-50k checkpoint.save_dir=checkpoints-50k \
  2>&1 | tee train-50k.log
echo "== valid 50k $(date)"
valid checkpoints-50k data-bin-50k 50k
echo "== train l6 $(date)"
/usr/bin/time -v seqkit-train --config $here/config.yaml task.data=data-bin checkpoint.save_dir=checkpoints-l6 \
  model.encoder_layers=6 model.decoder_layers=6 optimization.max_update=3200 2>&1 | tee train-l6.log
echo "== valid l6 $(date)"
valid checkpoints-l6 data-bin l6
echo "== done $(date)"
