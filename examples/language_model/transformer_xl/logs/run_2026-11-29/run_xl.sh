#!/usr/bin/env bash
# issue 62: Transformer-XL on WikiText-2, 3,845 updates, one thread (beside another run); the GPT of the
# same config is /work/runs/wt2/causal (issue 61's run of examples/language_model/wikitext2/config_transformer.yaml)
set -uo pipefail
cd /work/main && source .venv/bin/activate
W=/work/runs/wt2; X=/work/runs/xl
seqkit-train --config examples/language_model/transformer_xl/config.yaml \
  task.data=$W/data-bin checkpoint.save_dir=$X/xl common.threads=1 > $X/xl.train.log 2>&1
echo "xl rc $?"
for c in 0 128; do
  seqkit-eval-lm path=$W/causal/checkpoint_best.pt task.data=$W/data-bin gen_subset=test \
    tokens_per_sample=128 context_window=$c common.threads=1 > $X/gpt.test.c$c.log 2>&1
done
for m in 0 128 256 512 1024; do
  seqkit-eval-lm path=$X/xl/checkpoint_best.pt task.data=$W/data-bin gen_subset=test \
    tokens_per_sample=128 mem_len=$m common.threads=1 > $X/xl.test.m$m.log 2>&1
done
echo done
