#!/usr/bin/env bash
# Pretrain one body for the transfer tables, on WikiText-2 in one shared sentencepiece BPE of 8,000
# pieces (every body reads SST-2, RTE and CoNLL-2003 in the same pieces), with the pretraining
# recipes' own settings, for the update count of the body's transfer rows.
#   bash examples/transfer/pretrain.sh WORK_DIR BODY [MINUTES]      (default 30: the schedule's minutes)
# BODY: gpt lstm_lm (examples/language_model/wikitext2 configs), elmo bert roberta electra xlnet bart
# (examples/pretraining/wikitext2/objectives.sh). Leaves WORK_DIR/data-bin (the shared vocabulary)
# and WORK_DIR/BODY/checkpoints/checkpoint_best.pt, with BODY.train.log beside it.
# A body stops at the update count its README rows report for 30 minutes (training is deterministic,
# so the count gives that body bit for bit on any host): gpt 2,157, lstm_lm 2,577, elmo 1,173,
# roberta 2,896, electra 2,133, bart 1,630 (30 minutes each on the 2-core AMD EPYC of 2026-11-25, other
# work beside some: the minutes are an estimate). bert and xlnet have no row: give UPDATES=N or CLOCK=1.
# UPDATES=N stops at N updates instead (MINUTES still sets the schedule). CLOCK=1 stops after MINUTES
# of training instead, a clock budget: the body then depends on the machine's load. THREADS=N: the
# threads of each seqkit-train (common.threads, default 2; 1 beside another run).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:?usage: pretrain.sh WORK_DIR BODY [MINUTES]}"
body="${2:?usage: pretrain.sh WORK_DIR BODY [MINUTES]}"
minutes="${3:-30}"
lm="$here/../language_model/wikitext2"
case "$body" in
  gpt|lstm_lm|elmo|bert|roberta|electra|xlnet|bart) ;;
  *) echo "pretrain.sh: error: unknown body '$body' (gpt lstm_lm elmo bert roberta electra xlnet bart)" >&2; exit 2 ;;
esac
declare -A COUNT=([gpt]=2157 [lstm_lm]=2577 [elmo]=1173 [roberta]=2896 [electra]=2133 [bart]=1630)
updates="${UPDATES:-}"
if [[ -n ${CLOCK:-} ]]; then
  [[ -z $updates ]] || { echo "pretrain.sh: error: CLOCK=$CLOCK and UPDATES=$updates both set the budget; drop one" >&2; exit 2; }
  budget=(optimization.max_update=0 optimization.stop_time_hours="$(python -c "print(round($minutes / 60, 4))")")
else
  if [[ -z $updates ]]; then
    if [[ $minutes != 30 || -z ${COUNT[$body]:-} ]]; then
      echo "pretrain.sh: error: no measured update count for $body in $minutes minutes; give UPDATES=N, or CLOCK=1" \
        "for a clock budget of $minutes minutes" >&2; exit 2
    fi
    updates="${COUNT[$body]}"
  fi
  budget=(optimization.stop_time_hours=0 optimization.max_update="$updates")
fi
mkdir -p "$work"
[[ -f "$work/data-bin/preprocess.json" ]] || bash "$lm/prepare.sh" "$work/data-bin" bpe
case "$body" in
  gpt|lstm_lm)
    config="$lm/config_transformer_bpe.yaml"
    # the cosine spans what the budget allows on the 2-core EPYC (GPT ~47 updates a minute, LSTM ~75)
    period=$(( minutes * 47 ))
    extra=()
    if [[ $body == lstm_lm ]]; then  # the word recipe's adaptive softmax becomes a tied 8k softmax
      config="$lm/config_lstm.yaml"; period=$(( minutes * 75 ))
      extra=(model.share_input_output_embed=true "model.adaptive_softmax_cutoff=[]" criterion=cross_entropy)
    fi
    seqkit-train --config "$config" task.data="$work/data-bin" checkpoint.save_dir="$work/$body/checkpoints" \
      "${budget[@]}" lr_scheduler.period_updates="$period" common.threads="${THREADS:-2}" "${extra[@]}" 2>&1 |
      tee "$work/$body.train.log"
    seqkit-eval-lm path="$work/$body/checkpoints/checkpoint_best.pt" task.data="$work/data-bin" gen_subset=valid \
      tokens_per_sample=128 | tee "$work/$body.eval.json" ;;
  *)  # elmo bert roberta electra xlnet bart: the objectives recipe, given this body's budget
    if [[ -n ${CLOCK:-} ]]; then KIND=bpe bash "$here/../pretraining/wikitext2/objectives.sh" "$work" "$minutes" "$body"
    else KIND=bpe UPDATES="$updates" bash "$here/../pretraining/wikitext2/objectives.sh" "$work" "$body"; fi ;;
esac
