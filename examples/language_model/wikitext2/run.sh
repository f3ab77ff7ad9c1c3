#!/usr/bin/env bash
# WikiText-2 language model from scratch: prepare, train (the config's update count), perplexity of the best
# checkpoint on valid and test with a sliding context window, and a few continued prompts.
#   bash examples/language_model/wikitext2/run.sh WORK_DIR CONFIG [word|bpe|char] [key=value ...]
# CONFIG: config_transformer.yaml or config_lstm.yaml in this folder.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:?usage: run.sh WORK_DIR CONFIG [word|bpe|char] [key=value ...]}"
config="${2:?usage: run.sh WORK_DIR CONFIG [word|bpe|char] [key=value ...]}"
kind="${3:-word}"
shift $(( $# > 3 ? 3 : $# ))
mkdir -p "$work"

[[ -f "$work/data-bin/preprocess.json" ]] || bash "$here/prepare.sh" "$work/data-bin" "$kind"

seqkit-train --config "$config" task.data="$work/data-bin" checkpoint.save_dir="$work/checkpoints" "$@" \
  2>&1 | tee "$work/train.log"

# every token scored once, each block of 128 after up to 384 tokens of context; a Transformer's
# learned positions only go as far as its training blocks, so its context is tokens_per_sample - 128
context=$(python - "$config" "$@" <<'PY'
import sys
from omegaconf import OmegaConf
cfg = OmegaConf.merge(OmegaConf.load(sys.argv[1]), OmegaConf.from_dotlist([a for a in sys.argv[2:] if "=" in a]))
print(384 if str(cfg.model.name).startswith("lstm") else max(0, int(cfg.task.tokens_per_sample) - 128))
PY
)
for split in valid test; do
  seqkit-eval-lm path="$work/checkpoints/checkpoint_best.pt" task.data="$work/data-bin" gen_subset=$split \
    tokens_per_sample=128 context_window=$context 2>&1 | tee "$work/eval_$split.log"
done

printf '%s\n' "The game was released in" "= = Early life = =" "The river flows" |
  seqkit-generate path="$work/checkpoints/checkpoint_best.pt" input=- generation.sampling=true \
    generation.sampling_topp=0.9 generation.beam=1 generation.max_len_b=40 2>/dev/null | tee "$work/samples.txt"
