#!/usr/bin/env bash
# The wheels a lent GPU machine lacks, built here into .whl/ (ignored by git) for the device tool's
# `carry`: the machine has torch (CUDA), numpy, sentencepiece, sacrebleu, transformers, pyyaml and
# sympy, but not hydra-core, omegaconf and antlr4 (omegaconf's parser), nor seqkit itself. All are
# pure Python, so the wheels built here install there whatever its Python (3.12 when last seen). The
# newest hydra-core and omegaconf, as CI's install takes them; antlr4 at the 4.9 omegaconf requires.
#   bash benchmarks/gpu_carry.sh                 -> .whl/*.whl (under 1 MB)
# Then the device call (its first command in a session: the benchmark of the landed code, issue 59):
#   carry [".whl"], command:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH || exit 1; set -o pipefail; nvidia-smi -L; \
#     PYTHONUNBUFFERED=1 python3 benchmarks/gpu.py --out $OUT/$(date +%F)_h200.json 2>&1 | tee $OUT/gpu.log
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/.whl"
rm -rf "$out" && mkdir -p "$out"
python -m pip wheel -q --no-deps -w "$out" hydra-core omegaconf "antlr4-python3-runtime==4.9.*"
python -m pip wheel -q --no-deps -w "$out" "$root"
ls -l "$out"
for w in "$out"/*.whl; do
  case "$(basename "$w")" in *-none-any.whl) ;; *) echo "gpu_carry.sh: error: $w is not pure Python" >&2; exit 1 ;; esac
done
