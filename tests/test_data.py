"""Dictionary, token-budget batching, sharding, collation."""

import numpy as np
import torch

from seqkit.data.batching import batch_by_size, epoch_rng, length_sorted_order, shard
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset, write_dataset
from seqkit.data.pair_dataset import LanguagePairDataset


def test_dictionary_build_save_load(tmp_path):
    from collections import Counter

    d = Dictionary.build(Counter({"b": 3, "a": 3, "c": 1, "z": 5}), threshold=2, pad_to_multiple=8)
    assert d.symbols[4:7] == ["z", "a", "b"]  # by count, ties by symbol; "c" below the threshold
    assert len(d) == 8 and d.symbols[7] == "madeupword0000"
    d.save(str(tmp_path / "dict.txt"))
    assert Dictionary.load(str(tmp_path / "dict.txt")) == d
    assert d.encode(["a", "nope"]) == [5, d.unk(), d.eos()]
    assert d.string([5, 6, 2, 7]) == ["a", "b"]


def test_batches_respect_budget_and_cover_everything():
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 40, size=500)
    order = length_sorted_order(sizes, None, epoch_rng(1, 1))
    batches = batch_by_size(order, sizes, max_tokens=200)
    assert sorted(np.concatenate(batches).tolist()) == list(range(500))
    for b in batches:
        assert len(b) * sizes[b].max() <= 200 or len(b) == 1
    # length bucketing: batches hold similar lengths
    assert np.mean([sizes[b].max() - sizes[b].min() for b in batches]) < 2


def test_batch_order_is_a_function_of_seed_and_epoch(tmp_path):
    ds = toy_pairs(tmp_path)
    a = [b.tolist() for b in ds.batches(64, seed=3, epoch=2)]
    assert a == [b.tolist() for b in ds.batches(64, seed=3, epoch=2)]
    assert a != [b.tolist() for b in ds.batches(64, seed=3, epoch=3)]


def test_shard_gives_every_rank_the_same_number_of_batches():
    batches = [np.array([i]) for i in range(7)]
    parts = [shard(batches, r, 3) for r in range(3)]
    assert [len(p) for p in parts] == [2, 2, 2]
    assert sorted(int(b[0]) for p in parts for b in p) == list(range(6))


def toy_pairs(tmp_path):
    d = Dictionary([f"w{i}" for i in range(20)])
    rng = np.random.default_rng(0)
    src = [list(rng.integers(4, 24, size=rng.integers(1, 9))) + [2] for _ in range(40)]
    tgt = [list(rng.integers(4, 24, size=rng.integers(1, 9))) + [2] for _ in range(40)]
    write_dataset(str(tmp_path / "s"), src, len(d))
    write_dataset(str(tmp_path / "t"), tgt, len(d))
    return LanguagePairDataset(IndexedDataset(str(tmp_path / "s")), IndexedDataset(str(tmp_path / "t")), d, d)


def test_collate_shifts_targets_right_behind_bos(tmp_path):
    ds = toy_pairs(tmp_path)
    sample = ds.collate([3, 7])
    tgt, prev = sample["target"], sample["net_input"]["prev_output_tokens"]
    assert tgt.shape == prev.shape
    assert (prev[:, 0] == 1).all()
    for row in range(2):
        n = int(tgt[row].ne(0).sum())
        assert prev[row, 1:n].tolist() == tgt[row, : n - 1].tolist()
        assert tgt[row, n - 1] == 2
    assert sample["ntokens"] == int(tgt.ne(0).sum())
    assert torch.equal(sample["net_input"]["src_tokens"][0, : len(ds.src[3])], ds.src[3])
