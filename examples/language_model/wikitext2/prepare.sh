#!/usr/bin/env bash
# WikiText-2 (tokenized, v1): find (or download) train/valid/test and binarize them.
#   bash prepare.sh [OUT_DIR] [word|bpe|char]  (default: ./data-bin next to this script, word)
# word: a word vocabulary over the pre-tokenized text (every type of the training split: 33,278
#       with the end of line; WikiText's own <unk> stays <unk>), the setting of the published numbers.
# bpe:  a sentencepiece BPE of $VOCAB pieces (default 8000); seqkit-eval-lm's per-word perplexity
#       divides by the same words, so the two are comparable.
# char: one piece per character (tokenizer=char; spaces as ▁), for character-level models.
# Uses $SEQKIT_DATA/wikitext2 or ../shared/data/wikitext2 when present (train.txt, valid.txt,
# test.txt, as pytorch/examples ships them), else downloads pytorch/examples' copy into ./raw.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/data-bin}"
kind="${2:-word}"
repo_root="$(cd "$here/../../.." && pwd)"

src=""
for cand in "${SEQKIT_DATA:-}/wikitext2" "$repo_root/../shared/data/wikitext2"; do
  if [[ -f "$cand/train.txt" ]]; then src="$cand"; break; fi
done
if [[ -z "$src" ]]; then
  src="$here/raw"
  base=https://raw.githubusercontent.com/pytorch/examples/main/word_language_model/data/wikitext-2
  mkdir -p "$src"
  for split in train valid test; do
    [[ -f "$src/$split.txt" ]] || curl -fsSL -o "$src/$split.txt" "$base/$split.txt"
  done
fi
echo "wikitext2 files: $src" >&2

case "$kind" in
  word) tok=(tokenizer=space) ;;
  bpe) tok=(tokenizer=sentencepiece_bpe tokenizer.vocab_size="${VOCAB:-8000}") ;;
  char) tok=(tokenizer=char) ;;
  *) echo "prepare.sh: error: unknown vocabulary kind '$kind' (word, bpe or char)" >&2; exit 2 ;;
esac
seqkit-preprocess task=language_modeling trainpref="$src/train.txt" validpref="$src/valid.txt" \
  testpref="$src/test.txt" destdir="$out" overwrite=true workers=2 "${tok[@]}"
