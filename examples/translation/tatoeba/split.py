"""Tatoeba de-en (``deu.txt``: English<TAB>German, no official split) as a seeded train / valid / test
split with no sentence of valid or test in train.

    python split.py DEU_FOLDER RAW_DIR [--test 1000] [--valid 1000] [--seed 1]

Tatoeba lists one English sentence with several German translations ("Hi." / "Hallo!", "Grüß Gott!")
and one German sentence with several English ones. A split by pair would put the same sentence on
both sides of it, so pairs are grouped first: two pairs sharing their English or their German
sentence are in one group, and groups, in a seeded order, fill test, then valid, each to at least its
size; the rest is train. Writes ``RAW_DIR/{train,valid,test}.{de,en}`` and prints the counts.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from typing import Dict, List, Tuple


def read_pairs(folder: str) -> List[Tuple[str, str]]:
    """(German, English) of every line of ``folder/deu.txt`` that has both."""
    path = os.path.join(folder, "deu.txt")
    with open(path, encoding="utf-8") as f:
        pairs = []
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) >= 2 and fields[0].strip() and fields[1].strip():
                pairs.append((fields[1], fields[0]))
    return pairs


def groups_of(pairs: List[Tuple[str, str]]) -> List[List[int]]:
    """Pair indices grouped by shared sentences (union-find over the German and the English side),
    each group in file order, the groups in the order of their first pair."""
    parent = list(range(len(pairs)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: Dict[Tuple[int, str], int] = {}
    for i, (de, en) in enumerate(pairs):
        for key in ((0, de), (1, en)):
            j = first.setdefault(key, i)
            if j != i:
                parent[root(i)] = root(j)
    members: Dict[int, List[int]] = {}
    for i in range(len(pairs)):
        members.setdefault(root(i), []).append(i)
    return sorted(members.values(), key=lambda g: g[0])


def split(pairs: List[Tuple[str, str]], test: int, valid: int, seed: int) -> Dict[str, List[int]]:
    """Pair indices of each split: seeded group order, test first, then valid, the rest train."""
    groups = groups_of(pairs)
    random.Random(seed).shuffle(groups)
    out: Dict[str, List[int]] = {"test": [], "valid": [], "train": []}
    for group in groups:
        name = "test" if len(out["test"]) < test else "valid" if len(out["valid"]) < valid else "train"
        out[name].extend(group)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="split.py", description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="folder holding deu.txt")
    ap.add_argument("raw", help="output folder for {train,valid,test}.{de,en}")
    ap.add_argument("--test", type=int, default=1000, help="test pairs, at least (1000)")
    ap.add_argument("--valid", type=int, default=1000, help="valid pairs, at least (1000)")
    ap.add_argument("--seed", type=int, default=1, help="the order of the groups (1)")
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(args.folder, "deu.txt")):
        sys.exit(f"split.py: error: {args.folder} holds no deu.txt (Tatoeba's English<TAB>German pairs)")
    pairs = read_pairs(args.folder)
    parts = split(pairs, args.test, args.valid, args.seed)
    if not parts["train"]:
        sys.exit(f"split.py: error: {len(pairs)} pairs leave none for train after {args.test} test and "
                 f"{args.valid} valid")
    os.makedirs(args.raw, exist_ok=True)
    for name, ids in parts.items():
        for side, lang in ((0, "de"), (1, "en")):
            path = os.path.join(args.raw, f"{name}.{lang}")
            with open(path + ".part", "w", encoding="utf-8") as f:
                f.writelines(pairs[i][side] + "\n" for i in sorted(ids))
            os.replace(path + ".part", path)
    print(" ".join(f"{name} {len(ids)}" for name, ids in parts.items()), f"(of {len(pairs)} pairs, seed {args.seed})")


if __name__ == "__main__":
    main()
