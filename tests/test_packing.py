"""Packed training rows (``dataset.pack``): the packing, the packed sample's layout, losses equal to
the unpacked batch's, FlexAttention equal to the dense masks, refusals, and exact resume."""

import dataclasses
import json
import logging

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import seqkit
from seqkit.cli.common import ConfigBuilder
from seqkit.core.errors import SeqkitError
from seqkit.criteria.cross_entropy import LabelSmoothedCrossEntropyConfig
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
from seqkit.data.lm_dataset import TokenBlockDataset
from seqkit.data.packing import PackedPairDataset, pack_rows, pack_training_set, row_lengths
from seqkit.data.pair_dataset import LanguagePairDataset
from seqkit.data.prefetch import padding_counts
from seqkit.models.modules import document_masks
from seqkit.models.transformer import transformer_tiny
from seqkit.training.config import TrainConfig
from seqkit.training.trainer import Trainer

from test_trainer import data_dir  # noqa: F401  (the toy corpus, binarized: a fixture)

seqkit.import_builtin_components()


def test_pack_rows_places_every_pair_once_seeded_by_epoch():
    rng = np.random.default_rng(0)
    src = rng.integers(2, 12, 500)
    tgt = np.maximum(src + rng.integers(-2, 3, 500), 2)  # sentences and their translations: alike in length
    rows = pack_rows(src, tgt, 32, 32, np.random.default_rng([1, 3]))
    placed = np.concatenate(rows)
    assert sorted(placed.tolist()) == list(range(500))
    assert all(src[r].sum() <= 32 and tgt[r].sum() <= 32 for r in rows)
    filled = (src.sum() + tgt.sum()) / (len(rows) * 64)
    assert round(filled, 4) == 0.9449  # 3-5 pairs a row here; Tatoeba rows of 256 fill to 97.6%
    again = pack_rows(src, tgt, 32, 32, np.random.default_rng([1, 3]))
    other = pack_rows(src, tgt, 32, 32, np.random.default_rng([1, 4]))
    assert all(np.array_equal(a, b) for a, b in zip(rows, again))
    assert not all(len(a) == len(b) and np.array_equal(a, b) for a, b in zip(rows, other))
    assert row_lengths(np.array([10, 10]), np.array([5, 4]), 64) == (64, 32)  # 64 * 9/20 = 28.8 -> 32
    assert row_lengths(np.array([5, 4]), np.array([10, 10]), 20) == (16, 20)


def _pairs(tmp_path, pairs, vocab=20):
    d = Dictionary([f"w{i}" for i in range(vocab)])
    for side in ("src", "tgt"):
        b = IndexedDatasetBuilder(str(tmp_path / side), np.int32)
        for p in pairs:
            b.add(list(p[0 if side == "src" else 1]) + [d.eos()])
        b.finalize()
    return LanguagePairDataset(IndexedDataset(str(tmp_path / "src")), IndexedDataset(str(tmp_path / "tgt")), d, d)


def test_packed_sample_layout(tmp_path):
    ds = _pairs(tmp_path, [([4, 5], [6]), ([7], [8, 9, 10]), ([11, 12, 13], [14, 15])])
    packed = PackedPairDataset(ds, src_len=6, tgt_len=6, rows=2)
    s = packed.collate(np.array([[1, 0], [0, 0], [2, 1]]))  # pairs 1 then 0 in row 0, pair 2 in row 1
    ni = s["net_input"]
    eos, pad, bos = ds.src_dict.eos(), ds.src_dict.pad(), ds.tgt_dict.bos()
    assert ni["src_tokens"].tolist() == [[7, eos, 4, 5, eos, pad], [11, 12, 13, eos, pad, pad]]
    assert ni["src_segments"].tolist() == [[0, 0, 1, 1, 1, -1], [0, 0, 0, 0, -1, -1]]
    assert ni["src_positions"].tolist() == [[0, 1, 0, 1, 2, 0], [0, 1, 2, 3, 0, 0]]
    assert s["target"].tolist() == [[8, 9, 10, eos, 6, eos], [14, 15, eos, pad, pad, pad]]
    assert ni["prev_output_tokens"].tolist() == [[bos, 8, 9, 10, bos, 6], [bos, 14, 15, pad, pad, pad]]
    assert ni["tgt_segments"].tolist() == [[0, 0, 0, 0, 1, 1], [0, 0, 0, -1, -1, -1]]
    assert ni["tgt_positions"].tolist() == [[0, 1, 2, 3, 0, 1], [0, 1, 2, 0, 0, 0]]
    assert ni["src_lengths"].tolist() == [5, 4]
    assert s["fixed_shape"] is True and "target_index" not in s  # the loss takes all 12 rows, padding weighted 0
    assert (s["ntokens"], s["nsentences"], s["id"].tolist()) == (9, 3, [1, 0, 2])
    assert padding_counts(s) == (3 + 3, 24)  # the train log's `padding`: 6 of 24 positions


