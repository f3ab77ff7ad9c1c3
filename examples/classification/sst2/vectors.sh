#!/usr/bin/env bash
# The word vectors of CNN-static and CNN-non-static: examples/word2vec's skip-gram recipe at Kim's
# 300 dimensions, on WikiText-2's training text lower-cased (SST-2 is lower-cased, and a vector is
# found by exact match), exported in word2vec's text format for model.embed_path=.
#   bash examples/classification/sst2/vectors.sh OUT_DIR      -> OUT_DIR/vectors.txt
# THREADS=N: common.threads of the training (default 2; 1 beside another run). The recipe's own
# settings otherwise (5 epochs, 2,570 updates, sparse_adam 0.04 chosen there on the validation loss);
# checkpoint_best is the lowest validation loss of the lower-cased valid split.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: vectors.sh OUT_DIR}"
src="$(python "$here/../../corpus.py" wikitext2)"
echo "wikitext2 files: $src" >&2
mkdir -p "$out/lower"
for split in train valid test; do  # str.lower, not tr: WikiText has non-ASCII words
  python -c 'import sys; sys.stdout.write(open(sys.argv[1], encoding="utf-8").read().lower())' \
    "$src/$split.txt" > "$out/lower/$split.txt"
done
seqkit-preprocess task=language_modeling trainpref="$out/lower/train.txt" validpref="$out/lower/valid.txt" \
  testpref="$out/lower/test.txt" destdir="$out/data-bin" overwrite=true workers=2 tokenizer=space
# the word2vec recipe's skip-gram with the optimizer it had when these vectors were made (2026-11-29:
# sparse_adam at 0.04; the recipe has trained with optimizer=pair_sgd since 2026-11-30)
seqkit-train --config "$here/../../word2vec/config.yaml" task.data="$out/data-bin" model.embed_dim=300 \
  optimizer=sparse_adam optimizer.lr=0.04 \
  checkpoint.save_dir="$out/skipgram" common.threads="${THREADS:-2}" 2>&1 | tee "$out/skipgram.train.log"
seqkit-embed path="$out/skipgram/checkpoint_best.pt" export="$out/vectors.txt"
seqkit-embed path="$out/skipgram/checkpoint_best.pt" k=10 words="good bad funny boring movie actor"
