#!/usr/bin/env bash
# WikiText-2 (tokenized, v1): find (or download) train/valid/test and binarize them.
#   bash prepare.sh [OUT_DIR] [word|bpe|char]  (default: ./data-bin next to this script, word)
# word: a word vocabulary over the pre-tokenized text (every type of the training split: 33,278
#       with the end of line; WikiText's own <unk> stays <unk>), the setting of the published numbers.
# bpe:  a sentencepiece BPE of $VOCAB pieces (default 8000); seqkit-eval-lm's per-word perplexity
#       divides by the same words, so the two are comparable.
# char: one piece per character (tokenizer=char; spaces as ▁), for character-level models.
# Uses $SEQKIT_DATA/wikitext2 or ../shared/data/wikitext2 when present (train.txt, valid.txt,
# test.txt, as pytorch/examples ships them), else downloads pytorch/examples' copy (examples/corpus.py).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/data-bin}"
kind="${2:-word}"

src="$(python "$here/../../corpus.py" wikitext2)"
echo "wikitext2 files: $src" >&2

case "$kind" in
  word) tok=(tokenizer=space) ;;
  bpe) tok=(tokenizer=sentencepiece_bpe tokenizer.vocab_size="${VOCAB:-8000}") ;;
  char) tok=(tokenizer=char) ;;
  *) echo "prepare.sh: error: unknown vocabulary kind '$kind' (word, bpe or char)" >&2; exit 2 ;;
esac
seqkit-preprocess task=language_modeling trainpref="$src/train.txt" validpref="$src/valid.txt" \
  testpref="$src/test.txt" destdir="$out" overwrite=true workers=2 "${tok[@]}"
