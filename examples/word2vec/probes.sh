#!/usr/bin/env bash
# The one-epoch probes that chose the recipe's optimizer and learning rate (README.md, "How the
# optimizer was chosen"): each log under logs/ starts with its command.
#   bash examples/word2vec/probes.sh [WORK] [SET]   (WORK default: wt2-w2v-probes; SET: all (default),
#   adam (the recipe's choice, 2026-11-29) or pair_sgd (optimizer=pair_sgd's rates, 2026-11-30);
#   about 15 s a probe on 1 thread, 2-5 s with pair_sgd)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:-wt2-w2v-probes}"
set_="${2:-all}"
suffix=""; [ "$set_" = pair_sgd ] && suffix="-pair_sgd"  # the 2026-11-29 log stays as it was
src="$(python "$here/../corpus.py" wikitext2)"
mkdir -p "$work" "$here/logs"
seqkit-preprocess task=language_modeling trainpref="$src/train.txt" validpref="$src/valid.txt" \
  destdir="$work/data-bin" tokenizer=space thresholdsrc=5 overwrite=true 2> "$here/logs/probe-preprocess$suffix.log"

probe() {  # NAME UPDATES settings...
  local name=$1 n=$2; shift 2
  local cmd=(seqkit-train task=word2vec task.data="$work/data-bin" model=word2vec criterion=word2vec
             lr_scheduler=polynomial_decay optimization.max_update="$n" common.threads=1 common.log_interval="$n"
             checkpoint.save_dir="$work/$name" checkpoint.no_epoch_checkpoints=true "$@")
  { echo "# ${cmd[*]}"; "${cmd[@]}" 2>&1; } > "$here/logs/probe-$name.log"
}
if [ "$set_" = all ] || [ "$set_" = adam ]; then
for lr in 0.005 0.01 0.02 0.04 0.08; do
  probe "adam-lr$lr" 514 optimizer=sparse_adam optimizer.lr=$lr dataset.max_tokens=4096
done
# larger batches (fewer, cheaper updates an epoch): kept only if the valid loss stays as good (README.md)
for lr in 0.04 0.08; do
  probe "adam-lr$lr-8192" 256 optimizer=sparse_adam optimizer.lr=$lr dataset.max_tokens=8192
done
for lr in 0.02 0.04 0.08 0.16; do
  probe "adam-lr$lr-16384" 129 optimizer=sparse_adam optimizer.lr=$lr dataset.max_tokens=16384
done
probe sgd-lr0.025-512 4112 optimizer=sgd optimizer.lr=0.025 dataset.max_tokens=512 lr_scheduler.end_learning_rate=0.0000025
probe sgd-lr0.025-4096 100 optimizer=sgd optimizer.lr=0.025 dataset.max_tokens=4096 \
  lr_scheduler.end_learning_rate=0.0000025 common.log_interval=20
fi
if [ "$set_" = all ] || [ "$set_" = pair_sgd ]; then
# optimizer=pair_sgd, the C code's per-prediction update: its rate for each mode (the C code's
# defaults are 0.025 for skip-gram and 0.05 for CBOW), chosen on the same one-epoch valid loss (the
# first four rates were run first; the best was the largest, so the grid went on until it turned)
for mode in skipgram cbow; do
  for lr in 0.0125 0.025 0.05 0.1 0.2 0.4 0.8; do
    probe "pair_sgd-$mode-lr$lr" 514 task.mode=$mode optimizer=pair_sgd optimizer.lr=$lr dataset.max_tokens=4096
  done
done
fi