def _task_and_model(data_dir, **model_changes):
    from seqkit.core.registry import TASKS
    from seqkit.tasks.translation import TranslationConfig

    task = TASKS.build(TranslationConfig(data=data_dir))
    torch.manual_seed(0)
    model = task.build_model(dataclasses.replace(transformer_tiny(), dropout=0.0, **model_changes))
    return task, model


def _loss_and_grads(model, criterion, sample):
    model.zero_grad()
    loss, _, logs = criterion(model, sample)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss.detach()), float(logs["nll_loss"]), grads


@pytest.mark.parametrize("changes", [{}, {"learned_positions": True, "decoder_start": "eos", "normalize_before": True}])
def test_packed_losses_equal_unpacked(data_dir, changes):  # noqa: F811
    """fp32, dropout 0: the summed label-smoothed loss and NLL of a packed batch equal those of the
    same sentences in an ordinary batch, and so do the gradients."""
    task, model = _task_and_model(data_dir, **changes)
    ds = task.load_dataset("train")
    criterion = task.build_criterion(LabelSmoothedCrossEntropyConfig(label_smoothing=0.1))
    packed = pack_training_set(ds, model, max_tokens=200, max_sentences=0, pack_length=40)
    batch = packed.batches(200, seed=1, epoch=1)[0]
    with document_masks.force("dense"):
        a = _loss_and_grads(model, criterion, packed.collate(batch))
    b = _loss_and_grads(model, criterion, ds.collate(batch[:, 0]))
    assert a[0] == pytest.approx(b[0], rel=1e-5) and a[1] == pytest.approx(b[1], rel=1e-5)
    assert a[2].keys() == b[2].keys()
    for name in a[2]:
        torch.testing.assert_close(a[2][name], b[2][name], rtol=1e-4, atol=1e-6, msg=name)


def test_flex_attention_masks_equal_dense_ones(data_dir):  # noqa: F811
    """The CUDA form (FlexAttention block masks, here run eagerly on the CPU, forward only: its CPU
    backward is not built) gives the dense masks' outputs."""
    if document_masks.flex_attention is None:
        pytest.skip("this torch has no FlexAttention")
    task, model = _task_and_model(data_dir)
    ds = task.load_dataset("train")
    packed = PackedPairDataset(ds, src_len=40, tgt_len=32, rows=5)  # cross-attention masks of 32 x 40
    ni = packed.collate(packed.batches(200, seed=1, epoch=1)[0])["net_input"]
    model.eval()
    outs = {}
    with torch.no_grad():
        for impl in ("flex", "dense"):
            with document_masks.force(impl):
                outs[impl] = model(**ni)
    assert document_masks.is_block_mask(document_masks.document_mask(ni["src_segments"], ni["src_segments"], False, True))
    assert document_masks.use_flex(torch.device("cuda"), 0.0) and not document_masks.use_flex(torch.device("cuda"), 0.1)
    assert not document_masks.use_flex(torch.device("cpu"), 0.0)
    real = ni["tgt_segments"].ge(0)
    torch.testing.assert_close(outs["flex"][real], outs["dense"][real], rtol=1e-4, atol=1e-4)


