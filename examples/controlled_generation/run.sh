#!/usr/bin/env bash
# Text that respects counts: a language model conditioned on attributes measured from its own training
# text (words, and sentiment by an SST-2 classifier) is asked for them, and a verifier measures what it
# wrote. Greedy against sampling checked by the verifier, k = 1 and k = 10 samples per request.
#   bash examples/controlled_generation/run.sh WORK [key=value ...]
# key=value: the language model's seqkit-train overrides (e.g. optimization.max_update=20 for a smoke run).
# Environment: CLASSIFIER=CK an existing SST-2 classifier (default: examples/classification/sst2's DAN,
# trained into WORK/sst2 when missing; CLASSIFIER_ARGS its seqkit-train overrides), LIMIT=N the first N
# training sentences only, TEMPERATURES the sampling temperatures tried on the valid requests (default
# "0.7 1.0 1.3"), MAX_LEN the longest continuation in words (default 40), THREADS (default 2).
# Writes WORK/results.json (the test requests) and WORK/valid.json (the choice of temperature).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
work="${1:?usage: run.sh WORK [key=value ...]}"
shift
threads="${THREADS:-2}"
temperatures="${TEMPERATURES:-0.7 1.0 1.3}"
max_len="${MAX_LEN:-40}"
mkdir -p "$work/gen"

# 1. the classifier that measures sentiment: in the training text and, as the verifier's model, in the output
clf="${CLASSIFIER:-$work/sst2/checkpoints/checkpoint_best.pt}"
if [[ ! -f "$clf" ]]; then
  if [[ -n "${CLASSIFIER:-}" ]]; then echo "run.sh: error: CLASSIFIER=$clf: no such checkpoint" >&2; exit 1; fi
  # shellcheck disable=SC2086  # CLASSIFIER_ARGS: several key=value words
  bash "$repo/examples/classification/sst2/run.sh" "$work/sst2" "$repo/examples/classification/sst2/config_dan.yaml" \
    common.threads="$threads" ${CLASSIFIER_ARGS:-}
fi

# 2. SST-2's sentences behind their measured attributes, the request grids; 3. a word vocabulary
[[ -f "$work/text/prepare.json" ]] || python "$here/prepare.py" --sst2 "$(python "$repo/examples/corpus.py" sst2)" \
  --classifier "$clf" --out "$work/text" --limit "${LIMIT:-0}" --threads "$threads"
[[ -f "$work/data-bin/preprocess.json" ]] || seqkit-preprocess task=language_modeling \
  trainpref="$work/text/train.txt" validpref="$work/text/valid.txt" destdir="$work/data-bin" tokenizer=space

# 4. the language model (its update count ends it)
seqkit-train --config "$here/config_gpt.yaml" task.data="$work/data-bin" checkpoint.save_dir="$work/checkpoints" \
  common.threads="$threads" "$@" 2>&1 | tee "$work/train.log"
lm="$work/checkpoints/checkpoint_last.pt"

generate() {  # NAME REQUESTS [key=value ...]: continue each request, the verifier checking every hypothesis
  local name="$1" requests="$2"
  shift 2
  seqkit-generate path="$lm" input=- common.threads="$threads" common.seed=1 generation.max_len_b="$max_len" \
    generation.verifier=attributes generation.verifier_model="$clf" "$@" \
    < "$requests" > "$work/gen/$name.txt" 2> "$work/gen/$name.log"
  tail -n 1 "$work/gen/$name.log"
}

# 5. the sampling temperature, chosen on the valid requests by the share satisfying both at k = 10
runs=()
for t in $temperatures; do
  generate "valid_t$t" "$work/text/requests_valid.txt" generation.sampling=true generation.beam=10 generation.temperature="$t"
  runs+=("$t=$work/gen/valid_t$t.txt")
done
t=$(python "$here/evaluate.py" --pick --classifier "$clf" --requests "$work/text/requests_valid.txt" \
  --out "$work/valid.json" "${runs[@]}")
echo "temperature chosen on the valid requests: $t"

# 6. the test requests: greedy (beam 1), one sample, and the first of 10 samples that the verifier accepts
generate test_greedy "$work/text/requests_test.txt" generation.beam=1
generate test_sampled_k1 "$work/text/requests_test.txt" generation.sampling=true generation.beam=1 generation.temperature="$t"
generate test_verified_k10 "$work/text/requests_test.txt" generation.sampling=true generation.beam=10 \
  generation.temperature="$t"
python "$here/evaluate.py" --classifier "$clf" --requests "$work/text/requests_test.txt" --out "$work/results.json" \
  --setting temperature="$t" --setting max_len_b="$max_len" --setting lm="$lm" \
  greedy="$work/gen/test_greedy.txt" sampled_k1="$work/gen/test_sampled_k1.txt" \
  verified_k10="$work/gen/test_verified_k10.txt" | tee "$work/results.txt"
