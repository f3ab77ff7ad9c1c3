#!/usr/bin/env bash
# streamed (seqkit-preprocess, workers=2) against in-memory (old.py) task=tagging at 100k and 800k sentences;
# peak PSS summed over the process tree (../2026-11-29_classification_stream/mon.py); then the two folders compared file by file
set -u
B=/work/main/benchmarks/results/2026-11-29_tagging_stream
cd /work/main && source .venv/bin/activate
for n in 100k 800k; do
  /usr/bin/time -v python $B/../2026-11-29_classification_stream/mon.py seqkit-preprocess task=tagging trainpref=/tmp/tagbench/t$n.conll \
    validpref=/work/shared/data/conll2003/eng.testa destdir=/tmp/tagbench/s$n tokenizer=sentencepiece_bpe \
    tokenizer.vocab_size=8000 tokenizer.input_sentence_size=100000 workers=2 overwrite=true > $B/stream$n.log 2>&1
  /usr/bin/time -v python $B/../2026-11-29_classification_stream/mon.py python $B/old.py /tmp/tagbench/t$n.conll /tmp/tagbench/o$n > $B/old$n.log 2>&1
  for f in /tmp/tagbench/s$n/*; do cmp -s $f /tmp/tagbench/o$n/$(basename $f) && echo "same $(basename $f)" || echo "DIFFERENT $(basename $f)"; done > $B/compare$n.txt
done
echo done
