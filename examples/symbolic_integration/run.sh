#!/usr/bin/env bash
# Symbolic integration from the shell: make (derivative, function) pairs with sympy, train a
# Transformer to integrate, and score it on the held-out test against sympy's own integrate.
#   bash examples/symbolic_integration/run.sh [WORK_DIR] [CONFIG] [key=value ...]
# WORK_DIR defaults to ./symbolic-run; CONFIG to this folder's config.yaml; extra key=value settings
# go to seqkit-train. Data sizes from the environment: TRAIN (200000), VALID (1000), TEST (1000),
# MAX_OPS (6), SEED (1), SIMPLIFY (together), WORKERS (2); PREPARE_ARGS and EVAL_ARGS pass more options
# to prepare.py and evaluate.py (e.g. EVAL_ARGS="--no-sympy").
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:-symbolic-run}"
config="${2:-$here/config.yaml}"
shift $(( $# > 2 ? 2 : $# ))
workers="${WORKERS:-2}"
mkdir -p "$work"
export PYTHONHASHSEED=0  # sympy's simplification should not depend on it; fixed to be sure

python "$here/prepare.py" "$work/raw" --train "${TRAIN:-200000}" --valid "${VALID:-1000}" --test "${TEST:-1000}" \
  --max-ops "${MAX_OPS:-6}" --seed "${SEED:-1}" --simplify "${SIMPLIFY:-together}" --workers "$workers" ${PREPARE_ARGS:-} 2>&1 | tee "$work/prepare.log"

# one token a line's word: operators, x, INT+/INT-, digits; one dictionary for both sides
seqkit-preprocess source_lang=deriv target_lang=func tokenizer=space \
  trainpref="$work/raw/train" validpref="$work/raw/valid" testpref="$work/raw/test" \
  destdir="$work/data-bin" overwrite=true workers="$workers"

seqkit-train --config "$config" task.data="$work/data-bin" checkpoint.save_dir="$work/checkpoints" "$@" \
  2>&1 | tee "$work/train.log"

for beam in 1 10; do
  seqkit-generate path="$work/checkpoints/checkpoint_best.pt" task.data="$work/data-bin" gen_subset=test \
    generation.beam=$beam generation.nbest=$beam batch_size=64 common.threads="$workers" \
    results_path="$work/beam$beam" 2>&1 | tee "$work/generate-beam$beam.log"
done

python "$here/evaluate.py" "$work/beam1/generate-test.txt" "$work/beam10/generate-test.txt" \
  "$work/results.json" --workers "$workers" ${EVAL_ARGS:-} 2>&1 | tee "$work/evaluate.log"
