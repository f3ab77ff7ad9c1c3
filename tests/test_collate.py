"""Vectorised collation (one gather per side, a mask scatter per matrix) against the row-by-row
padding it replaced, kept here as the reference: every key, dtype and value equal on random
batches, with and without ``length_multiple``, caps and ``source_bos``."""

import numpy as np
import pytest
import torch

from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
from seqkit.data.labelled_dataset import IGNORE, LabelledDataset, segments_of, tag_targets
from seqkit.data.pair_dataset import LanguagePairDataset, pad_flat, pad_right


def write(prefix, seqs, dtype=np.uint16):
    b = IndexedDatasetBuilder(str(prefix), dtype)
    for s in seqs:
        b.add(s)
    b.finalize()
    return IndexedDataset(str(prefix))


def random_seqs(rng, n, vocab, eos, lo=1, hi=30):
    return [list(rng.integers(4, vocab, size=int(rng.integers(lo, hi)))) + [eos] for _ in range(n)]


def reference_pair_collate(ds, indices):
    """LanguagePairDataset.collate as it was: one tensor per row, padded row by row."""
    indices = [int(i) for i in indices]
    src = [ds.src[i] for i in indices]
    pad = ds.src_dict.pad()
    sample = {
        "id": torch.tensor(indices, dtype=torch.long),
        "net_input": {
            "src_tokens": ds.pad_batch(src, pad, prepend=ds.src_dict.bos() if ds.source_bos else None),
            "src_lengths": torch.tensor([len(s) + int(ds.source_bos) for s in src], dtype=torch.long),
        },
        "nsentences": len(indices),
    }
    if ds.tgt is not None:
        tgt = [ds.tgt[i] for i in indices]
        sample["target"] = ds.pad_batch(tgt, pad)
        sample["net_input"]["prev_output_tokens"] = ds.pad_batch([t[:-1] for t in tgt], pad, prepend=ds.tgt_dict.bos())
        sample["ntokens"] = int(sum(len(t) for t in tgt))
    return sample


def assert_same(new, ref, extra=()):
    assert set(new) - set(extra) == set(ref)
    for k, v in ref.items():
        if isinstance(v, dict):
            assert_same(new[k], v)
        elif isinstance(v, torch.Tensor):
            assert new[k].dtype == v.dtype and new[k].shape == v.shape, k
            assert torch.equal(new[k], v), k
        else:
            assert type(new[k]) is type(v) and new[k] == v, k


@pytest.fixture(scope="module")
def pair_data(tmp_path_factory):
    d = Dictionary([f"w{i}" for i in range(40)])
    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("pairs")
    src = write(root / "src", random_seqs(rng, 200, len(d), d.eos()))
    tgt = write(root / "tgt", random_seqs(rng, 200, len(d), d.eos(), lo=0))
    return d, src, tgt


@pytest.mark.parametrize("multiple,cap", [(1, 0), (8, 0), (8, 20), (3, 31)])
@pytest.mark.parametrize("source_bos", [False, True])
def test_pair_collate_equals_row_by_row(pair_data, multiple, cap, source_bos):
    d, src, tgt = pair_data
    rng = np.random.default_rng(multiple * 100 + cap + source_bos)
    for with_target in (True, False):
        ds = LanguagePairDataset(src, tgt if with_target else None, d, d, source_bos=source_bos)
        ds.length_multiple, ds.length_cap = multiple, cap
        for _ in range(25):
            idx = rng.choice(len(ds), size=int(rng.integers(1, 17)), replace=bool(rng.integers(2)))
            new, ref = ds.collate(idx), reference_pair_collate(ds, idx)
            assert_same(new, ref, extra=("target_index", "src_padded"))
            S = ref["net_input"]["src_tokens"].size(1)
            assert new["src_padded"] is bool((ref["net_input"]["src_lengths"] < S).any())
            if with_target:
                keep = ref["target"].reshape(-1).ne(d.pad())
                assert torch.equal(new["target_index"], torch.nonzero(keep).squeeze(1))
                assert new["target_index"].dtype == torch.long


def test_pad_flat_frozen():
    out = pad_flat(np.array([4, 5, 6, 7]), np.array([3, 1]), pad=1, prepend=2, multiple=8)
    assert out.tolist() == [[2, 4, 5, 6, 1, 1, 1, 1], [2, 7, 1, 1, 1, 1, 1, 1]]
    ref = pad_right([torch.tensor([4, 5, 6]), torch.tensor([7])], pad=1, prepend=2, multiple=8)
    assert out.tolist() == ref.tolist()
    assert pad_flat(np.array([4, 5, 6]), np.array([3, 0]), pad=1, multiple=4, cap=3).tolist() == [[4, 5, 6], [1, 1, 1]]


def test_empty_sequences(tmp_path):
    d = Dictionary([f"w{i}" for i in range(10)])
    src, tgt = write(tmp_path / "s", [[5, 2], [], [6, 7, 2]]), write(tmp_path / "t", [[], [8, 2], [9, 2]])
    ds = LanguagePairDataset(src, tgt, d, d)
    for idx in ([0, 1, 2], [1, 0], [0]):
        assert_same(ds.collate(idx), reference_pair_collate(ds, idx), extra=("target_index", "src_padded"))


