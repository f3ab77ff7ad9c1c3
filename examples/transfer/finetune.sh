#!/usr/bin/env bash
# One row of a transfer table: fine-tune a pretrained body on a task in one adaptation mode, score
# the dev split, and write the row (score, trainable parameters, checkpoint size, wall time).
#   bash examples/transfer/finetune.sh WORK_DIR TASK BODY MODE [key=value ...]
# TASK: sst2 (dev accuracy), rte (dev accuracy), conll (testb entity F1; needs CONLL2003_DIR or
# ../shared/data/conll2003). BODY: a folder of WORK_DIR made by pretrain.sh. MODE: a model.adapt
# mode (full frozen adapter lora bitfit prompt ulmfit), scratch (the body's architecture from
# random weights, trained in full) or icl (a causal LM classifies in context, no training: SHOTS
# labelled training examples in each prompt, default 8, each label's verbalizer scored; sst2 and
# rte; the run folder is BODY-icl-kSHOTS; CALIBRATE=1 adds Zhao et al.'s contextual calibration,
# folder BODY-icl-kSHOTS-cal). ulmfit first trains the body's own objective on the task's
# training text (ULMFiT's middle stage, LM_UPDATES updates, default 500). key=value settings go
# to the fine-tuning seqkit-train. Leaves WORK_DIR/runs/TASK/BODY-MODE/ with train.log, score.txt
# and row.json; checkpoints in .../checkpoints. RATE=1e-3 replaces the mode's learning rate (the run
# folder is then BODY-MODE-lrRATE), EPOCHS=N the task's number of epochs (folder suffix -eN), and
# TAG=name names a variant made by key=value settings (folder suffix -name), SEED=N the seed of the
# head's initialisation, dropout and batch order (common.seed, default 1; folder suffix -sN), THREADS=N
# the threads of every seqkit-train here (common.threads, default 2; 1 beside another run).
# Choose on one split, report on another: SST-2 and RTE (GLUE hides its test labels) hold out a
# seeded share of train (carve_seed 1, the same for every row and seed: split `valid`); the epoch is
# chosen on it and GLUE's dev (split valid1) is scored once, at that checkpoint. The share and unit:
# ../classification/carve.sh (SST-2: 10% of its sentences, whole, in data folder
# sst2-carved-sentence-bin and run folders suffixed -bysentence; RTE: 5% of the rows); CARVE= and
# CARVE_UNIT= override them (CARVE=0.05 CARVE_UNIT=example: SST-2's row carve of the 2026-11-27
# tables). CoNLL-2003 chooses on testa and reports testb.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
usage="usage: finetune.sh WORK_DIR TASK BODY MODE [key=value ...]"
work="${1:?$usage}"; task="${2:?$usage}"; body="${3:?$usage}"; mode="${4:?$usage}"
shift 4
ck="$work/$body/checkpoints/checkpoint_best.pt"
[[ -f "$ck" ]] || { echo "finetune.sh: error: $ck not found: run pretrain.sh $work $body first" >&2; exit 1; }
[[ $mode == icl && $task == conll ]] && { echo "finetune.sh: error: icl classifies sentences and pairs (sst2, rte), not conll" >&2; exit 1; }
shots="${SHOTS:-8}"
unit=""   # SST-2 and RTE hold out part of train (../classification/carve.sh); a sentence carve names its folders
if [[ $task != conll ]]; then
  . "$here/../classification/carve.sh"; carve_defaults "$task"
  [[ $CARVE_UNIT != example ]] && unit="$CARVE_UNIT"
fi
run="$work/runs/$task/$body-$mode${RATE:+-lr$RATE}${EPOCHS:+-e$EPOCHS}${TAG:+-$TAG}${unit:+-by$unit}${SEED:+-s$SEED}"
cal="${CALIBRATE:+-cal}"
[[ $mode == icl ]] && run="$work/runs/$task/$body-icl-k$shots$cal${SEED:+-s$SEED}"
mkdir -p "$run"
start=$(date +%s)

# the task in the body's pieces (once per body)
data="$work/$body/$task-bin"
case "$task" in
  sst2) prepare="$here/../classification/sst2/prepare.sh"; epochs=3; metric=accuracy; model=pretrained_classifier ;;
  rte) prepare="$here/../classification/rte/prepare.sh"; epochs=10; metric=accuracy; model=pretrained_classifier ;;
  conll) prepare="$here/../tagging/conll2003/prepare.sh"; epochs=5; metric=f1; model=pretrained_tagger ;;
  *) echo "finetune.sh: error: unknown task '$task' (sst2 rte conll)" >&2; exit 2 ;;
esac
epochs="${EPOCHS:-$epochs}"
carve=(); report=test   # CoNLL: choose on testa (valid), report testb (test)
if [[ $task != conll ]]; then
  data="$work/$body/$task-carved${unit:+-$unit}-bin"; report=valid1
  carve=(carve_valid="$CARVE" carve_seed=1 carve_unit="$CARVE_UNIT")
fi
[[ -f "$data/preprocess.json" ]] || bash "$prepare" "$data" vocab_from="$ck" "${carve[@]}"

