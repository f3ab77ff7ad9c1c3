"""The vectorised batching (seqkit/data/batching.py) gives the batches of the per-example loops it
replaced, kept here as the reference: the same seed gives the same batches, so exact resume and
every logged recipe figure hold."""

from typing import List

import numpy as np
import pytest

from seqkit.data import batching
from seqkit.data.batching import batch_by_size, length_sorted_order, token_budget_batches


def loop_batch_by_size(order: np.ndarray, sizes: np.ndarray, max_tokens: int, max_sentences: int = 0) -> List[np.ndarray]:
    """The per-example greedy loop seqkit had before (the reference)."""
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


def loop_length_sorted_order(src_sizes, tgt_sizes, rng):
    """The two stable argsorts of int64 keys seqkit had before."""
    order = rng.permutation(len(src_sizes)) if rng is not None else np.arange(len(src_sizes))
    if tgt_sizes is None:
        return order[np.argsort(src_sizes[order], kind="stable")]
    order = order[np.argsort(src_sizes[order], kind="stable")]
    return order[np.argsort(tgt_sizes[order], kind="stable")]


def loop_token_budget_batches(sizes, max_tokens, max_sentences=0, seed=1, epoch=0, shuffle=True, exclude=None):
    rng = batching.epoch_rng(seed, epoch) if shuffle else None
    order = loop_length_sorted_order(sizes, None, rng)
    if exclude is not None and len(exclude):
        order = order[~np.isin(order, exclude)]
    batches = loop_batch_by_size(order, sizes, max_tokens, max_sentences)
    if shuffle:
        rng.shuffle(batches)
    return batches


