#!/usr/bin/env bash
# two workers over the 13 runs of examples/distillation/sst2's plan, sentence carve (the default)
# usage: bash queue.sh WORKER_ID
set -uo pipefail
cd /work/main
W=/work/runs/sst2_sent/work
jobs=(teacher:0 dan:1 dan:2 dan:3 cnn:1 cnn:2 cnn:3 dan-kd:1 dan-kd:2 dan-kd:3 cnn-kd:1 cnn-kd:2 cnn-kd:3)
for j in "${jobs[@]}"; do
  stage=${j%%:*}; seed=${j##*:}
  mkdir /work/runs/sst2_sent/claim-$stage-$seed 2>/dev/null || continue
  if [[ $stage == *kd ]]; then
    while [[ ! -f $W/teacher/score_dev.txt ]]; do sleep 30; done
  fi
  echo "$(date +%T) worker $1 starts $stage seed $seed"
  if [[ $stage == teacher ]]; then
    THREADS=1 nice -n 5 bash examples/distillation/sst2/run.sh $W teacher
  else
    SEED=$seed THREADS=1 nice -n 5 bash examples/distillation/sst2/run.sh $W $stage
  fi
  echo "$(date +%T) worker $1 ends $stage seed $seed rc=$?"
done
