#!/usr/bin/env bash
# End-to-end transfer in a few seconds of one CPU core:
#   synthetic text -> seqkit-preprocess task=language_modeling (sentencepiece BPE) -> seqkit-train a
#   tiny pretraining run (TASK, MODEL) -> seqkit-eval-lm on its test split -> seqkit-preprocess
#   task=classification vocab_from=<that checkpoint> -> seqkit-train model=pretrained_classifier
#   -> seqkit-score of its dev predictions -> seqkit-generate on stdin sentences.
#
#   [MODES="full lora ..."] bash tests/e2e/transfer.sh WORKDIR TASK MODEL [pretraining overrides ...]
#        (TASK: language_modeling, masked_lm or denoising; MODEL: gpt_tiny, roberta_mini, ...)
#
# MODES (default: full): the model.adapt modes to fine-tune with, each into finetune-MODE/ and
# scored into score-MODE.txt; a parameter-efficient mode's checkpoint is then shown to need its base
# (needs-base-MODE.txt: the one-line error) and, written by seqkit-export format=checkpoint, to
# stand alone (standalone-MODE.txt: its predictions, which equal those with the base).
# HEAD=bilstm fine-tunes with model.head=bilstm (a small task BiLSTM over the body's vectors).
# The seqkit-* console scripts (and the python that has seqkit) must come first on PATH.
# Leaves in WORKDIR: raw/, lm-bin/, pretrain/, eval.json, cls-bin/, finetune/ (the first mode's),
# score.txt, stdin.txt, and per mode finetune-MODE/, gen-MODE.txt, score-MODE.txt.
set -euo pipefail

work=${1:?usage: bash tests/e2e/transfer.sh WORKDIR TASK MODEL [overrides ...]}
task=${2:?usage: bash tests/e2e/transfer.sh WORKDIR TASK MODEL [overrides ...]}
model=${3:?usage: bash tests/e2e/transfer.sh WORKDIR TASK MODEL [overrides ...]}
shift 3
mkdir -p "$work/raw"
cd "$work"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

# running text for pretraining; reviews over the same words for fine-tuning (label: the polarity word)
python - <<'PY'
import random

rng = random.Random(0)
POLARITY = {"neg": ["bad", "awful", "dull"], "pos": ["good", "great", "lovely"]}
FILLER = ["the", "film", "was", "a", "story", "with", "very", "plot", "actors", "and", "its"]


def sentence(polarity):
    words = [rng.choice(FILLER) for _ in range(rng.randint(2, 6))]
    words.insert(rng.randint(0, len(words)), rng.choice(POLARITY[polarity]))
    return " ".join(words) + " ."


for split, n in (("train", 150), ("valid", 15), ("test", 15)):
    with open(f"raw/{split}.txt", "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(" ".join(sentence(rng.choice(["neg", "pos"])) for _ in range(rng.randint(1, 3))) + "\n")
for split, n in (("train", 120), ("dev", 48)):
    with open(f"raw/{split}.tsv", "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n")
        for i in range(n):
            label = rng.choice(["neg", "pos"])
            f.write(f"{sentence(label)}\t{label}\n")
PY

seqkit-preprocess task=language_modeling trainpref=raw/train.txt validpref=raw/valid.txt testpref=raw/test.txt \
    destdir=lm-bin tokenizer=sentencepiece_bpe tokenizer.vocab_size=60 tokenizer.num_threads=1

seqkit-train task="$task" task.data=lm-bin task.tokens_per_sample=32 model="$model" common.threads=1 \
    optimizer=adam optimizer.lr=3e-3 lr_scheduler=fixed optimization.max_update=10 dataset.max_tokens=256 \
    checkpoint.save_dir=pretrain "$@"

seqkit-eval-lm path=pretrain/checkpoint_last.pt task.data=lm-bin gen_subset=test common.threads=1 > eval.json

# the classification data in the pretraining run's own pieces and dictionary
seqkit-preprocess task=classification trainpref=raw/train.tsv validpref=raw/dev.tsv destdir=cls-bin \
    vocab_from=pretrain/checkpoint_last.pt

# each mode's rate: parameter-efficient modes train few numbers and take larger steps
declare -A LR=([full]=3e-3 [ulmfit]=1e-2 [frozen]=1e-2 [bitfit]=3e-3 [adapter]=1e-2 [lora]=1e-2 [prompt]=3e-2)
modes=(${MODES:-full})
for mode in "${modes[@]}"; do
  extra=(lr_scheduler=fixed)
  [[ $mode == ulmfit ]] && extra=(lr_scheduler=slanted_triangular)
  [[ $mode == prompt ]] && extra+=(model.prompt.length=4)
  [[ ${HEAD:-default} == bilstm ]] && extra+=(model.head=bilstm model.bilstm.embed_dim=8 model.bilstm.hidden_dim=8
                                              model.bilstm.head_dim=8 model.bilstm.dropout=0)
  seqkit-train task=classification task.data=cls-bin model=pretrained_classifier model.adapt="$mode" \
      model.path=pretrain/checkpoint_last.pt criterion=cross_entropy common.threads=1 optimizer=adam \
      optimizer.lr="${LR[$mode]}" optimization.max_update=40 dataset.max_tokens=256 \
      checkpoint.save_dir="finetune-$mode" "${extra[@]}"
  seqkit-generate path="finetune-$mode/checkpoint_last.pt" task.data=cls-bin gen_subset=valid common.threads=1 \
      > "gen-$mode.txt"
  seqkit-score hyp="gen-$mode.txt" | tee "score-$mode.txt"
done
first=${modes[0]}
cp -r "finetune-$first" finetune
cp "score-$first.txt" score.txt

# a full fine-tuning stands alone; a parameter-efficient one needs its base, unless exported whole
mv pretrain pretrain.moved
for mode in "${modes[@]}"; do
  if [[ $mode == full || $mode == ulmfit ]]; then
    seqkit-generate path="finetune-$mode/checkpoint_last.pt" task.data=cls-bin gen_subset=valid common.threads=1 \
        > "alone-$mode.txt"
    continue
  fi
  if seqkit-generate path="finetune-$mode/checkpoint_last.pt" task.data=cls-bin gen_subset=valid common.threads=1 \
      > /dev/null 2> "needs-base-$mode.txt"; then
    echo "a model.adapt=$mode checkpoint generated without its base" >&2
    exit 1
  fi
done
mv pretrain.moved pretrain
for mode in "${modes[@]}"; do
  [[ $mode == full || $mode == ulmfit ]] && continue
  seqkit-export format=checkpoint path="finetune-$mode/checkpoint_last.pt" output="standalone-$mode.pt"
  mv pretrain pretrain.moved
  seqkit-generate path="standalone-$mode.pt" task.data=cls-bin gen_subset=valid common.threads=1 > "standalone-$mode.txt"
  mv pretrain.moved pretrain
done
printf 'the film was awful .\na lovely story .\n' | seqkit-generate path=finetune/checkpoint_last.pt input=- \
    common.threads=1 > stdin.txt
cat eval.json stdin.txt
