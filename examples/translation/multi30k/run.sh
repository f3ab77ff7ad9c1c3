#!/usr/bin/env bash
# The whole Multi30k de->en recipe: prepare, train (the config's update count: ~45 min on
# 2 cores), average, translate, score.
#   bash examples/translation/multi30k/run.sh [WORK_DIR] [CONFIG] [key=value ...]
# WORK_DIR defaults to ./multi30k-run; CONFIG to this folder's config.yaml (the Transformer; also
# config_lstm.yaml, config_convs2s.yaml); extra key=value settings go to seqkit-train.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:-multi30k-run}"
config="${2:-$here/config.yaml}"
shift $(( $# > 2 ? 2 : $# ))
mkdir -p "$work"

bash "$here/prepare.sh" "$work/data-bin"

seqkit-train --config "$config" task.data="$work/data-bin" checkpoint.save_dir="$work/checkpoints" "$@" \
  2>&1 | tee "$work/train.log"

# average the last 5 epoch checkpoints (+0.5-1 BLEU over the last one, as usual for Transformers)
seqkit-average save_dir="$work/checkpoints" last=5 output="$work/checkpoints/checkpoint_avg5.pt"

for ck in checkpoint_best checkpoint_avg5; do
  seqkit-generate path="$work/checkpoints/$ck.pt" task.data="$work/data-bin" gen_subset=test \
    generation.beam=5 generation.lenpen=1.0 batch_size=64 results_path="$work/$ck" 2>&1 | tee "$work/$ck.log"
  echo "== $ck on test_2016_flickr (beam 5)"
  seqkit-score hyp="$work/$ck/generate-test.txt"
done
