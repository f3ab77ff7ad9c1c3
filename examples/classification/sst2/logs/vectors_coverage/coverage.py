"""How many SST-2 training words a word2vec run on WikiText-2's training text could give vectors
(exact match, as model.embed_path matches; cased and lower-cased text, min_count 1 and 5).
    python coverage.py [SST2_TRAIN_TSV] [WIKITEXT2_TRAIN_TXT]   (defaults: $SEQKIT_DATA or ../shared/data)"""
import collections
import csv
import os
import sys

data = os.environ.get("SEQKIT_DATA", os.path.join(os.path.dirname(__file__), *[".."] * 6, "shared", "data"))
sst_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(data, "sst2", "train.tsv")
wt_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(data, "wikitext2", "train.txt")
sst = collections.Counter()
with open(sst_path, encoding="utf-8") as f:
    r = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
    next(r)
    for row in r:
        sst.update(row[0].split())
wt = collections.Counter()
with open(wt_path, encoding="utf-8") as f:
    for line in f:
        wt.update(line.split())
low = collections.Counter()
for w, c in wt.items():
    low[w.lower()] += c
print(f"SST-2 train: {len(sst)} word types, {sum(sst.values())} tokens")
print(f"WikiText-2 train: {len(wt)} types (cased), {len(low)} lower-cased, {sum(wt.values())} tokens")
for name, vocab in (("cased", wt), ("lower-cased", low)):
    for mc in (1, 5):
        keep = {w for w, c in vocab.items() if c >= mc}
        types = sum(1 for w in sst if w in keep)
        toks = sum(c for w, c in sst.items() if w in keep)
        print(f"WikiText-2 train {name}, min_count {mc}: {types} of {len(sst)} SST-2 types ({100*types/len(sst):.1f}%), "
              f"{100*toks/sum(sst.values()):.1f}% of SST-2 train tokens")
