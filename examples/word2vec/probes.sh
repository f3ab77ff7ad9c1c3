#!/usr/bin/env bash
# The one-epoch probes that chose the recipe's optimizer and learning rate (README.md, "How the
# optimizer was chosen"): each log under logs/ starts with its command.
#   bash examples/word2vec/probes.sh [WORK]   (default: wt2-w2v-probes; about 15 s a probe on 1 thread)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:-wt2-w2v-probes}"
src="$(python "$here/../corpus.py" wikitext2)"
mkdir -p "$work" "$here/logs"
seqkit-preprocess task=language_modeling trainpref="$src/train.txt" validpref="$src/valid.txt" \
  destdir="$work/data-bin" tokenizer=space thresholdsrc=5 overwrite=true 2> "$here/logs/probe-preprocess.log"

probe() {  # NAME UPDATES settings...
  local name=$1 n=$2; shift 2
  local cmd=(seqkit-train task=word2vec task.data="$work/data-bin" model=word2vec criterion=word2vec
             lr_scheduler=polynomial_decay optimization.max_update="$n" common.threads=1 common.log_interval="$n"
             checkpoint.save_dir="$work/$name" checkpoint.no_epoch_checkpoints=true "$@")
  { echo "# ${cmd[*]}"; "${cmd[@]}" 2>&1; } > "$here/logs/probe-$name.log"
}
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
