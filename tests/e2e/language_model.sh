#!/usr/bin/env bash
# End-to-end language modeling in a few seconds of one CPU core:
#   synthetic text -> seqkit-preprocess task=language_modeling (sentencepiece BPE) -> seqkit-train
#   (a tiny model, a few updates) -> seqkit-eval-lm on the test split (with a context window)
#   -> seqkit-generate continuing two prompts from stdin (beam search, then sampling).
#
#   bash tests/e2e/language_model.sh WORKDIR MODEL      (MODEL: gpt_tiny, lstm_lm_tiny, ...)
#
# The seqkit-* console scripts (and the python that has seqkit) must come first on PATH.
# Leaves in WORKDIR: raw/, data-bin/, checkpoints/, eval.json, beam.txt, sample.txt.
set -euo pipefail

work=${1:?usage: bash tests/e2e/language_model.sh WORKDIR MODEL}
model=${2:?usage: bash tests/e2e/language_model.sh WORKDIR MODEL}
mkdir -p "$work/raw"
cd "$work"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

# synthetic paragraphs separated by blank lines, as WikiText lays them out
python - <<'PY'
import random

rng = random.Random(0)
NOUNS = ["cat", "dog", "river", "castle", "king", "garden"]
VERBS = ["sees", "likes", "crosses", "guards", "finds"]
ADJ = ["old", "green", "quiet", "famous"]


def sentence():
    return f"The {rng.choice(ADJ)} {rng.choice(NOUNS)} {rng.choice(VERBS)} the {rng.choice(NOUNS)} ."


for split, n in (("train", 120), ("valid", 12), ("test", 12)):
    with open(f"raw/{split}.txt", "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(" ".join(sentence() for _ in range(rng.randint(1, 3))) + "\n" + ("\n" if i % 3 == 2 else ""))
PY

seqkit-preprocess task=language_modeling trainpref=raw/train.txt validpref=raw/valid.txt testpref=raw/test.txt \
    destdir=data-bin tokenizer=sentencepiece_bpe tokenizer.vocab_size=60 tokenizer.num_threads=1

seqkit-train task=language_modeling task.data=data-bin task.tokens_per_sample=32 model="$model" \
    criterion=cross_entropy common.threads=1 optimizer.lr=1e-2 lr_scheduler=fixed optimization.max_update=15 \
    dataset.max_tokens=256 checkpoint.save_dir=checkpoints

seqkit-eval-lm path=checkpoints/checkpoint_best.pt task.data=data-bin gen_subset=test tokens_per_sample=16 \
    context_window=16 common.threads=1 > eval.json

printf 'The old cat\nThe famous\n' | seqkit-generate path=checkpoints/checkpoint_best.pt input=- \
    generation.beam=3 generation.max_len_b=12 common.threads=1 > beam.txt
printf 'The old cat\nThe famous\n' | seqkit-generate path=checkpoints/checkpoint_best.pt input=- \
    generation.beam=2 generation.nbest=2 generation.sampling=true generation.sampling_topp=0.9 \
    generation.max_len_b=12 common.threads=1 > sample.txt
cat eval.json beam.txt
