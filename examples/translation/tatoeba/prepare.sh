#!/usr/bin/env bash
# Tatoeba de->en: a seeded split with no sentence of valid or test in train (split.py), a joint
# sentencepiece BPE learned on train, binarized.
#   bash prepare.sh OUT_DIR        -> OUT_DIR/raw/{train,valid,test}.{de,en}, OUT_DIR/data-bin
# deu.txt is read from $DATA when set (a folder holding it), else from $SEQKIT_DATA/tatoeba_deu_eng or
# ../shared/data/tatoeba_deu_eng, else downloaded (examples/corpus.py). VOCAB: BPE pieces (16000);
# TEST_PAIRS, VALID_PAIRS: the split's sizes (1000 each).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: prepare.sh OUT_DIR}"
vocab="${VOCAB:-16000}"
src="${DATA:-$(python3 "$here/../../corpus.py" tatoeba_deu_eng)}"
echo "tatoeba deu.txt: $src" >&2

python3 "$here/split.py" "$src" "$out/raw" --test "${TEST_PAIRS:-1000}" --valid "${VALID_PAIRS:-1000}" >&2
seqkit-preprocess source_lang=de target_lang=en \
  trainpref="$out/raw/train" validpref="$out/raw/valid" testpref="$out/raw/test" \
  destdir="$out/data-bin" overwrite=true joined_dictionary=true \
  tokenizer=sentencepiece_bpe tokenizer.vocab_size="$vocab" workers="${WORKERS:-2}"
