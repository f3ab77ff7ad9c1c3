"""A seeded share of a translation folder's training pairs, in the same dictionaries (the low-resource case).

    python carve.py SRC_FOLDER DEST_FOLDER [--share 0.1] [--seed 1]

DEST gets every file of SRC (dictionaries, tokenizers, preprocess.json, valid and test) and, as
train, the pairs whose indices a seeded permutation puts first (share x pairs, in their original
order). The dictionaries are not rebuilt: a model pretrained on SRC's dictionary fits DEST.
"""

import argparse
import os
import shutil
import sys

import numpy as np

from seqkit.data.indexed_dataset import IndexedDataset, write_dataset


def carve(src: str, dest: str, share: float, seed: int) -> int:
    names = [n for n in os.listdir(src) if n.startswith("train.") and n.endswith(".idx")]
    if len(names) != 2:
        sys.exit(f"carve.py: {src} has {len(names)} train sides (.idx); expected a translation folder's two")
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("train.*"))
    sides = [IndexedDataset(os.path.join(src, n[:-4])) for n in sorted(names)]
    n = len(sides[0])
    keep = np.sort(np.random.default_rng(seed).permutation(n)[: max(1, round(share * n))])
    for name, side in zip(sorted(names), sides):
        write_dataset(os.path.join(dest, name[:-4]), (side[int(i)].tolist() for i in keep), 1 << 16)
    return len(keep)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src")
    p.add_argument("dest")
    p.add_argument("--share", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    print(f"{carve(a.src, a.dest, a.share, a.seed)} training pairs -> {a.dest}")
