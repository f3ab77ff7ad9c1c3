#!/usr/bin/env bash
# The GPT body again, pretrained on a GPU (issue 27, part 4): what a longer pretraining buys. The
# CPU body's model (gpt_mini, config_transformer_bpe.yaml) and its 8,000 pieces, on more text
# (WikiText-2 + Multi30k's train.en + Tatoeba's English sides, deduplicated; validation: WikiText-2's,
# as the CPU body's) in bf16 with batches of 8,192 tokens, for 34,740 updates with the cosine over 28,098
# (the reported run's: what 360 s gave on one H200 on 2026-11-26, its schedule sized by the probe
# below, logs/gpt_gpu.train.log and gpt_gpu.probe.log; the 6 minutes are an estimate).
#   bash examples/transfer/pretrain.sh WORK_DIR gpt          # first, on any machine: the vocabulary
#   bash examples/transfer/pretrain_gpu.sh WORK_DIR [SECONDS]    (on a CUDA machine)
# SECONDS: a clock budget instead (the body then depends on the machine's load): a 300-update speed
# probe first sizes the cosine schedule to the time (its rate x SECONDS x 0.95).
# Leaves WORK_DIR/gpt_gpu/checkpoints/checkpoint_best.pt (finetune.sh WORK_DIR sst2 gpt_gpu MODE),
# WORK_DIR/gpt_gpu.train.log, gpt_gpu.probe.log and gpt_gpu.eval.json (seqkit-eval-lm, valid).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
usage="usage: pretrain_gpu.sh WORK_DIR [SECONDS]"
work="${1:?$usage}"; secs="${2:-}"
vocab="$work/gpt/checkpoints/checkpoint_best.pt"
[[ -f "$vocab" ]] || { echo "pretrain_gpu.sh: error: $vocab not found: run pretrain.sh $work gpt first (its pieces)" >&2; exit 1; }
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" ||
  { echo "pretrain_gpu.sh: error: no CUDA device (this recipe is the GPU row; pretrain.sh is the CPU one)" >&2; exit 1; }

corpus="$work/gpu-corpus" data="$work/gpu-data-bin"
if [[ ! -f "$data/preprocess.json" ]]; then
  # each corpus from $SEQKIT_DATA, ../shared/data or its public source (examples/corpus.py)
  wiki="$(python "$here/../corpus.py" wikitext2)"; m30k="$(python "$here/../corpus.py" multi30k)"
  deu="$(python "$here/../corpus.py" tatoeba_deu_eng)"; fra="$(python "$here/../corpus.py" tatoeba_fra_eng)"
  mkdir -p "$corpus"
  { cat "$wiki/train.txt"; zcat "$m30k/train.en.gz"
    cut -f1 "$deu/deu.txt" "$fra/fra.txt" | awk '!seen[$0]++'; } > "$corpus/train.txt.part"
  mv "$corpus/train.txt.part" "$corpus/train.txt"
  seqkit-preprocess task=language_modeling trainpref="$corpus/train.txt" validpref="$wiki/valid.txt" \
    testpref="$wiki/test.txt" destdir="$data" overwrite=true workers=2 vocab_from="$vocab"
fi

common=(--config "$here/../language_model/wikitext2/config_transformer_bpe.yaml" task.data="$data"
        common.precision=bf16 common.threads=8 dataset.max_tokens=8192)
if [[ -z $secs ]]; then  # the reported run's update count and schedule
  budget=(optimization.stop_time_hours=0 optimization.max_update=34740 lr_scheduler.period_updates=28098)
else
seqkit-train "${common[@]}" checkpoint.save_dir="$work/gpu-probe" checkpoint.no_save=true common.log_interval=50 \
  optimization.stop_time_hours=0 optimization.max_update=300 lr_scheduler.period_updates=1000 > "$work/gpt_gpu.probe.log" 2>&1
rate=$(python - "$work/gpt_gpu.probe.log" <<'PY'
import re, sys
log = open(sys.argv[1], encoding="utf-8").read()
updates = [int(u) for u in re.findall(r"\[train\].*?update (\d+) \|", log)]
walls = [float(w) for w in re.findall(r"\[train\].*?train_wall (\d+)", log)]
print(round((updates[-1] - updates[0]) / max(1e-9, walls[-1] - walls[0]), 2))
PY
)
period=$(python -c "print(max(200, int($rate * $secs * 0.95) - 400))")
echo "speed probe: $rate updates/s -> lr_scheduler.period_updates=$period for $secs s" >&2
budget=(optimization.max_update=0 optimization.stop_time_hours="$(python -c "print(round($secs / 3600, 4))")"
        lr_scheduler.period_updates="$period")
fi
seqkit-train "${common[@]}" checkpoint.save_dir="$work/gpt_gpu/checkpoints" checkpoint.no_epoch_checkpoints=true \
  "${budget[@]}" 2>&1 | tee "$work/gpt_gpu.train.log"
seqkit-eval-lm path="$work/gpt_gpu/checkpoints/checkpoint_best.pt" task.data="$data" gen_subset=valid \
  tokens_per_sample=128 | tee "$work/gpt_gpu.eval.json"
