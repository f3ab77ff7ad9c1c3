#!/usr/bin/env bash
# WikiText-2 masked-LM pretraining: prepare (word vocabulary), train (the config's update count),
# masked-token accuracy of the best checkpoint on test beside the unigram baseline, the cloze demo.
#   bash examples/masked_lm/wikitext2/run.sh WORK_DIR [CONFIG] [key=value ...]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:?usage: run.sh WORK_DIR [CONFIG] [key=value ...]}"
config="${2:-$here/config.yaml}"
shift $(( $# > 2 ? 2 : $# ))
mkdir -p "$work"

# the language-model recipe's data folder: masked_lm reads it as it is (and adds <mask>)
[[ -f "$work/data-bin/preprocess.json" ]] || bash "$here/../../language_model/wikitext2/prepare.sh" "$work/data-bin" word

seqkit-train --config "$config" task.data="$work/data-bin" checkpoint.save_dir="$work/checkpoints" "$@" \
  2>&1 | tee "$work/train.log"

# top-1 / top-5 accuracy at the masked positions of test (masked once, with the run's seed), and the
# training unigram distribution on the same positions
for split in valid test; do
  seqkit-eval-lm path="$work/checkpoints/checkpoint_best.pt" task.data="$work/data-bin" gen_subset=$split \
    | tee "$work/eval_$split.json"
done

# the cloze demo, from the shell and from Python
seqkit-generate path="$work/checkpoints/checkpoint_best.pt" input=- topk=5 < "$here/cloze.txt" 2>/dev/null \
  | tee "$work/cloze_shell.txt"
python "$here/cloze.py" "$work/checkpoints/checkpoint_best.pt" | tee "$work/cloze_python.txt"
