#!/usr/bin/env bash
# The Tatoeba de->en GPU recipe: prepare, train (config.yaml), translate test with checkpoint_best
# (chosen on valid loss), score.
#   bash examples/translation/tatoeba/run.sh [WORK_DIR] [key=value ...]
# WORK_DIR defaults to ./tatoeba-run; key=value settings go to seqkit-train (on a CPU, e.g.
# common.device=cpu common.precision=fp32). A WORK_DIR that holds data-bin/ reuses it, and one that
# holds a stopped run's checkpoints resumes it exactly (the 8 minutes are training time, kept in the
# checkpoint). TRAIN_TIMEOUT=S stops training after S seconds of wall time (SIGTERM: seqkit-train
# saves, then run.sh exits 3 and says so), for a machine that allows a command only so long.
# Leaves WORK_DIR/train.log (appended to on resuming), generate-test.log, best/generate-test.txt and
# score.txt.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:-tatoeba-run}"
shift $(( $# > 0 ? 1 : 0 ))
mkdir -p "$work"

[[ -f "$work/data-bin/preprocess.json" ]] || bash "$here/prepare.sh" "$work"

limit=()  # TRAIN_TIMEOUT=S: training stopped (SIGTERM: saved) after S seconds of wall time
[[ -n ${TRAIN_TIMEOUT:-} ]] && limit=(timeout -s TERM "$TRAIN_TIMEOUT")
set +e
"${limit[@]}" seqkit-train --config "$here/config.yaml" task.data="$work/data-bin" \
  checkpoint.save_dir="$work/checkpoints" "$@" 2>&1 | tee -a "$work/train.log"
rc=${PIPESTATUS[0]}
set -e
if (( rc == 124 )); then
  if [[ -f $work/checkpoints/checkpoint_last.pt ]]; then
    echo "run.sh: training stopped after TRAIN_TIMEOUT=$TRAIN_TIMEOUT s: run the same command again to resume" \
      "from $work/checkpoints/checkpoint_last.pt" >&2
  else
    echo "run.sh: training stopped after TRAIN_TIMEOUT=$TRAIN_TIMEOUT s, before its first checkpoint" >&2
  fi
  exit 3
fi
(( rc == 0 )) || exit "$rc"

seqkit-generate path="$work/checkpoints/checkpoint_best.pt" task.data="$work/data-bin" gen_subset=test \
  generation.beam=5 batch_size=128 results_path="$work/best" 2>&1 | tee "$work/generate-test.log"
echo "== checkpoint_best on Tatoeba test (beam 5)" >&2
seqkit-score hyp="$work/best/generate-test.txt" | tee "$work/score.txt"
