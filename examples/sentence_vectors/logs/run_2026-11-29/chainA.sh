#!/bin/bash
# issue 61: after skip-thought, its frozen rows and the mean-of-embeddings rows; then the GPT body and its rows
cd /work/main && . .venv/bin/activate
until grep -q "done: reached max_update" /work/runs/sv/skip_thought.log; do sleep 30; done
sst2=$(python examples/corpus.py sst2); rte=$(python examples/corpus.py glue_rte)
F=/work/runs/sv/frozen; mkdir -p $F
ck=/work/runs/sv/skip_thought/checkpoint_best.pt
for t in sst2 rte; do d=$([ $t = sst2 ] && echo $sst2 || echo $rte)
  python examples/sentence_vectors/frozen_eval.py $ck $t $d --seeds 1,2,3 --threads 1 --output $F/$t-skip_thought.json > $F/$t-skip_thought.log 2>&1
  python examples/sentence_vectors/frozen_eval.py $ck $t $d --pooling embeddings --seeds 1,2,3 --threads 1 --output $F/$t-embeddings.json > $F/$t-embeddings.log 2>&1
done
echo "A evals done $(date)"
THREADS=1 UPDATES=2157 bash examples/transfer/pretrain.sh /work/runs/xlnet/tr gpt 30 > /work/runs/sv/gpt_pretrain.out 2>&1
ck=/work/runs/xlnet/tr/gpt/checkpoints/checkpoint_best.pt
for t in sst2 rte; do d=$([ $t = sst2 ] && echo $sst2 || echo $rte)
  python examples/sentence_vectors/frozen_eval.py $ck $t $d --pooling mean --seeds 1,2,3 --threads 1 --output $F/$t-gpt.json > $F/$t-gpt.log 2>&1
done
echo "A done $(date)"
