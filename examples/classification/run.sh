#!/usr/bin/env bash
# One classification recipe: prepare the data (once), train, predict dev and test, score dev.
#   bash examples/classification/run.sh WORK_DIR CONFIG [key=value ...]
# CONFIG is a config_*.yaml of a dataset folder (sst2/, rte/); that folder's prepare.sh makes the
# data. Extra key=value settings go to seqkit-train. GLUE's test labels are hidden: test gets
# predictions only.
set -euo pipefail
work="$1"
config="$2"
shift 2
dataset_dir="$(cd "$(dirname "$config")" && pwd)"
mkdir -p "$work"

[[ -f "$work/data-bin/preprocess.json" ]] || bash "$dataset_dir/prepare.sh" "$work/data-bin"

seqkit-train --config "$config" task.data="$work/data-bin" checkpoint.save_dir="$work/checkpoints" "$@" \
  2>&1 | tee "$work/train.log"

for split in valid test; do
  seqkit-generate path="$work/checkpoints/checkpoint_best.pt" task.data="$work/data-bin" gen_subset=$split \
    batch_size=64 results_path="$work/predict" 2>&1 | tee "$work/predict_$split.log"
done
seqkit-score hyp="$work/predict/generate-valid.txt" | tee "$work/score_valid.txt"
