#!/usr/bin/env bash
# The wheels a lent GPU machine lacks, built here into .whl/ (ignored by git) for the device tool's
# `carry`: the machine has torch (CUDA), numpy, sentencepiece, sacrebleu, transformers, pyyaml and
# sympy, but not hydra-core, omegaconf and antlr4 (omegaconf's parser), nor seqkit itself. All are
# pure Python, so the wheels built here install there whatever its Python (3.12 when last seen). The
# newest hydra-core and omegaconf, as CI's install takes them; antlr4 at the 4.9 omegaconf requires.
#   bash benchmarks/gpu_carry.sh                 -> .whl/*.whl (under 1 MB), .whl/tatoeba_deu_eng/deu.txt
# Tatoeba's deu.txt (12 MB) goes into .whl/tatoeba_deu_eng/ too: ../shared beside the checkout does not
# travel to that machine, and it cannot download.
# Then the device call (its first command in a session: the benchmark of the landed code, issue 59),
# sized for one call of the 15 device minutes (timeout_s 540; what cannot end in 420 s is skipped and
# listed, and the JSON is rewritten after every step, so a cut run still returns what ran):
#   carry [".whl"], timeout_s 540, command:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH || exit 1; set -o pipefail; nvidia-smi -L; \
#     PYTHONUNBUFFERED=1 python3 benchmarks/gpu.py --data .whl/tatoeba_deu_eng --workdir runs/gpu-bench --precisions bf16 \
#     --models transformer_base --max-tokens 65536,16384 --variants default,all --time-limit 420 \
#     --out $OUT/$(date +%F)_h200.json 2>&1 | tee $OUT/gpu.log
# (runs/ is ignored by git: a second call on the still-warm machine reuses its preprocessed corpus.)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/.whl"
rm -rf "$out" && mkdir -p "$out"
python -m pip wheel -q --no-deps -w "$out" hydra-core omegaconf "antlr4-python3-runtime==4.9.*"
python -m pip wheel -q --no-deps -w "$out" "$root"
data="$(python "$root/examples/corpus.py" tatoeba_deu_eng)"
mkdir -p "$out/tatoeba_deu_eng" && cp "$data/deu.txt" "$out/tatoeba_deu_eng/"
ls -l "$out"
for w in "$out"/*.whl; do
  case "$(basename "$w")" in *-none-any.whl) ;; *) echo "gpu_carry.sh: error: $w is not pure Python" >&2; exit 1 ;; esac
done
