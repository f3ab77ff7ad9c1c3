#!/usr/bin/env bash
# the same run carried on to 4800 updates (exact resume from update 3000), chosen against 3000 on valid
set -euo pipefail
cd /work/runs/symbolic/r40k2
export PATH=/work/main/.venv/bin:$PATH PYTHONHASHSEED=0
here=/work/main/examples/symbolic_integration
while pgrep -f "bash chain.sh" >/dev/null; do sleep 10; done
mkdir -p checkpoints_4800 && cp checkpoints/checkpoint_last.pt checkpoints_4800/
echo "== train $(date)"
/usr/bin/time -v seqkit-train --config $here/config.yaml task.data=data-bin checkpoint.save_dir=checkpoints_4800 \
  optimization.max_update=4800 2>&1 | tee train_4800.log
echo "== generate $(date)"
for split in valid test; do
  for beam in 1 10; do
    seqkit-generate path=checkpoints_4800/checkpoint_best.pt task.data=data-bin gen_subset=$split \
      generation.beam=$beam generation.nbest=$beam batch_size=64 common.threads=2 \
      results_path=beam${beam}_4800 2>&1 | tee generate-$split-beam${beam}_4800.log
  done
done
echo "== evaluate valid $(date)"
python $here/evaluate.py beam1_4800/generate-valid.txt beam10_4800/generate-valid.txt results-valid_4800.json --workers 2 --no-sympy 2>&1 | tee evaluate-valid_4800.log
echo "== evaluate test $(date)"
python $here/evaluate.py beam1_4800/generate-test.txt beam10_4800/generate-test.txt results-test_4800.json --workers 2 --no-sympy 2>&1 | tee evaluate-test_4800.log
echo "== done $(date)"
