#!/usr/bin/env bash
# issue 61, data size on valid: seeds 2 and 3 of each arm (config.yaml of now, 6500 updates each):
# the first 50,000 training problems (data-bin-50k) and the whole 200,000 (data-bin). Seed 1 of each: train-50k.log,
# train-cos.log. Run again to go on: a finished arm (results-valid-TAG.json) is skipped, a killed training resumes
# exactly from its last epoch's checkpoint.
set -euo pipefail
cd /work/runs/symbolic/t300k
export PATH=/work/main/.venv/bin:$PATH PYTHONHASHSEED=0
here=/work/main/examples/symbolic_integration
valid() {  # $1 checkpoint dir, $2 data-bin, $3 tag
  for beam in 1 10; do
    seqkit-generate path=$1/checkpoint_best.pt task.data=$2 gen_subset=valid \
      generation.beam=$beam generation.nbest=$beam batch_size=64 common.threads=2 \
      results_path=beam${beam}-$3 2>&1 | tee generate-valid-beam${beam}-$3.log
  done
  python $here/evaluate.py beam1-$3/generate-valid.txt beam10-$3/generate-valid.txt results-valid-$3.json \
    --workers 2 --no-sympy 2>&1 | tee evaluate-valid-$3.log
}
arm() {  # $1 data-bin, $2 tag, $3 seed
  local tag=$2-s$3
  if [ -e results-valid-$tag.json ]; then echo "== $tag done before"; return; fi
  echo "== train $tag $(date)"
  /usr/bin/time -v seqkit-train --config $here/config.yaml task.data=$1 checkpoint.save_dir=checkpoints-$tag \
    common.seed=$3 2>&1 | tee -a train-$tag.log
  echo "== valid $tag $(date)"
  valid checkpoints-$tag $1 $tag
}
arm data-bin-50k 50k 2
arm data-bin all 2
arm data-bin-50k 50k 3
arm data-bin all 3
echo "== done $(date)"
