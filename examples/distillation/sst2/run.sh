#!/usr/bin/env bash
# SST-2: the best from-scratch classifier (the BiLSTM of examples/classification/sst2, 9,378 updates)
# distilled into the Deep Averaging Network and Kim's CNN, each for its own recipe's update count
# (23,045 and 21,725), beside the same students trained on the gold labels alone.
#   bash examples/distillation/sst2/run.sh [WORK_DIR] [STAGE ...]
# STAGE: teacher, dan, dan-kd, cnn, cnn-kd (default: all, in this order); a stage whose score exists
# is skipped. Each writes WORK_DIR/NAME/score_dev.txt (dev accuracy at the checkpoint chosen on a
# split held out from train: ../../classification/carve.sh, 10% of the sentences; CARVE=0.05
# CARVE_UNIT=example: the row carve of the 2026-11-27 tables; CARVE=0: chosen on dev) as the
# classification recipes do.
# SEED=N trains the students (not the teacher) with common.seed=N, in folders NAME-sN. Each model
# trains for its config's update count, what its time budget gave on 2026-11-26 (teacher 9,378, DAN
# 23,045, CNN 21,725; a distilled student as many as its baseline): the same run on any machine, and
# students compared at equal updates (UPDATES=1, which asked for these counts, is the default now;
# estimates on the quiet 2-core AMD EPYC of that day: 18, 6 and 12 minutes). THREADS=N sets common.threads
# (the configs say 2; two runs side by side on 2 cores: THREADS=1 each).
# The teacher's outputs are computed once per training sentence (criterion=distillation keeps a
# classifier teacher's outputs): a distilled student's extra cost is that one teacher pass.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cls="$here/../../classification/sst2"
work="${1:-sst2-distill}"
shift $(( $# > 0 ? 1 : 0 ))
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(teacher dan dan-kd cnn cnn-kd)
mkdir -p "$work"
. "$cls/../carve.sh"; carve_defaults sst2
[[ -f "$work/data-bin/preprocess.json" ]] || bash "$cls/prepare.sh" "$work/data-bin" carve_valid="$CARVE" carve_unit="$CARVE_UNIT"
teacher="$work/teacher/checkpoints/checkpoint_best.pt"
# soft targets at T = 2 weigh as much as the gold labels (Hinton et al.: a higher T shows the
# teacher's "dark knowledge"; T^2 keeps the two terms' gradients at one scale)
kd=(criterion=distillation criterion.teacher="$teacher" criterion.alpha=0.5 criterion.temperature=2)

one() {  # one NAME CONFIG key=value ...: the classification recipe's run.sh over the shared data folder
  local name="$1" config="$2" extra=(); shift 2
  [[ -n ${THREADS:-} ]] && extra+=(common.threads="$THREADS")
  [[ $name != teacher && -n ${SEED:-} ]] && { name="$name-s$SEED"; extra+=(common.seed="$SEED"); }
  [[ -f "$work/$name/score_dev.txt" ]] && { echo "$name: done already ($work/$name/score_dev.txt)"; return; }
  mkdir -p "$work/$name"
  ln -sfn "$(cd "$work" && pwd)/data-bin" "$work/$name/data-bin"
  bash "$cls/run.sh" "$work/$name" "$config" "$@" "${extra[@]}"
}

for stage in "${stages[@]}"; do
  case "$stage" in
    teacher) one teacher "$cls/config_bilstm.yaml" ;;
    dan) one dan "$cls/config_dan.yaml" ;;
    dan-kd) one dan-kd "$cls/config_dan.yaml" "${kd[@]}" ;;
    cnn) one cnn "$cls/config_cnn.yaml" ;;
    cnn-kd) one cnn-kd "$cls/config_cnn.yaml" "${kd[@]}" ;;
    *) echo "run.sh: error: unknown stage '$stage' (teacher dan dan-kd cnn cnn-kd)" >&2; exit 2 ;;
  esac
done
for score in "$work"/*/score_dev.txt; do
  if [[ -f "$score" ]]; then echo "$(basename "$(dirname "$score")"): $(grep '^accuracy' "$score")"; fi
done
