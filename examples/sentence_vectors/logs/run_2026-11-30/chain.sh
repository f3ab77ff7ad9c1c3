#!/usr/bin/env bash
# issue 61, 2026-11-30: the RoBERTa body (one thread, beside issue 62's fine-tunes) and its frozen rows
# (pretrain.sh went on into objectives.sh's fine-tunes of the body after the pretraining; they were stopped: not used here)
export PATH=/work/main/.venv/bin:$PATH
cd /work/main
THREADS=1 UPDATES=2896 bash examples/transfer/pretrain.sh /work/runs/xlnet/tr roberta 30 > /work/runs/xlnet/roberta.out 2>&1
sst2=$(python examples/corpus.py sst2); rte=$(python examples/corpus.py glue_rte)
F=/work/runs/sv/frozen; mkdir -p $F
ck=/work/runs/xlnet/tr/roberta/checkpoints/checkpoint_best.pt
for t in sst2 rte; do d=$([ $t = sst2 ] && echo $sst2 || echo $rte)
  python examples/sentence_vectors/frozen_eval.py $ck $t $d --pooling mean --seeds 1,2,3 --threads 1 --output $F/$t-roberta.json > $F/$t-roberta.log 2>&1
done