def same(a: List[np.ndarray], b: List[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def random_sizes(rng: np.random.Generator, n: int) -> np.ndarray:
    """One of several length distributions, zeros and a few very long examples included."""
    kind = int(rng.integers(5))
    if kind == 0:
        return rng.integers(1, 100, n)
    if kind == 1:
        return rng.integers(0, 4, n)  # zero costs: the window must grow
    if kind == 2:
        return np.where(rng.random(n) < 0.05, rng.integers(300, 3000, n), rng.integers(1, 30, n))
    if kind == 3:
        return rng.integers(1, 70000, n)  # past 16 bits: the wide-key sort
    return np.full(n, int(rng.integers(1, 50)))


@pytest.mark.parametrize("case", range(120))
def test_batch_by_size_equals_the_loop(case):
    rng = np.random.default_rng(case)
    n = int(rng.choice([0, 1, 2, 7, 50, 400]))
    sizes = random_sizes(rng, n)
    max_tokens = int(rng.choice([0, 1, 5, 64, 300, 1000, 4096]))
    max_sentences = int(rng.choice([0, 0, 1, 3, 16]))
    for order in (np.arange(n), rng.permutation(n), loop_length_sorted_order(sizes, None, rng)):
        assert same(batch_by_size(order, sizes, max_tokens, max_sentences),
                    loop_batch_by_size(order, sizes, max_tokens, max_sentences)), (case, max_tokens, max_sentences)


def test_edge_cases_match_the_loop():
    empty = np.zeros(0, dtype=np.int64)
    assert batch_by_size(empty, empty, 100) == [] == loop_batch_by_size(empty, empty, 100)
    sizes = np.array([3, 500, 2, 2, 2, 900, 1])  # two examples longer than max_tokens: a batch each
    order = np.arange(7)
    assert same(batch_by_size(order, sizes, 100), loop_batch_by_size(order, sizes, 100))
    assert [len(b) for b in batch_by_size(order, sizes, 100)] == [1, 1, 3, 1, 1]
    assert same(batch_by_size(order, sizes, 0, 3), loop_batch_by_size(order, sizes, 0, 3))  # max_tokens=0
    assert same(batch_by_size(order, sizes, 0, 0), [order])  # no limit: one batch


@pytest.mark.parametrize("seed", range(8))
def test_length_sorted_order_equals_the_two_sorts(seed):
    rng = np.random.default_rng(seed)
    n = 1000
    src = random_sizes(rng, n)
    tgt = random_sizes(rng, n)
    for t in (None, tgt):
        assert np.array_equal(length_sorted_order(src, t, batching.epoch_rng(seed, 3)),
                              loop_length_sorted_order(src, t, batching.epoch_rng(seed, 3)))
        assert np.array_equal(length_sorted_order(src, t, None), loop_length_sorted_order(src, t, None))


@pytest.mark.parametrize("seed", range(6))
def test_token_budget_batches_unchanged(seed):
    rng = np.random.default_rng(100 + seed)
    sizes = random_sizes(rng, 2000)
    exclude = rng.choice(2000, 37, replace=False)
    for ex in (None, exclude):
        for shuffle in (True, False):
            new = token_budget_batches(sizes, 512, 0 if seed % 2 else 20, 7, 2, shuffle, ex)
            old = loop_token_budget_batches(sizes, 512, 0 if seed % 2 else 20, 7, 2, shuffle, ex)
            assert same(new, old)


def test_pair_dataset_batches_unchanged(toy_data):
    """The toy corpus's training pairs: the same batches as the loops gave, for two epochs."""
    from seqkit.tasks.translation import TranslationConfig, TranslationTask

    _, data = toy_data
    dataset = TranslationTask(TranslationConfig(data=str(data))).load_dataset("train")
    too_long = np.array([0, 5, 17])
    cost = np.maximum(dataset.src_sizes, dataset.tgt_sizes + 1)
    for epoch in (1, 2):
        rng = batching.epoch_rng(1, epoch)
        order = loop_length_sorted_order(dataset.src_sizes, dataset.tgt_sizes, rng)
        order = order[~np.isin(order, too_long)]
        old = loop_batch_by_size(order, cost, 300)
        rng.shuffle(old)
        assert same(dataset.batches(300, 0, 1, epoch, True, too_long), old)


@pytest.mark.parametrize("n", [0, 1, 5, 1000])
def test_gather_in_two_threads(n, monkeypatch):
    """gather() split across two threads is values[index]."""
    monkeypatch.setattr(batching, "PARALLEL_GATHER", 1)
    monkeypatch.setattr(batching.os, "cpu_count", lambda: 2)
    rng = np.random.default_rng(n)
    values, index = rng.integers(0, 9, 2 * n + 1).astype(np.uint16), rng.integers(0, 2 * n + 1, n)
    out = batching.gather(values, index)
    assert out.dtype == values.dtype and np.array_equal(out, values[index])


@pytest.mark.parametrize("seed", range(6))
def test_pair_batches_unchanged_wide_and_narrow(seed):
    """Pair batches with costs counted per key (16-bit keys) and gathered (wide lengths), examples
    left out or not: the loops' batches."""
    from seqkit.data.pair_dataset import LanguagePairDataset

    rng = np.random.default_rng(200 + seed)
    n = 3000
    for wide in (False, True):
        src = rng.integers(1, 70000 if wide else 60, n)
        tgt = rng.integers(1, 40, n) if seed % 2 else random_sizes(rng, n)
        dataset = LanguagePairDataset.__new__(LanguagePairDataset)
        dataset.src_sizes, dataset.tgt_sizes = src, tgt
        cost = np.maximum(src, tgt + 1)
        for exclude in (None, rng.choice(n, 50, replace=False)):
            old_rng = batching.epoch_rng(5, seed)
            order = loop_length_sorted_order(src, tgt, old_rng)
            if exclude is not None:
                order = order[~np.isin(order, exclude)]
            old = loop_batch_by_size(order, cost, 700, 0 if seed < 3 else 9)
            old_rng.shuffle(old)
            assert same(dataset.batches(700, 0 if seed < 3 else 9, 5, seed, True, exclude), old), (wide, exclude)


@pytest.mark.parametrize("cap", [0, 1, 7, 50])
def test_cut_jumping_over_runs_of_equal_cost(cap):
    """Sorted costs in long runs (the cut's jump inside a run), unsorted ones, zeros and costs
    past max_tokens: the loop's batches."""
    rng = np.random.default_rng(cap)
    runs = np.repeat(rng.integers(0, 700, 40), rng.integers(1, 400, 40))
    for sizes in (np.sort(runs), runs, np.sort(runs)[::-1].copy()):
        order = np.arange(len(sizes))
        for max_tokens in (64, 600, 4096):
            assert same(batch_by_size(order, sizes, max_tokens, cap), loop_batch_by_size(order, sizes, max_tokens, cap))
