#!/usr/bin/env bash
# issue 61: causal LM against prefix LM on WikiText-2, 3,845 updates each, run side by side (one thread each)
set -uo pipefail
cd /work/main && source .venv/bin/activate
W=/work/runs/wt2
seqkit-train --config examples/language_model/wikitext2/config_transformer.yaml \
  task.data=$W/data-bin checkpoint.save_dir=$W/causal common.threads=1 > $W/causal.train.log 2>&1 &
p1=$!
seqkit-train --config examples/language_model/prefix_lm/config_prefix_lm.yaml \
  task.data=$W/data-bin checkpoint.save_dir=$W/prefix_lm common.threads=1 > $W/prefix_lm.train.log 2>&1 &
p2=$!
wait $p1; echo "causal rc $?"; wait $p2; echo "prefix_lm rc $?"
for run in causal prefix_lm; do
  for split in valid test; do
    seqkit-eval-lm path=$W/$run/checkpoint_last.pt task.data=$W/data-bin gen_subset=$split \
      tokens_per_sample=256 prefix_length=128 > $W/$run.eval_$split.log 2>&1
  done
done
echo done
