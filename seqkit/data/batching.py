"""Token-budget batching with length bucketing and seeded, reproducible shuffling."""

from __future__ import annotations

from typing import List, Optional

import numpy as np


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """The RNG for one epoch's order: a pure function of (seed, epoch), so resume is exact."""
    return np.random.default_rng([seed, epoch])


def length_sorted_order(src_sizes: np.ndarray, tgt_sizes: np.ndarray | None, rng: np.random.Generator | None) -> np.ndarray:
    """Indices sorted by target then source length; ties in random (seeded) order when ``rng``."""
    order = rng.permutation(len(src_sizes)) if rng is not None else np.arange(len(src_sizes))
    if tgt_sizes is None:
        return order[np.argsort(src_sizes[order], kind="stable")]
    order = order[np.argsort(src_sizes[order], kind="stable")]  # secondary key first (stable sorts)
    return order[np.argsort(tgt_sizes[order], kind="stable")]

def batch_by_size(order: np.ndarray, sizes: np.ndarray, max_tokens: int, max_sentences: int = 0) -> List[np.ndarray]:
    """Cut ``order`` into consecutive batches whose padded size (count x longest) fits ``max_tokens``.

    ``sizes[i]`` is the cost length of example i (e.g. max of source and target length). A single
    example longer than ``max_tokens`` gets a batch of its own rather than being dropped.
    """
    batches: List[np.ndarray] = []
    start, longest = 0, 0
    for pos, idx in enumerate(order):
        n = pos - start
        length = int(sizes[idx])
        new_longest = max(longest, length)
        too_many = (max_tokens > 0 and new_longest * (n + 1) > max_tokens) or (max_sentences > 0 and n + 1 > max_sentences)
        if n > 0 and too_many:
            batches.append(order[start:pos])
            start, new_longest = pos, length
        longest = new_longest
    if start < len(order):
        batches.append(order[start:])
    return batches


def shard(batches: List[np.ndarray], rank: int, world_size: int) -> List[np.ndarray]:
    """Rank ``rank``'s share: every ``world_size``-th batch; trailing batches that not every rank
    would get are dropped so all ranks run the same number of steps (they are reshuffled next epoch)."""
    usable = len(batches) - len(batches) % world_size if world_size > 1 else len(batches)
    return batches[rank:usable:world_size]


def token_budget_batches(sizes: np.ndarray, max_tokens: int, max_sentences: int = 0, seed: int = 1, epoch: int = 0,
                         shuffle: bool = True, exclude: Optional[np.ndarray] = None) -> List[np.ndarray]:
    """Batches of the examples of ``sizes`` (one cost length each), length-bucketed; order and batch
    order seeded per epoch when ``shuffle``; ``exclude`` lists indices to leave out."""
    rng = epoch_rng(seed, epoch) if shuffle else None
    order = length_sorted_order(sizes, None, rng)
    if exclude is not None and len(exclude):
        order = order[~np.isin(order, exclude)]
    batches = batch_by_size(order, sizes, max_tokens, max_sentences)
    if shuffle:
        rng.shuffle(batches)
    return batches
