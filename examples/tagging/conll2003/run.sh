#!/usr/bin/env bash
# CoNLL-2003 NER from scratch: prepare, train a tagger (its config's update count: ~30 min on 2 quiet cores),
# tag testb, score.
#   bash examples/tagging/conll2003/run.sh [WORK_DIR] [CONFIG] [key=value ...]
# CONFIG: config_bilstm.yaml (default) or config_transformer.yaml in this folder.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:-conll2003-run}"
config="${2:-$here/config_bilstm.yaml}"
shift $(( $# > 2 ? 2 : $# ))
mkdir -p "$work"

[[ -f "$work/data-bin/preprocess.json" ]] || bash "$here/prepare.sh" "$work/data-bin"

seqkit-train --config "$config" task.data="$work/data-bin" checkpoint.save_dir="$work/checkpoints" "$@" \
  2>&1 | tee "$work/train.log"

for split in valid test; do   # valid = eng.testa, test = eng.testb
  seqkit-generate path="$work/checkpoints/checkpoint_best.pt" task.data="$work/data-bin" gen_subset=$split \
    batch_size=64 results_path="$work/predict" 2>&1 | tee "$work/predict_$split.log"
  echo "== $split"
  seqkit-score hyp="$work/predict/generate-$split.txt" | tee "$work/score_$split.txt"
done
