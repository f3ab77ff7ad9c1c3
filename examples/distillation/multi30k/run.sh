#!/usr/bin/env bash
# Multi30k de->en distillation: the Transformer recipe's model as teacher, a student with a quarter
# of its parameters trained three ways for the updates of the same 45-minute budget, every model
# scored and timed.
#   bash examples/distillation/multi30k/run.sh [WORK_DIR] [STAGE ...]
# STAGE: teacher, kd-data, nokd, wordkd, seqkd, seqwordkd, eval (default: all, in this order). A stage whose
# output exists is skipped, so the recipe resumes where it stopped (a training run stopped midway
# resumes from its checkpoint_last.pt, its updates counted across the restarts).
#   teacher  the Transformer recipe (examples/translation/multi30k/config.yaml) for 2,763 updates, ~45 min
#   kd-data  the teacher's beam-5 output over the 29,000 training sentences (Kim & Rush's
#            sequence-level distillation data): WORK_DIR/data-kd, ~3 min
#   nokd     the student on the references
#   wordkd   the student on the references and the teacher's distribution at every target token
#            (criterion=distillation, alpha 0.5, T 1, the teacher's 8 best tokens kept per position)
#   seqkd    the student on the teacher's translations (data-kd)
#   seqwordkd both (Kim & Rush's Seq-KD + Word-KD): the student on data-kd, and at every target
#            token the teacher's distribution (criterion as wordkd)
#   eval     test_2016_flickr BLEU and chrF2 at beam 5 and greedy, and sentences/s at batch 64
#            and 1, of the teacher and each student: WORK_DIR/results.jsonl and results.md
# Update counts, not minutes, end every run (a budget that does not depend on the machine's speed or
# on what else runs beside: training is deterministic, so the default TEACHER_UPDATES=2763 gives the
# 45-minute teacher of the README bit for bit on a host of its kind). UPDATES=N trains each student
# for N updates (default: config_student.yaml's 8,890), TEACHER_UPDATES=N the teacher (default 2,763,
# what 45 minutes gave on 2026-11-25; the translation recipe's own run reached 2,647).
# SEED=N trains the students with common.seed=N in folders student-NAME-sN (three seeds for a
# comparison within 1.5 BLEU); eval scores every student folder there is.
# Choose on one split, report on another: checkpoint_best is chosen on valid (loss), eval scores
# valid and test_2016_flickr; a goal is judged on test once the budget was fixed beforehand.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mt="$here/../../translation/multi30k"
work="${1:-distill-run}"
shift $(( $# > 0 ? 1 : 0 ))
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(teacher kd-data nokd wordkd seqkd seqwordkd eval)
mkdir -p "$work"
data="$work/data-bin"
[[ -f "$data/preprocess.json" ]] || bash "$mt/prepare.sh" "$data"
teacher="$work/teacher/checkpoints/checkpoint_best.pt"

# word-level KD: the teacher's distribution at every target token, mixed half and half with the gold loss
word_kd=(criterion=distillation criterion.teacher="$teacher" criterion.alpha=0.5 criterion.temperature=1
         criterion.top_k=8 criterion.label_smoothing=0.1)

finished() { [[ -f "$1/train.log" ]] && grep -q "| done: " "$1/train.log"; }

train() {  # train NAME CONFIG key=value ...
  local name="$1" config="$2" updates="${UPDATES:-}" budget=() seed=(); shift 2
  [[ $name == teacher ]] && updates="${TEACHER_UPDATES:-2763}"
  [[ $name != teacher && -n ${SEED:-} ]] && { name="$name-s$SEED"; seed=(common.seed="$SEED"); }
  local dir="$work/$name"
  finished "$dir" && { echo "$name: trained already ($dir/train.log)"; return; }
  mkdir -p "$dir"
  [[ -n $updates ]] && budget=(optimization.stop_time_hours=0 optimization.max_update="$updates")
  seqkit-train --config "$config" checkpoint.save_dir="$dir/checkpoints" "$@" "${budget[@]}" "${seed[@]}" 2>&1 |
    tee -a "$dir/train.log"
}

for stage in "${stages[@]}"; do
  case "$stage" in
    teacher) train teacher "$mt/config.yaml" task.data="$data" ;;
    kd-data)
      if [[ -f "$work/data-kd/preprocess.json" ]]; then echo "kd-data: made already ($work/data-kd)"; else
        seqkit-generate path="$teacher" task.data="$data" gen_subset=train generation.beam=5 batch_size=64 \
          distill_to="$work/data-kd" 2>&1 | tee "$work/kd-data.log"
      fi ;;
    nokd) train student-nokd "$here/config_student.yaml" task.data="$data" ;;
    wordkd) train student-wordkd "$here/config_student.yaml" task.data="$data" "${word_kd[@]}" ;;
    seqkd) train student-seqkd "$here/config_student.yaml" task.data="$work/data-kd" ;;
    seqwordkd) train student-seqwordkd "$here/config_student.yaml" task.data="$work/data-kd" "${word_kd[@]}" ;;
    eval)  # the teacher, then every student folder (seeded ones included)
      # shellcheck disable=SC2046
      python "$here/evaluate.py" "$work" teacher $(cd "$work" && ls -d student-* 2>/dev/null) ;;
    *) echo "run.sh: error: unknown stage '$stage' (teacher kd-data nokd wordkd seqkd seqwordkd eval)" >&2; exit 2 ;;
  esac
done
