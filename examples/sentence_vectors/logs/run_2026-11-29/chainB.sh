#!/bin/bash
# issue 61: after quick-thought, its frozen rows; then the XLNet body's
cd /work/main && . .venv/bin/activate
until grep -q "done: reached max_update" /work/runs/sv/quick_thought.log; do sleep 30; done
sst2=$(python examples/corpus.py sst2); rte=$(python examples/corpus.py glue_rte)
F=/work/runs/sv/frozen; mkdir -p $F
ck=/work/runs/sv/quick_thought/checkpoint_best.pt
for t in sst2 rte; do d=$([ $t = sst2 ] && echo $sst2 || echo $rte)
  python examples/sentence_vectors/frozen_eval.py $ck $t $d --seeds 1,2,3 --threads 1 --output $F/$t-quick_thought.json > $F/$t-quick_thought.log 2>&1
done
ck=/work/runs/xlnet/tr/xlnet/checkpoints/checkpoint_best.pt
for t in sst2 rte; do d=$([ $t = sst2 ] && echo $sst2 || echo $rte)
  python examples/sentence_vectors/frozen_eval.py $ck $t $d --pooling mean --seeds 1,2,3 --threads 1 --output $F/$t-xlnet.json > $F/$t-xlnet.log 2>&1
done
echo "B done $(date)"