def test_pack_is_refused_where_it_cannot_apply(data_dir, tmp_path):  # noqa: F811
    task, model = _task_and_model(data_dir, relative_buckets=8)
    ds = task.load_dataset("train")
    with pytest.raises(SeqkitError, match="relative"):
        pack_training_set(ds, model, 200, 0, 40)
    with pytest.raises(SeqkitError, match="takes no document masks"):
        pack_training_set(ds, torch.nn.LSTM(2, 2), 200, 0, 40)
    _, model = _task_and_model(data_dir)
    with pytest.raises(SeqkitError, match="distillation"):
        pack_training_set(ds, model, 200, 0, 40, criterion=type("Distillation", (), {"teacher": model})())
    with pytest.raises(SeqkitError, match="max_sentences"):
        pack_training_set(ds, model, 200, 8, 40)
    stream = _pairs(tmp_path, [([4, 5], [6]), ([7], [8, 9, 10])]).src
    with pytest.raises(SeqkitError, match="packed for lm models, not TransformerModel"):
        pack_training_set(TokenBlockDataset(stream, ds.src_dict, 4, "eos"), model, 200, 0, 0)  # (tests/test_packing_lm.py)
    blocks = TokenBlockDataset(stream, ds.src_dict, 4, "none")
    assert pack_training_set(blocks, model, 200, 0, 0) is blocks  # rows of one length already
    with pytest.raises(SeqkitError, match="less than one batch"):
        PackedPairDataset(ds, 40, 40, rows=1000).batches(40000, seed=1, epoch=1)
    with pytest.raises(SeqkitError, match="cannot be packed"):
        pack_training_set(object(), model, 200, 0, 0)


def _cfg(data_dir, save_dir, *extra):
    overrides = [f"task.data={data_dir}", f"checkpoint.save_dir={save_dir}", "model=transformer_tiny",
                 "dataset.max_tokens=200", "dataset.pack=true", "dataset.pack_length=40",
                 "lr_scheduler.warmup_updates=5", "common.log_format=json", "common.threads=1",
                 "common.log_interval=2", *extra]
    return OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(overrides))


def _train_losses(save_dir):
    with open(save_dir / "train_log.jsonl", encoding="utf-8") as f:
        return [(r["update"], r["loss"], r["padding"]) for r in map(json.loads, f) if r["tag"] == "train"]


def test_packed_run_resumes_exactly(data_dir, tmp_path):  # noqa: F811
    """Stopped mid-epoch and resumed: the same losses and weights as a run that never stopped; every
    batch has one shape."""
    straight = Trainer(_cfg(data_dir, tmp_path / "a", "optimization.max_update=10"))
    straight.run()
    first = Trainer(_cfg(data_dir, tmp_path / "b", "optimization.max_update=4"))
    first.run()
    assert first.epoch == 1 and first.batch_offset == 4  # 6 batches an epoch: stopped inside it
    resumed = Trainer(_cfg(data_dir, tmp_path / "b", "optimization.max_update=10"))
    resumed.run()
    assert resumed.num_updates == straight.num_updates == 10
    assert _train_losses(tmp_path / "a") == _train_losses(tmp_path / "b")
    # the logged padding of the packed rows (the toy's 120 pairs of up to 20 tokens fill rows of 40 less well)
    assert [r[2] for r in _train_losses(tmp_path / "a")] == [0.08, 0.0938, 0.16, 0.1613, 0.0775]
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    train = straight._load("train", training=True)
    shapes = {tuple(train.collate(b)["target"].shape) for b in train.batches(200, seed=1, epoch=2)}
    assert shapes == {(5, 40)}


def test_pairs_longer_than_a_row_name_the_row(data_dir, tmp_path, caplog):  # noqa: F811
    """A pair longer than a packed row (shorter than the model's positions) is counted against the
    row, not the model: the line names what it was held to."""
    t = Trainer(_cfg(data_dir, tmp_path / "a", "dataset.pack_length=16", "dataset.skip_invalid_size_inputs=false"))
    with pytest.raises(SeqkitError, match=r"training pairs exceed a packed row \(16/16 tokens\)"):
        t.run()
    t = Trainer(_cfg(data_dir, tmp_path / "b", "dataset.pack_length=16", "optimization.max_update=1"))
    with caplog.at_level(logging.WARNING, logger="seqkit.train"):
        t.run()
    assert any("longer than a packed row (16/16 tokens)" in r.getMessage() for r in caplog.records)
