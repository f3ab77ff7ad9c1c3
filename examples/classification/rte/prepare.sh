#!/usr/bin/env bash
# GLUE RTE (sentence pairs, entailment / not_entailment): find (or download) the TSV files,
# learn a small sentencepiece BPE on the training pairs, binarize as <s> premise </s> hypothesis </s>.
#   bash prepare.sh [OUT_DIR] [key=value ...]   (default: ./data-bin next to this script)
# key=value goes to seqkit-preprocess, e.g. vocab_from=CK.pt for a pretrained model's vocabulary.
# Uses $SEQKIT_DATA/glue_rte or ../shared/data/glue_rte when present, else downloads GLUE's RTE.zip.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/data-bin}"
shift $(( $# > 1 ? 1 : $# ))
vocab="${VOCAB:-4000}"

src="$(python "$here/../../corpus.py" glue_rte)"
echo "rte raw files: $src" >&2

seqkit-preprocess task=classification 'text_columns=[sentence1,sentence2]' label_column=label \
  trainpref="$src/train.tsv" validpref="$src/dev.tsv" testpref="$src/test.tsv" \
  destdir="$out" overwrite=true tokenizer=sentencepiece_bpe tokenizer.vocab_size="$vocab" "$@"
