#!/usr/bin/env bash
# One classification recipe: prepare the data (once), train, predict dev and test, score dev.
#   bash examples/classification/run.sh WORK_DIR CONFIG [key=value ...]
# CONFIG is a config_*.yaml of a dataset folder (sst2/, rte/); that folder's prepare.sh makes the
# data. Extra key=value settings go to seqkit-train. GLUE's test labels are hidden: test gets
# predictions only. Choose on one split, report on another: a seeded share of train is held out
# (carve_seed 1: split valid) and picks checkpoint_best; GLUE's dev (split valid1) is scored once,
# at that checkpoint. The share and unit: ../carve.sh (SST-2: 10% of its sentences, whole; RTE: 5%
# of the rows); CARVE= and CARVE_UNIT= override them, CARVE=0 chooses on dev itself (the protocol
# before 2026-11-27).
set -euo pipefail
work="$1"
config="$2"
shift 2
dataset_dir="$(cd "$(dirname "$config")" && pwd)"
mkdir -p "$work"

. "$dataset_dir/../carve.sh"; carve_defaults "$(basename "$dataset_dir")"
[[ -f "$work/data-bin/preprocess.json" ]] || bash "$dataset_dir/prepare.sh" "$work/data-bin" carve_valid="$CARVE" \
  carve_unit="$CARVE_UNIT"
dev=valid; [[ -f "$work/data-bin/valid1.input.idx" ]] && dev=valid1   # GLUE's dev, beside a carved valid

seqkit-train --config "$config" task.data="$work/data-bin" checkpoint.save_dir="$work/checkpoints" "$@" \
  2>&1 | tee "$work/train.log"

for split in $dev test; do
  seqkit-generate path="$work/checkpoints/checkpoint_best.pt" task.data="$work/data-bin" gen_subset=$split \
    batch_size=64 results_path="$work/predict" 2>&1 | tee "$work/predict_$split.log"
done
seqkit-score hyp="$work/predict/generate-$dev.txt" | tee "$work/score_dev.txt"
