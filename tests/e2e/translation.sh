#!/usr/bin/env bash
# End-to-end translation in under a minute of one CPU core:
#   toy corpus -> seqkit-preprocess -> seqkit-train (a tiny transformer, 250 updates: enough to
#   translate the toy corpus at 85-90 BLEU, which the tests assert as a floor of 80)
#   -> seqkit-generate on the test split -> seqkit-score, and two raw lines through `input=-`; then
#   alignments (A- lines), sampling, and seqkit-average of the epoch checkpoints.
#
#   bash tests/e2e/translation.sh WORKDIR [MODEL [TRAIN_OVERRIDES ...]]
#        (MODEL: any registered model, default transformer_tiny; overrides go to seqkit-train last)
#
# The seqkit-* console scripts (and the python that has seqkit) must come first on PATH.
# Leaves in WORKDIR: raw/ (text), data-bin/, checkpoints/, gen.txt, stdin.txt, score.txt, align.txt,
# sample.txt, avg.txt.
set -euo pipefail

work=${1:?usage: bash tests/e2e/translation.sh WORKDIR [MODEL [TRAIN_OVERRIDES ...]]}
model=${2:-transformer_tiny}
shift $(( $# > 2 ? 2 : $# ))
mkdir -p "$work"
cd "$work"
# one thread everywhere: the test is about the pipeline, not speed, and shares the machine
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

python -m seqkit.data.toy_corpus raw --train 2000 --valid 40 --test 40

seqkit-preprocess source_lang=de target_lang=en \
    trainpref=raw/train validpref=raw/valid testpref=raw/test destdir=data-bin \
    tokenizer=sentencepiece_bpe tokenizer.vocab_size=200 tokenizer.num_threads=1

# a fixed, high learning rate: 250 updates (about 12 epochs) learn the toy language well
seqkit-train task.data=data-bin model="$model" model.dropout=0 common.threads=1 \
    optimizer.lr=3e-3 lr_scheduler=fixed optimization.max_update=250 dataset.max_tokens=2048 \
    checkpoint.save_dir=checkpoints "$@"

# short outputs, small beam: an undertrained model could otherwise run to max_len_b
gen=(common.threads=1 generation.beam=2 generation.max_len_b=40)
seqkit-generate path=checkpoints/checkpoint_last.pt task.data=data-bin "${gen[@]}" > gen.txt

seqkit-score hyp=gen.txt | tee score.txt

printf 'Der Hund spielt im Park.\nDie kleine Katze sieht den Mann.\n' |
    seqkit-generate path=checkpoints/checkpoint_last.pt input=- "${gen[@]}" > stdin.txt
grep '^D-' stdin.txt

# fairseq's A- lines: the most attended source piece of each target piece
seqkit-generate path=checkpoints/checkpoint_last.pt task.data=data-bin "${gen[@]}" generation.print_alignment=true \
    > align.txt
grep -c '^A-' align.txt

# sampling: two samples per sentence from the 5 most likely tokens
seqkit-generate path=checkpoints/checkpoint_last.pt task.data=data-bin common.threads=1 generation.max_len_b=40 \
    generation.sampling=true generation.beam=2 generation.nbest=2 generation.sampling_topk=5 > sample.txt

# average the epoch checkpoints, then translate with the average
seqkit-average save_dir=checkpoints last=2 output=checkpoints/checkpoint_avg.pt
seqkit-generate path=checkpoints/checkpoint_avg.pt task.data=data-bin "${gen[@]}" > avg.txt
