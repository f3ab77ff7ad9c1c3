#!/usr/bin/env bash
# SST-2 (GLUE): find (or download) the TSV files and binarize them, word-level as in the papers.
#   bash prepare.sh [OUT_DIR] [key=value ...]   (default: ./data-bin next to this script)
# key=value goes to seqkit-preprocess, e.g. vocab_from=CK.pt for a pretrained model's vocabulary.
# Uses $SEQKIT_DATA/sst2 or ../shared/data/sst2 when present, else downloads GLUE's SST-2.zip
# (examples/corpus.py). The test split has no labels (GLUE keeps them): it is binarized for prediction only.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/data-bin}"
shift $(( $# > 1 ? 1 : $# ))

src="$(python "$here/../../corpus.py" sst2)"
echo "sst2 raw files: $src" >&2

# the sentences are already lower-cased and tokenized: a word vocabulary (space tokenizer) keeps
# every word of the 67k training phrases (14.8k types)
seqkit-preprocess task=classification text_columns=sentence label_column=label \
  trainpref="$src/train.tsv" validpref="$src/dev.tsv" testpref="$src/test.tsv" \
  destdir="$out" overwrite=true tokenizer=space "$@"
