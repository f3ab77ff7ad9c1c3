#!/usr/bin/env bash
# The quickstart: seqkit's whole pipeline on a synthetic German->English corpus that seqkit makes
# itself (no download): preprocess -> train -> generate -> score, under a minute on 2 CPU cores.
#   bash examples/quickstart/run.sh [WORK_DIR]      (default: ./quickstart-run)
set -euo pipefail
work="${1:-quickstart-run}"
mkdir -p "$work"

python3 -m seqkit.data.toy_corpus "$work/raw" --train 3000 --valid 200 --test 200

seqkit-preprocess source_lang=de target_lang=en \
  trainpref="$work/raw/train" validpref="$work/raw/valid" testpref="$work/raw/test" \
  destdir="$work/data-bin" overwrite=true tokenizer=sentencepiece_bpe tokenizer.vocab_size=300

seqkit-train task.data="$work/data-bin" checkpoint.save_dir="$work/checkpoints" checkpoint.reset=true \
  model=transformer_tiny optimizer.lr=2e-3 lr_scheduler.warmup_updates=100 \
  dataset.max_tokens=2048 optimization.max_epoch=10 common.log_interval=50

seqkit-generate path="$work/checkpoints/checkpoint_best.pt" task.data="$work/data-bin" \
  generation.beam=5 results_path="$work"

echo "== sample translations" >&2
grep -E '^(S|T|D)-(0|1)\s' "$work/generate-test.txt" >&2
echo "== scores on the 200 test sentences" >&2
seqkit-score hyp="$work/generate-test.txt"
