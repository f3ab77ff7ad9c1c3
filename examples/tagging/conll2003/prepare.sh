#!/usr/bin/env bash
# CoNLL-2003 English NER: binarize eng.train / eng.testa / eng.testb with a cased sentencepiece BPE.
#   bash prepare.sh [OUT_DIR] [key=value ...]   (default: ./data-bin next to this script)
# key=value goes to seqkit-preprocess, e.g. vocab_from=CK.pt for a pretrained model's vocabulary.
# CoNLL-2003 is licensed text (Reuters RCV1): this script never downloads it. It uses
# $SEQKIT_DATA/conll2003 or ../shared/data/conll2003 when present, else $CONLL2003_DIR: point it
# at the folder that holds your own copy of eng.train, eng.testa and eng.testb.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/data-bin}"
shift $(( $# > 1 ? 1 : $# ))
vocab="${VOCAB:-8000}"
repo_root="$(cd "$here/../../.." && pwd)"

src=""
for cand in "${CONLL2003_DIR:-}" "${SEQKIT_DATA:-}/conll2003" "$repo_root/../shared/data/conll2003"; do
  if [[ -n "$cand" && -f "$cand/eng.train" ]]; then src="$cand"; break; fi
done
if [[ -z "$src" ]]; then
  echo "prepare.sh: error: CoNLL-2003 not found. It is licensed text and is not downloaded here:" \
       "set CONLL2003_DIR to the folder holding your copy of eng.train, eng.testa, eng.testb" >&2
  exit 1
fi
echo "conll2003 files: $src" >&2

# words are split into pieces; each word's tag (IOB1, as distributed) goes on its first piece
seqkit-preprocess task=tagging word_column=0 tag_column=-1 \
  trainpref="$src/eng.train" validpref="$src/eng.testa" testpref="$src/eng.testb" \
  destdir="$out" overwrite=true tokenizer=sentencepiece_bpe tokenizer.vocab_size="$vocab" "$@"