def test_no_padding_flag(pair_data):
    d, src, tgt = pair_data
    ds = LanguagePairDataset(src, tgt, d, d)
    same = [i for i in range(len(ds)) if ds.src_sizes[i] == ds.src_sizes[0]][:3]
    assert ds.collate(same)["src_padded"] is False
    ds.length_multiple = 64
    assert ds.collate(same)["src_padded"] is True  # rounded up: padded columns


def reference_labelled_collate(ds, indices):
    indices = [int(i) for i in indices]
    src = [ds.src[i] for i in indices]
    d = ds.src_dict
    tokens = ds.pad_batch(src, d.pad())
    net_input = {"src_tokens": tokens, "src_lengths": torch.tensor([len(s) for s in src], dtype=torch.long)}
    if ds.pairs:
        net_input["segments"] = segments_of(tokens, d.eos(), d.pad())
    sample = {"id": torch.tensor(indices, dtype=torch.long), "net_input": net_input, "nsentences": len(indices)}
    if ds.labels is not None:
        if ds.per_token:
            target = tag_targets(ds.pad_batch([ds.labels[i] for i in indices], 0))
        else:
            target = torch.tensor([int(ds.labels[i][0]) for i in indices], dtype=torch.long)
        sample["target"] = target
        sample["sample_size"] = int(target.ne(IGNORE).sum())
    sample["ntokens"] = int(tokens.ne(d.pad()).sum())
    return sample


@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("multiple", [1, 8])
def test_labelled_collate_equals_row_by_row(tmp_path, per_token, multiple):
    d = Dictionary([f"w{i}" for i in range(30)])
    rng = np.random.default_rng(int(per_token) * 10 + multiple)
    inputs = random_seqs(rng, 60, len(d), d.eos())
    inp = write(tmp_path / "input", inputs)
    if per_token:
        labels = write(tmp_path / "label", [list(rng.integers(0, 6, size=len(s))) for s in inputs])
    else:
        labels = write(tmp_path / "label", [[int(rng.integers(0, 4))] for _ in inputs])
    for lab in (labels, None):
        ds = LabelledDataset(inp, lab, d, per_token=per_token, pairs=True)
        ds.length_multiple = multiple
        for _ in range(10):
            idx = rng.choice(len(ds), size=int(rng.integers(1, 9)))
            assert_same(ds.collate(idx), reference_labelled_collate(ds, idx), extra=("src_padded",))


def reference_lm_collate(ds, indices):
    """TokenBlockDataset.collate as it was: ``block(i)`` row by row."""
    indices = [int(i) for i in indices]
    pairs = [ds.block(i) for i in indices]
    target = ds.pad_batch([t for _, t in pairs], ds.pad)
    scored = int(target.ne(ds.pad).sum())
    return {"id": torch.tensor(indices, dtype=torch.long),
            "net_input": {"src_tokens": ds.pad_batch([x for x, _ in pairs], ds.pad),
                          "src_lengths": torch.tensor([len(x) for x, _ in pairs], dtype=torch.long)},
            "target": target, "ntokens": scored, "sample_size": scored, "nsentences": len(indices)}


@pytest.mark.parametrize("mode", ["none", "eos", "complete"])
@pytest.mark.parametrize("context_window,eos_prefix,multiple",
                         [(0, True, 1), (5, True, 8), (0, False, 1), (3, False, 4)])
def test_lm_collate_equals_row_by_row(tmp_path, mode, context_window, eos_prefix, multiple):
    from seqkit.data.lm_dataset import TokenBlockDataset

    d = Dictionary([f"w{i}" for i in range(30)])
    rng = np.random.default_rng(7)
    data = write(tmp_path / "lm", [[d.eos()]] + random_seqs(rng, 40, len(d), d.eos(), lo=0, hi=12))  # a lone eos first
    ds = TokenBlockDataset(data, d, 9, mode, context_window=context_window, eos_prefix=eos_prefix)
    ds.length_multiple = multiple
    batches = [[0], [0, 1, len(ds) - 1]] + [rng.choice(len(ds), size=int(rng.integers(1, 9))) for _ in range(15)]
    for idx in batches:
        assert_same(ds.collate(idx), reference_lm_collate(ds, idx))


def test_data_wait_is_the_share_of_time_blocked_on_batches():
    import time

    from seqkit.data.prefetch import Prefetcher
    from seqkit.training.progress import ShapeCounter

    def slow(b):
        time.sleep(0.02)
        return {"id": torch.tensor(b)}

    groups = [[np.array([i])] for i in range(6)]
    counter = ShapeCounter()
    for _, stats in Prefetcher(slow, groups, depth=0):  # collated in the loop: all the loop does is wait
        assert stats["data_wait"] >= 0.02
        counter.add(stats)
    assert counter.summary()["data_wait"] > 0.5 and "data_wait" in counter.epoch_summary()
    counter = ShapeCounter()
    fast = Prefetcher(lambda b: {"id": torch.tensor(b)}, groups, depth=2)
    for _, stats in fast:  # a thread ahead of a slow loop: hardly any wait
        time.sleep(0.03)
        counter.add(stats)
    assert counter.summary()["data_wait"] < 0.5
