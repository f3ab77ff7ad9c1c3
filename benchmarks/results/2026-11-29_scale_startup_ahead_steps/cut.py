"""The greedy cut of one epoch at 16M pairs, the old batch_ends (a checkout of d08152d) against the
new one (jumps over runs of equal cost), on the same sorted costs; run from the scale workdir's
pairs_16000000 folder: python cut.py OLD_CHECKOUT"""
import importlib.util
import sys
import time

import numpy as np

from seqkit.data import batching as B
from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.data.pair_dataset import LanguagePairDataset, pair_cost

spec = importlib.util.spec_from_file_location("old_batching", f"{sys.argv[1]}/seqkit/data/batching.py")
old = importlib.util.module_from_spec(spec)
spec.loader.exec_module(old)
data = LanguagePairDataset(IndexedDataset("bin/train.de-en.de"), IndexedDataset("bin/train.de-en.en"), None, None)
order, cost = B.sorted_order(data.src_sizes, data.tgt_sizes, B.epoch_rng(1, 1), None, pair_cost)
for name, cut in (("new", B.batch_ends), ("old", old.batch_ends)) * 3:
    t = time.perf_counter()
    ends = cut(cost, 4096)
    print(f"{name} batch_ends: {time.perf_counter() - t:.3f} s, {len(ends)} batches")
print("same ends:", np.array_equal(B.batch_ends(cost, 4096), old.batch_ends(cost, 4096)))
