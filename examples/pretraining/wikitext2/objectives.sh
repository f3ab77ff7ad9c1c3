#!/usr/bin/env bash
# Every pretraining objective on WikiText-2, a short run each, then seqkit-eval-lm on the validation
# split: its loss beside the unigram baseline of the same vocabulary. Collects one row per objective
# into WORK/objectives.md.
#   [KIND=bpe|word] bash examples/pretraining/wikitext2/objectives.sh WORK_DIR [MINUTES] [OBJECTIVE ...]
# KIND: the vocabulary, as examples/language_model/wikitext2/prepare.sh makes it: bpe (default,
# 8,000 sentencepiece pieces; VOCAB=N for another size) or word (33,278 types, four times the
# output-layer cost).
# Each objective trains for the update count of its run in the README (BPE 8k; deterministic: the
# same count gives the same checkpoint on any host): elmo 173, bart 374, t5 730 (what 12 minutes gave
# each), bert 1,243, albert 1,503, spanbert 1,270 (18 minutes), electra 2,988 (45 minutes), all on
# the 2-core AMD EPYC of 2026-11-23/24, the minutes an estimate. roberta has no run here: give it
# UPDATES=N or MINUTES. xlnet (permutation LM, run 2026-11-29) takes BERT's size (xlnet_mini = bert_mini's
# shape) and BERT's count, 1,243, so that the two compare at one budget. UPDATES=N stops every objective at N updates. MINUTES (a number as the second
# argument) gives each a clock budget instead: its figure then depends on the machine's load. THREADS=N:
# common.threads of each seqkit-train (default 2; 1 beside another run).
# OBJECTIVE: elmo bert roberta albert spanbert electra xlnet bart t5 (default: all but roberta and xlnet). GPT and the
# LSTM LM have their own recipe (examples/language_model/wikitext2), RoBERTa on the word vocabulary too
# (examples/masked_lm/wikitext2); roberta here is the same model on this script's vocabulary.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:?usage: objectives.sh WORK_DIR [MINUTES] [OBJECTIVE ...]}"
shift
minutes=""
if [[ $# -gt 0 && $1 =~ ^[0-9]+([.][0-9]+)?$ ]]; then minutes="$1"; shift; fi
objectives=("$@")
[[ ${#objectives[@]} -gt 0 ]] || objectives=(elmo bert albert spanbert electra bart t5)
if [[ -n $minutes && -n ${UPDATES:-} ]]; then
  echo "objectives.sh: error: MINUTES=$minutes and UPDATES=$UPDATES both set the budget; drop one" >&2; exit 2
fi
# the update counts of the README's runs (BPE 8k, AMD EPYC, 2026-11-23/24)
declare -A COUNT=([elmo]=173 [bart]=374 [t5]=730 [bert]=1243 [albert]=1503 [spanbert]=1270 [electra]=2988
               [xlnet]=1243)  # xlnet: BERT's count (no run of its own yet)
for objective in "${objectives[@]}"; do  # before any work: a name it does not know, a run it has no count for
  if [[ " elmo bert roberta albert spanbert electra xlnet bart t5 " != *" $objective "* ]]; then
    echo "objectives.sh: error: unknown objective '$objective' (elmo bert roberta albert spanbert electra xlnet bart t5)" >&2
    exit 2
  fi
  if [[ -z $minutes && -z ${UPDATES:-} && -z ${COUNT[$objective]:-} ]]; then
    echo "objectives.sh: error: $objective has no measured update count; give UPDATES=N or MINUTES" >&2; exit 2
  fi
done
mkdir -p "$work"
kind="${KIND:-bpe}"
[[ -f "$work/data-bin/preprocess.json" ]] || bash "$here/../../language_model/wikitext2/prepare.sh" "$work/data-bin" "$kind"
# ELMo's softmax: tied and full over BPE pieces; adaptive (untied) over 33k words
case "$kind" in
  word) elmo_softmax=(model.share_input_output_embed=false "model.adaptive_softmax_cutoff=[2000,10000]") ;;
  *) elmo_softmax=() ;;
esac

[[ -n $minutes ]] && hours=$(python -c "print(round($minutes / 60, 4))")
# no dropout on attention weights: with it SDPA leaves its fused CPU kernel (a third slower here)
mlm=(task=masked_lm task.tokens_per_sample=128 model.attention_dropout=0.0 criterion=masked_lm optimizer=adamw optimizer.lr=7e-4
     dataset.max_tokens=4096 checkpoint.best_checkpoint_metric=accuracy checkpoint.maximize_best_checkpoint_metric=true)
denoise=(task=denoising task.tokens_per_sample=128 model=transformer_small model.share_all_embeddings=true
         model.dropout=0.1 criterion=label_smoothed_cross_entropy optimizer=adamw optimizer.lr=7e-4
         dataset.max_tokens=4096 checkpoint.best_checkpoint_metric=accuracy checkpoint.maximize_best_checkpoint_metric=true)
for objective in "${objectives[@]}"; do
  case "$objective" in
    elmo) args=(task=language_modeling task.tokens_per_sample=128 model=elmo_small "${elmo_softmax[@]}"
                criterion=adaptive_loss optimizer=adam optimizer.lr=2e-3
                dataset.max_tokens=4096 optimization.clip_norm=0.25) ;;
    bert) args=("${mlm[@]}" model=bert_mini task.sentence_pairs=nsp task.mask_copies=10 task.mask_unit=word) ;;
    roberta) args=("${mlm[@]}" model=roberta_mini) ;;
    albert) args=("${mlm[@]}" model=albert_mini task.sentence_pairs=sop) ;;
    spanbert) args=("${mlm[@]}" model=spanbert_mini task.mask_unit=span) ;;
    electra) args=("${mlm[@]}" model=electra_mini criterion=electra task.leave_unmasked_prob=0 task.random_token_prob=0
                   model.sampling_temperature=2) ;;
    # XLNet: bert_mini's shape and the masked LMs' optimizer, batches and blocks; the last 1/6 of each
    # order predicted (K = 6, the paper's), scored by seqkit-eval-lm at those positions
    xlnet) args=(task=permutation_lm task.tokens_per_sample=128 task.partial_prediction=6 model=xlnet_mini
                 model.attention_dropout=0.0 criterion=cross_entropy optimizer=adamw optimizer.lr=7e-4
                 dataset.max_tokens=4096 checkpoint.best_checkpoint_metric=accuracy
                 checkpoint.maximize_best_checkpoint_metric=true) ;;
    bart) args=("${denoise[@]}" task.noise=bart) ;;
    t5) args=("${denoise[@]}" task.noise=t5) ;;
    *) echo "objectives.sh: error: unknown objective '$objective' (elmo bert roberta albert spanbert electra xlnet bart t5)" >&2
       exit 2 ;;
  esac
  out="$work/$objective"
  if [[ -n $minutes ]]; then budget=(optimization.stop_time_hours="$hours")
  else budget=(optimization.stop_time_hours=0 optimization.max_update="${UPDATES:-${COUNT[$objective]}}"); fi
  seqkit-train "${args[@]}" task.data="$work/data-bin" checkpoint.save_dir="$out/checkpoints" \
    "${budget[@]}" lr_scheduler=fixed lr_scheduler.warmup_updates=100 \
    checkpoint.no_epoch_checkpoints=true common.log_interval=50 common.threads="${THREADS:-2}" 2>&1 | tee "$out.train.log"
  # a language model is scored on blocks of 128; the others on the samples they trained on, which
  # seqkit-eval-lm takes from the checkpoint (it refuses tokens_per_sample= for them)
  block=(); [[ $objective == elmo ]] && block=(tokens_per_sample=128)
  seqkit-eval-lm path="$out/checkpoints/checkpoint_best.pt" task.data="$work/data-bin" gen_subset=valid \
    "${block[@]}" | tee "$out.eval.json"
  # the checkpoint loads into the classification task: SST-2 in its vocabulary, 60 fine-tuning updates
  bash "$here/../../classification/sst2/prepare.sh" "$out/sst2" vocab_from="$out/checkpoints/checkpoint_best.pt"
  seqkit-train task=classification task.data="$out/sst2" model=pretrained_classifier \
    model.path="$out/checkpoints/checkpoint_best.pt" optimizer=adamw optimizer.lr=1e-4 lr_scheduler=fixed \
    dataset.max_tokens=4096 optimization.max_update=60 checkpoint.save_dir="$out/sst2-checkpoints" \
    checkpoint.no_epoch_checkpoints=true common.log_interval=20 common.threads="${THREADS:-2}" 2>&1 | tee "$out.sst2.log"
