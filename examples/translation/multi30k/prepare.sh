#!/usr/bin/env bash
# Multi30k de->en: find (or download) the raw files, learn a joint sentencepiece BPE, binarize.
#   bash prepare.sh [OUT_DIR]        (default: ./data-bin next to this script)
# Uses $SEQKIT_DATA/multi30k or ../shared/data/multi30k when present, else downloads the public
# files (github.com/multi30k/dataset, data/task1/raw; examples/corpus.py).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/data-bin}"
vocab="${VOCAB:-8000}"

src="$(python "$here/../../corpus.py" multi30k)"
echo "multi30k raw files: $src" >&2

seqkit-preprocess source_lang=de target_lang=en \
  trainpref="$src/train" validpref="$src/val" testpref="$src/test_2016_flickr" \
  destdir="$out" overwrite=true joined_dictionary=true \
  tokenizer=sentencepiece_bpe tokenizer.vocab_size="$vocab" workers=2
