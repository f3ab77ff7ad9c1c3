"""Token-budget batching with length bucketing and seeded, reproducible shuffling.

Vectorised for corpora of tens of millions of examples: the sort is a counting sort on small
integer keys, and the greedy cut takes one numpy step per batch, not a Python step per example;
the batches are the same as a per-example loop's (``tests/test_batching_scale.py``). The seeded
permutation and the sort by key are compiled loops that prefetch their random reads
(``orderkernels.py``; numpy's, with the same result, where no compiler works). Past a million
examples the permutation is drawn in a thread while the keys and the sorted costs are counted, and
the other gathers through it are split between two threads (docs/scale.md).
"""

from __future__ import annotations

import os
import threading
from typing import Callable, List, Optional, Tuple

import numpy as np

from seqkit.data import orderkernels

PARALLEL_GATHER = 1 << 20  # indices from which gather() splits the work in two threads


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


def two_threads(n: int) -> bool:
    """Whether work over ``n`` examples is split across a second thread: from ``PARALLEL_GATHER`` on,
    where there is a second CPU."""
    return n >= PARALLEL_GATHER and (os.cpu_count() or 1) >= 2


def gather(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``values[index]``, the two halves in two threads when ``index`` is long: a gather through a
    random order waits on memory, and two cores keep twice the reads in flight (2.6x faster at
    16M; numpy releases the GIL while it gathers)."""
    if not two_threads(len(index)):
        return values[index]
    out = np.empty(len(index), dtype=values.dtype)
    half = len(index) // 2
    other = threading.Thread(target=np.take, args=(values, index[:half]), kwargs={"out": out[:half]})
    other.start()
    np.take(values, index[half:], out=out[half:])
    other.join()
    return out


class Drawn:
    """``rng.permutation(n)`` (``arange(n)`` without ``rng``), drawn in a thread of its own when ``n``
    is large: the Fisher-Yates shuffle is one sequential walk of random swaps, and the work that does
    not need it can go on beside it. ``result()`` waits for it."""

    def __init__(self, rng: Optional[np.random.Generator], n: int):
        self._order: Optional[np.ndarray] = None if rng is not None else np.arange(n)
        self._thread: Optional[threading.Thread] = None
        if rng is None:
            return
        if not two_threads(n):
            self._order = orderkernels.permutation(rng, n)
            return
        self._thread = threading.Thread(target=self._draw, args=(rng, n), name="seqkit-permutation")
        self._thread.start()

    def _draw(self, rng: np.random.Generator, n: int) -> None:
        self._order = orderkernels.permutation(rng, n)

    def result(self) -> np.ndarray:
        if self._thread is not None:
            self._thread.join()
        assert self._order is not None
        return self._order


def sort_key(src_sizes: np.ndarray, tgt_sizes: np.ndarray | None) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(key, src_of, tgt_of)``: one key of at most 16 bits per example whose order is the order by
    target, then source length (``key`` ``(n,)``; ``src_of``/``tgt_of`` ``(K,)`` the lengths of each
    key value, ``tgt_of`` None without targets), or None when the lengths do not fit 16 bits."""
    src = small_keys(src_sizes)
    if not len(src) or src.dtype.itemsize > 2:
        return None
    if tgt_sizes is None:
        return src, np.arange(int(src.max()) + 1), None
    tgt = small_keys(tgt_sizes)
    width = int(src.max()) + 1
    if tgt.dtype.itemsize > 2 or (int(tgt.max()) + 1) * width > 1 << 16:
        return None
    values = np.arange((int(tgt.max()) + 1) * width)
    return tgt.astype(np.uint16) * np.uint16(width) + src, values % width, values // width


def sorted_order(src_sizes: np.ndarray, tgt_sizes: np.ndarray | None, rng: np.random.Generator | None,
                 exclude: Optional[np.ndarray] = None, cost_of: Optional[Callable[..., np.ndarray]] = None,
                 ) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """``(order, cost)``: the indices sorted by target then source length, ties in random (seeded)
    order when ``rng``, less ``exclude``; and when ``cost_of(src_len, tgt_len)`` (arrays; ``tgt_len``
    None without targets) is given and the lengths make a 16-bit key, each index's cost in that
    order, counted per key value rather than gathered (else None: gather it)."""
    n = len(src_sizes)
    drawn = Drawn(rng, n)  # the seeded permutation, drawn in a thread while the keys are made here
    key = sort_key(src_sizes, tgt_sizes)
    cost = counts = None
    if key is not None:
        counts = np.bincount(key[0], minlength=len(key[1]))  # (K,) examples of each key value
    if key is not None and cost_of is not None:  # the sorted keys are each value repeated its count
        cost = np.repeat(cost_of(key[1], key[2]), counts)
    order = drawn.result()
    if key is None:  # wide lengths: two stable sorts, the secondary key first
        src = small_keys(src_sizes)
        order = gather(order, np.argsort(gather(src, order), kind="stable"))
        if tgt_sizes is not None:
            tgt = small_keys(tgt_sizes)
            order = gather(order, np.argsort(gather(tgt, order), kind="stable"))
    else:  # one counting sort of the 16-bit keys
        order = orderkernels.sort_by_key(order, key[0], counts)
    if exclude is not None and len(exclude):
        mask = kept(order, exclude, n)
        order, cost = order[mask], cost[mask] if cost is not None else None
    return order, cost


def length_sorted_order(src_sizes: np.ndarray, tgt_sizes: np.ndarray | None, rng: np.random.Generator | None) -> np.ndarray:
    """Indices sorted by target then source length; ties in random (seeded) order when ``rng``."""
    return sorted_order(src_sizes, tgt_sizes, rng)[0]


def kept(order: np.ndarray, exclude: np.ndarray, n: int) -> np.ndarray:
    """A mask over ``order`` (indices below ``n``): False where the index is in ``exclude`` (a
    gather through a mask, not ``np.isin``'s sort)."""
    keep = np.ones(n, dtype=bool)
    keep[np.asarray(exclude, dtype=np.int64)] = False
    return gather(keep, order)


def without(order: np.ndarray, exclude: Optional[np.ndarray], n: int) -> np.ndarray:
    """``order`` (indices below ``n``) less the indices in ``exclude``, in order."""
    if exclude is None or not len(exclude):
        return order
    return order[kept(order, exclude, n)]


def batch_ends(cost: np.ndarray, max_tokens: int, max_sentences: int = 0) -> np.ndarray:
    """Where the greedy cut ends each batch of examples of ``cost`` ``(n,)`` (in batch order):
    a batch grows while (count x longest) fits ``max_tokens`` and the count ``max_sentences``; a
    batch always takes its first example. ``(num_batches,)``, the last one ``n``.

    Within a batch starting at s, ``cummax(cost[s:s+k+1]) * (k+1)`` does not decrease with k, so its
    end is one ``searchsorted`` over a window that holds it: at most ``max_tokens // cost[s] + 1``
    examples (the longest is at least ``cost[s]``) and ``max_sentences``.

    A batch that starts in a run of c-cost examples holding at least ``k = min(max_tokens // c,
    max_sentences)`` more of them is exactly those k (its longest is c, one more would not fit), so
    the cut jumps over a run's whole batches in one step: a length-sorted order is long runs of
    equal cost, and the loop takes a step or two per run, not one per batch."""
    n = len(cost)
    if max_tokens <= 0:
        step = max_sentences if max_sentences > 0 else max(n, 1)
        return np.minimum(np.arange(step, n + step, step, dtype=np.int64), n)[: -(-n // step)]
    cost = np.asarray(cost)
    cap = max_sentences if max_sentences > 0 else n
    least = int(cost.min()) if n else 0
    longest = min(cap, n, max_tokens // least + 1) if least > 0 else min(cap, n)  # no batch holds more
    counts = np.arange(1, longest + 1, dtype=np.int64)  # (longest,) k + 1, sliced per batch
    run_ends = np.append(np.flatnonzero(cost[1:] != cost[:-1]) + 1, n)  # (runs,) where each run of equal cost ends
    ends: List[int] = []
    start = 0
    while start < n:
        first = int(cost[start])
        k = min(cap, max_tokens // first) if first > 0 else 0
        if k > 0:
            whole = (int(run_ends[np.searchsorted(run_ends, start, side="right")]) - start) // k
            if whole > 0:  # batches of exactly k inside the run
                ends.extend(range(start + k, start + whole * k + 1, k))
                start += whole * k
                continue
        window = min(cap, n - start, max_tokens // first + 1 if first > 0 else 1024)
        while True:
            seg = cost[start : start + window]
            fits = int(np.searchsorted(np.maximum.accumulate(seg).astype(np.int64) * counts[:window], max_tokens,
                                       side="right"))
            # the window holds the cut unless it only stopped at a zero-cost guess (first == 0)
            if fits < window or window >= min(cap, n - start) or first > 0:
                break
            window = min(2 * window, cap, n - start)
        start += max(fits, 1)
        ends.append(start)
    return np.array(ends, dtype=np.int64)


def batch_by_size(order: np.ndarray, sizes: Optional[np.ndarray], max_tokens: int, max_sentences: int = 0,
                  ordered_cost: Optional[np.ndarray] = None) -> List[np.ndarray]:
    """Cut ``order`` into consecutive batches whose padded size (count x longest) fits ``max_tokens``.

    ``sizes[i]`` is the cost length of example i (e.g. max of source and target length), or
    ``ordered_cost`` the costs in ``order`` already (``sorted_order``'s). A single example longer
    than ``max_tokens`` gets a batch of its own rather than being dropped.
    """
    if not len(order):
        return []
    cost = ordered_cost if ordered_cost is not None else gather(small_keys(sizes), order)
    ends = batch_ends(cost, max_tokens, max_sentences).tolist()
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
    order, cost = sorted_order(sizes, None, rng, exclude, cost_of=lambda s, t: s)
    batches = batch_by_size(order, sizes, max_tokens, max_sentences, cost)
    if shuffle:
        rng.shuffle(batches)
    return batches