done

# one table: language models compare perplexities, the others losses (bits per scored token)
python - "$work" "${objectives[@]}" <<'PY' | tee "$work/objectives.md"
import json
import math
import sys

work, names = sys.argv[1], sys.argv[2:]
print("| objective | updates | scored tokens | valid loss (bits) | unigram loss (bits) | accuracy % | unigram accuracy % "
      "| SST-2 dev accuracy %, 60 fine-tuning updates |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")


def last_valid(log_path):
    """(updates, valid accuracy) of the last [valid] line of a training log."""
    updates = accuracy = None
    for line in open(log_path, encoding="utf-8"):
        if "[valid]" in line:
            fields = dict(part.strip().split(" ", 1) for part in line.split("|")[3:] if " " in part.strip())
            updates, accuracy = fields.get("update"), fields.get("accuracy")
    return updates, accuracy


for name in names:
    r = json.loads(open(f"{work}/{name}.eval.json").read().strip().splitlines()[-1])
    updates, _ = last_valid(f"{work}/{name}.train.log")
    _, sst2 = last_valid(f"{work}/{name}.sst2.log")
    if "scored_tokens" in r:
        cells = [f"{r['scored_tokens']:,}", f"{r['loss']:.3f}", f"{r['unigram_loss']:.3f}", f"{r['accuracy']:.2f}",
                 f"{r['unigram_accuracy']:.2f}"]
    else:
        cells = [f"{r['tokens']:,}", f"{r['loss']:.3f}", f"{math.log2(r['unigram_ppl']):.3f}", "—", "—"]
    print(f"| {name} | {updates} | " + " | ".join(cells) + f" | {sst2} |")
    if "disc_loss" in r:  # ELECTRA's discriminator: its baseline is the base rate, not a unigram
        cells = [f"{r['disc_positions']:,}", f"{r['disc_loss']:.3f}", f"{r['disc_base_rate_loss']:.3f}",
                 f"{r['disc_accuracy']:.2f}", f"{r['disc_base_rate_accuracy']:.2f}"]
        print(f"| {name} discriminator (AUC {r['disc_auc']:.3f}; baseline: the base rate; the token alone: "
              f"{r['disc_token_only_loss']:.3f} bits, {r['disc_token_only_accuracy']:.2f}%) | {updates} | "
              + " | ".join(cells) + f" | {sst2} |")
PY
