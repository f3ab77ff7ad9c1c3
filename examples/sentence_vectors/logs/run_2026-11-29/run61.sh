#!/bin/bash
# issue 61 sentence vectors, 2026-11-29 evening: both configs side by side, one thread each
cd /work/main && . .venv/bin/activate
D=/work/runs/sv/data-bin
seqkit-train --config examples/sentence_vectors/config_quick_thought.yaml task.data=$D \
  checkpoint.save_dir=/work/runs/sv/quick_thought common.threads=1 > /work/runs/sv/quick_thought.log 2>&1 &
seqkit-train --config examples/sentence_vectors/config_skip_thought.yaml task.data=$D \
  checkpoint.save_dir=/work/runs/sv/skip_thought common.threads=1 > /work/runs/sv/skip_thought.log 2>&1 &
wait
echo done
