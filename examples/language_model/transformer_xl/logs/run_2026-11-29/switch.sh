#!/usr/bin/env bash
# when the XLNet chain ends, the XL run goes on with both cores: SIGTERM (it finishes its update, saves
# checkpoint_last with its memory and stops), then the same command resumes with common.threads=2
set -uo pipefail
cd /work/main && source .venv/bin/activate
while pgrep -f /work/runs/xlnet/run.sh > /dev/null; do sleep 20; done
pkill -KILL -f /work/runs/xl/run_xl.sh
pid=$(pgrep -f "transformer_xl/config.yaml" | head -1)
echo "$(date +%T) SIGTERM $pid"; kill -TERM $pid
while kill -0 $pid 2>/dev/null; do sleep 2; done
echo "$(date +%T) stopped"; tail -3 /work/runs/xl/xl.train.log
W=/work/runs/wt2; X=/work/runs/xl
seqkit-train --config examples/language_model/transformer_xl/config.yaml \
  task.data=$W/data-bin checkpoint.save_dir=$X/xl common.threads=2 > $X/xl.train.resumed.log 2>&1
echo "xl rc $?"
for c in 0 128; do
  seqkit-eval-lm path=$W/causal/checkpoint_best.pt task.data=$W/data-bin gen_subset=test \
    tokens_per_sample=128 context_window=$c common.threads=2 > $X/gpt.test.c$c.log 2>&1
done
for m in 0 128 256 512 1024; do
  seqkit-eval-lm path=$X/xl/checkpoint_best.pt task.data=$W/data-bin gen_subset=test \
    tokens_per_sample=128 mem_len=$m common.threads=2 > $X/xl.test.m$m.log 2>&1
done
echo "$(date +%T) done"
