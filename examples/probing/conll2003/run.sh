#!/usr/bin/env bash
# What each layer of a pretrained body knows: linear probes for part of speech, chunks and named
# entities (CoNLL-2003's columns 2-4) on every layer, each beside its control task, for the bodies
# examples/transfer/pretrain.sh made and for a random-weights body of each architecture.
#   bash examples/probing/conll2003/run.sh PRETRAIN_DIR WORK_DIR [BODY ...] [-- key=value ...]
# PRETRAIN_DIR: the WORK_DIR of examples/transfer/pretrain.sh (PRETRAIN_DIR/BODY/checkpoints/
# checkpoint_best.pt); BODY: gpt roberta lstm_lm elmo bart electra (default: those present).
# key=value after -- goes to every seqkit-probe (e.g. max_train=50000 epochs=10).
# Writes WORK_DIR/BODY/{pos,chunk,ner}{,-random}.{json,md,png}. Choose on one split, report on
# another: layers are compared on eng.testa (split=valid), and the layer chosen there is reported on
# eng.testb (report=test) by the same probes; REPORT= (empty) probes eng.testa alone, as before.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
usage="usage: run.sh PRETRAIN_DIR WORK_DIR [BODY ...] [-- key=value ...]"
pre="${1:?$usage}"; work="${2:?$usage}"; shift 2
bodies=(); extra=()
while [[ $# -gt 0 ]]; do
  if [[ $1 == -- ]]; then shift; extra=("$@"); break; fi
  bodies+=("$1"); shift
done
if [[ ${#bodies[@]} -eq 0 ]]; then
  for b in gpt roberta lstm_lm elmo bart electra; do [[ -f "$pre/$b/checkpoints/checkpoint_best.pt" ]] && bodies+=("$b"); done
fi
report="${REPORT-test}"
declare -A COLUMN=([pos]=1 [chunk]=2 [ner]=3)
for body in "${bodies[@]}"; do
  ck="$pre/$body/checkpoints/checkpoint_best.pt"
  [[ -f "$ck" ]] || { echo "run.sh: error: $ck not found (examples/transfer/pretrain.sh $pre $body)" >&2; exit 1; }
  mkdir -p "$work/$body"
  for task in pos chunk ner; do
    data="$work/$body/$task-bin"
    [[ -f "$data/preprocess.json" ]] || bash "$here/../../tagging/conll2003/prepare.sh" "$data" \
      vocab_from="$ck" tag_column="${COLUMN[$task]}"
    for init in trained random; do
      suffix=""; [[ $init == random ]] && suffix=-random
      out="$work/$body/$task$suffix.json"
      [[ -f "$out" ]] && { echo "$out: done already"; continue; }
      seqkit-probe path="$ck" data="$data" split=valid ${report:+report=$report} output="$out" random_init=$( [[ $init == random ]] && echo true || echo false ) \
        threads=2 "${extra[@]}"
    done
  done
done
python "$here/summary.py" "$work" "${bodies[@]}" | tee "$work/summary.md"
