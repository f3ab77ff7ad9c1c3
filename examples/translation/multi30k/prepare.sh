#!/usr/bin/env bash
# Multi30k de->en: find (or download) the raw files, learn a joint sentencepiece BPE, binarize.
#   bash prepare.sh [OUT_DIR]        (default: ./data-bin next to this script)
# Uses $SEQKIT_DATA/multi30k or ../shared/data/multi30k when present, else downloads the public
# files (github.com/multi30k/dataset, data/task1/raw) into ./raw.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/data-bin}"
vocab="${VOCAB:-8000}"
repo_root="$(cd "$here/../../.." && pwd)"

src=""
for cand in "${SEQKIT_DATA:-}/multi30k" "$repo_root/../shared/data/multi30k"; do
  if [[ -f "$cand/train.de.gz" ]]; then src="$cand"; break; fi
done
if [[ -z "$src" ]]; then
  src="$here/raw"
  mkdir -p "$src"
  base="https://raw.githubusercontent.com/multi30k/dataset/a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw"
  for split in train val test_2016_flickr; do
    for lang in de en; do
      [[ -f "$src/$split.$lang.gz" ]] || curl -fsSL -o "$src/$split.$lang.gz" "$base/$split.$lang.gz"
    done
  done
fi
echo "multi30k raw files: $src" >&2

seqkit-preprocess source_lang=de target_lang=en \
  trainpref="$src/train" validpref="$src/val" testpref="$src/test_2016_flickr" \
  destdir="$out" overwrite=true joined_dictionary=true \
  tokenizer=sentencepiece_bpe tokenizer.vocab_size="$vocab" workers=2
