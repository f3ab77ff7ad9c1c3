#!/usr/bin/env bash
# Pretrain one body for the transfer tables, on WikiText-2 in one shared sentencepiece BPE of 8,000
# pieces (every body reads SST-2, RTE and CoNLL-2003 in the same pieces), with the pretraining
# recipes' own settings and a time budget.
#   bash examples/transfer/pretrain.sh WORK_DIR BODY [MINUTES]      (default 30 minutes)
# BODY: gpt lstm_lm (examples/language_model/wikitext2 configs), elmo bert roberta electra bart
# (examples/pretraining/wikitext2/objectives.sh). Leaves WORK_DIR/data-bin (the shared vocabulary)
# and WORK_DIR/BODY/checkpoints/checkpoint_best.pt, with BODY.train.log beside it.
# UPDATES=N stops at N updates instead of the time budget (training is deterministic, so N = the update
# count a README row reports gives that body bit for bit on any host; MINUTES still sets the schedule).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:?usage: pretrain.sh WORK_DIR BODY [MINUTES]}"
body="${2:?usage: pretrain.sh WORK_DIR BODY [MINUTES]}"
minutes="${3:-30}"
lm="$here/../language_model/wikitext2"
mkdir -p "$work"
[[ -f "$work/data-bin/preprocess.json" ]] || bash "$lm/prepare.sh" "$work/data-bin" bpe
hours=$(python -c "print(round($minutes / 60, 4))")
budget=(optimization.stop_time_hours="$hours")
[[ -n ${UPDATES:-} ]] && budget=(optimization.stop_time_hours=0 optimization.max_update="$UPDATES")
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
      "${budget[@]}" lr_scheduler.period_updates="$period" "${extra[@]}" 2>&1 |
      tee "$work/$body.train.log"
    seqkit-eval-lm path="$work/$body/checkpoints/checkpoint_best.pt" task.data="$work/data-bin" gen_subset=valid \
      tokens_per_sample=128 | tee "$work/$body.eval.json" ;;
  elmo|bert|roberta|electra|bart)
    KIND=bpe bash "$here/../pretraining/wikitext2/objectives.sh" "$work" "$minutes" "$body" ;;
  *) echo "pretrain.sh: error: unknown body '$body' (gpt lstm_lm elmo bert roberta electra bart)" >&2; exit 2 ;;
esac