# in context (Brown et al.'s setting): no training, nothing saved; the row counts no trainable
# parameter. Verbalizers and templates as GPT-3's paper words SST-2 and RTE.
if [[ $mode == icl ]]; then
  case "$task" in
    sst2) words='{"0": "terrible", "1": "great"}'; template='{0} It was {label} .' ;;
    rte) words='{"entailment": "True", "not_entailment": "False"}'; template='{0} question: {1} True or False? answer: {label}' ;;
  esac
  # the verbalizers in the order of the folder's labels (dict.label.txt: one label a line, line = id)
  verbalizers=$(python -c 'import json, sys; w = json.loads(sys.argv[2])
print("[" + ",".join(w[line.split()[0]] for line in open(sys.argv[1], encoding="utf-8")) + "]")' \
    "$data/dict.label.txt" "$words")
  seqkit-generate path="$ck" task.data="$data" gen_subset=$report icl.shots="$shots" common.seed="${SEED:-1}" \
    "icl.verbalizers=$verbalizers" "icl.template='$template'" icl.calibrate=$([[ -n $cal ]] && echo true || echo false) \
    common.threads="${THREADS:-2}" "$@" \
    > "$run/gen-$report.txt" 2> >(tee "$run/generate.log" >&2)
  seqkit-score hyp="$run/gen-$report.txt" | tee "$run/score.txt"
  python "$here/row.py" "$run" "$task" "$body" "icl-k$shots$cal" "$(( $(date +%s) - start ))" --base "$ck" \
    --seed "${SEED:-1}" | tee "$run/row.json"
  exit 0
fi

# ULMFiT's middle stage: the body's own objective over the task's training text, from its weights
# (no validation: the text is the task's training split)
if [[ $mode == ulmfit ]]; then
  lm_ck="$work/$body/$task-lm/checkpoints/checkpoint_last.pt"
  if [[ ! -f "$lm_ck" ]]; then
    mkdir -p "$work/$body/$task-lm"
    python - "$data/train.text.txt" "$work/$body/$task-lm/text.txt" <<'PY'
import sys
# a sentence pair's two sides and a tagged sentence's words become lines of running text
with open(sys.argv[1], encoding="utf-8") as f, open(sys.argv[2], "w", encoding="utf-8") as out:
    for line in f:
        for side in line.rstrip("\n").split("\t"):
            out.write(side + "\n")
PY
    seqkit-preprocess task=language_modeling trainpref="$work/$body/$task-lm/text.txt" \
      destdir="$work/$body/$task-lm/data-bin" overwrite=true vocab_from="$ck" tokenizer=space
    # shellcheck disable=SC2046
    seqkit-train $(python "$here/from_checkpoint.py" "$ck") task.data="$work/$body/$task-lm/data-bin" \
      checkpoint.restore_file="$ck" checkpoint.save_dir="$work/$body/$task-lm/checkpoints" \
      optimization.max_update="${LM_UPDATES:-500}" optimization.stop_time_hours=0 lr_scheduler=fixed \
      dataset.valid_subset="''" \
      lr_scheduler.warmup_updates=100 checkpoint.no_epoch_checkpoints=true common.threads="${THREADS:-2}" 2>&1 |
      tee "$work/$body/$task-lm.train.log"
  fi
  ck="$lm_ck"
fi

# updates: epochs x batches of 32 examples; the rate per mode (parameter-efficient modes train few
# numbers and take larger steps; Lester et al. tune prompts at much larger rates still)
n=$(python -c "import json; print(json.load(open('$data/preprocess.json'))['splits']['train'])")
updates=$(( epochs * (n + 31) / 32 ))
adapt=$mode; scratch=false
[[ $mode == scratch ]] && { adapt=full; scratch=true; }
declare -A LR=([full]=1e-4 [scratch]=5e-4 [ulmfit]=1e-3 [frozen]=1e-3 [adapter]=1e-3 [lora]=1e-3 [bitfit]=1e-3 [prompt]=1e-3)
schedule=(lr_scheduler=polynomial_decay lr_scheduler.warmup_updates=$(( updates / 16 )) lr_scheduler.total_num_update=$updates)
# ULMFiT unfreezes a group every 1/12 of the updates (one an epoch would not reach the lower
# groups in a few epochs of a large task)
[[ $mode == ulmfit ]] && schedule=(lr_scheduler=slanted_triangular model.ulmfit.unfreeze_every=$(( updates / 12 )))
seqkit-train task="$( [[ $task == conll ]] && echo tagging || echo classification )" task.data="$data" \
  model="$model" model.path="$ck" model.adapt="$adapt" model.scratch="$scratch" criterion=cross_entropy \
  optimizer=adamw optimizer.lr="${RATE:-${LR[$mode]}}" "${schedule[@]}" optimization.max_update="$updates" \
  optimization.max_epoch="$epochs" common.seed="${SEED:-1}" \
  dataset.max_tokens=4096 dataset.max_sentences=32 checkpoint.save_dir="$run/checkpoints" \
  checkpoint.best_checkpoint_metric="$metric" checkpoint.maximize_best_checkpoint_metric=true \
  checkpoint.no_epoch_checkpoints=true common.log_interval=200 common.threads="${THREADS:-2}" "$@" 2>&1 | tee "$run/train.log"

# the checkpoint chosen on `valid`, scored once on the reported split
seqkit-generate path="$run/checkpoints/checkpoint_best.pt" task.data="$data" gen_subset=$report batch_size=64 \
  > "$run/gen-$report.txt"
seqkit-score hyp="$run/gen-$report.txt" | tee "$run/score.txt"
python "$here/row.py" "$run" "$task" "$body" "$mode${EPOCHS:+, $EPOCHS epochs}${TAG:+, $TAG}" "$(( $(date +%s) - start ))" \
  "${RATE:-${LR[$mode]}}" --seed "${SEED:-1}" --data "$data" | tee "$run/row.json"
