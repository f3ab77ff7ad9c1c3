"""Token-budget batching with length bucketing and seeded, reproducible shuffling.

Vectorised for corpora of tens of millions of examples: the sorts are numpy's radix sorts on
small integer keys, and the greedy cut takes one numpy step per batch, not a Python step per
example; the batches are the same as a per-example loop's (``tests/test_batching_scale.py``).
"""

from __future__ import annotations

from typing import List, Optional

import numpy as np


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """The RNG for one epoch's order: a pure function of (seed, epoch), so resume is exact."""
    return np.random.default_rng([seed, epoch])


def small_keys(keys: np.ndarray) -> np.ndarray:
    """``keys`` (integers) in the narrowest unsigned type that holds them, when they are not negative:
    numpy's stable argsort is a radix sort, O(n), for 8- and 16-bit keys (timsort otherwise), and a
    gather of narrow keys reads less memory; the order is the same."""
    keys = np.asarray(keys)
    if keys.dtype.kind not in "iu" or not len(keys) or int(keys.min()) < 0:
        return keys
    top = int(keys.max())
    for dtype in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(dtype).max:
            return keys.astype(dtype, copy=False)
    return keys


def length_sorted_order(src_sizes: np.ndarray, tgt_sizes: np.ndarray | None, rng: np.random.Generator | None) -> np.ndarray:
    """Indices sorted by target then source length; ties in random (seeded) order when ``rng``."""
    order = rng.permutation(len(src_sizes)) if rng is not None else np.arange(len(src_sizes))
    src = small_keys(src_sizes)
    if tgt_sizes is None:
        return order[np.argsort(src[order], kind="stable")]
    tgt = small_keys(tgt_sizes)
    if len(order) and src.dtype.itemsize <= 2 and tgt.dtype.itemsize <= 2 and \
            (int(tgt.max()) + 1) * (int(src.max()) + 1) <= 1 << 16:
        # one radix sort of a 16-bit key (target, source): the order of the two stable sorts below
        key = tgt.astype(np.uint16) * np.uint16(int(src.max()) + 1) + src
        return order[np.argsort(key[order], kind="stable")]
    order = order[np.argsort(src[order], kind="stable")]  # secondary key first (stable sorts)
    return order[np.argsort(tgt[order], kind="stable")]


def without(order: np.ndarray, exclude: Optional[np.ndarray], n: int) -> np.ndarray:
    """``order`` (indices below ``n``) less the indices in ``exclude``, in order: a mask, not
    ``np.isin``'s sort."""
    if exclude is None or not len(exclude):
        return order
    keep = np.ones(n, dtype=bool)
    keep[np.asarray(exclude, dtype=np.int64)] = False
    return order[keep[order]]


def batch_ends(cost: np.ndarray, max_tokens: int, max_sentences: int = 0) -> np.ndarray:
    """Where the greedy cut ends each batch of examples of ``cost`` ``(n,)`` (in batch order):
    a batch grows while (count x longest) fits ``max_tokens`` and the count ``max_sentences``; a
    batch always takes its first example. ``(num_batches,)``, the last one ``n``.

    Within a batch starting at s, ``cummax(cost[s:s+k+1]) * (k+1)`` does not decrease with k, so its
    end is one ``searchsorted`` over a window that holds it: at most ``max_tokens // cost[s] + 1``
    examples (the longest is at least ``cost[s]``) and ``max_sentences``."""
    n = len(cost)
    if max_tokens <= 0:
        step = max_sentences if max_sentences > 0 else max(n, 1)
        return np.minimum(np.arange(step, n + step, step, dtype=np.int64), n)[: -(-n // step)]
    cost = np.asarray(cost, dtype=np.int64)
    cap = max_sentences if max_sentences > 0 else n
    least = int(cost.min()) if n else 0
    longest = min(cap, n, max_tokens // least + 1) if least > 0 else min(cap, n)  # no batch holds more
    counts = np.arange(1, longest + 1, dtype=np.int64)  # (longest,) k + 1, sliced per batch
    ends: List[int] = []
    start = 0
    while start < n:
        first = int(cost[start])
        window = min(cap, n - start, max_tokens // first + 1 if first > 0 else 1024)
        while True:
            seg = cost[start : start + window]
            fits = int(np.searchsorted(np.maximum.accumulate(seg) * counts[:window], max_tokens, side="right"))
            # the window holds the cut unless it only stopped at a zero-cost guess (first == 0)
            if fits < window or window >= min(cap, n - start) or first > 0:
                break
            window = min(2 * window, cap, n - start)
        start += max(fits, 1)
        ends.append(start)
    return np.array(ends, dtype=np.int64)


def batch_by_size(order: np.ndarray, sizes: np.ndarray, max_tokens: int, max_sentences: int = 0) -> List[np.ndarray]:
    """Cut ``order`` into consecutive batches whose padded size (count x longest) fits ``max_tokens``.

    ``sizes[i]`` is the cost length of example i (e.g. max of source and target length). A single
    example longer than ``max_tokens`` gets a batch of its own rather than being dropped.
    """
    if not len(order):
        return []
    ends = batch_ends(small_keys(sizes)[order], max_tokens, max_sentences).tolist()
    return [order[a:b] for a, b in zip([0] + ends[:-1], ends)]


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
    order = without(length_sorted_order(sizes, None, rng), exclude, len(sizes))
    batches = batch_by_size(order, sizes, max_tokens, max_sentences)
    if shuffle:
        rng.shuffle(batches)
    return batches
