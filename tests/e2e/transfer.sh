#!/usr/bin/env bash
# End-to-end transfer in a few seconds of one CPU core:
#   synthetic text -> seqkit-preprocess task=language_modeling (sentencepiece BPE) -> seqkit-train a
#   tiny pretraining run (TASK, MODEL) -> seqkit-eval-lm on its test split -> seqkit-preprocess
#   task=classification vocab_from=<that checkpoint> -> seqkit-train model=pretrained_classifier
#   -> seqkit-score of its dev predictions -> seqkit-generate on stdin sentences.
#
#   bash tests/e2e/transfer.sh WORKDIR TASK MODEL [pretraining overrides ...]
#        (TASK: language_modeling, masked_lm or denoising; MODEL: gpt_tiny, roberta_mini, ...)
#
# The seqkit-* console scripts (and the python that has seqkit) must come first on PATH.
# Leaves in WORKDIR: raw/, lm-bin/, pretrain/, eval.json, cls-bin/, finetune/, score.txt, stdin.txt.
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
for split, n in (("train", 80), ("dev", 16)):
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

seqkit-train task=classification task.data=cls-bin model=pretrained_classifier \
    model.path=pretrain/checkpoint_last.pt criterion=cross_entropy common.threads=1 optimizer=adam \
    optimizer.lr=3e-3 lr_scheduler=fixed optimization.max_update=12 dataset.max_tokens=256 \
    checkpoint.save_dir=finetune

# the fine-tuned checkpoint stands alone
mv pretrain pretrain.moved
seqkit-generate path=finetune/checkpoint_last.pt task.data=cls-bin gen_subset=valid common.threads=1 > gen.txt
seqkit-score hyp=gen.txt | tee score.txt
printf 'the film was awful .\na lovely story .\n' | seqkit-generate path=finetune/checkpoint_last.pt input=- \
    common.threads=1 > stdin.txt
mv pretrain.moved pretrain
cat eval.json stdin.txt
