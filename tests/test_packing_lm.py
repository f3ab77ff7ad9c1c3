"""Packed language-model and masked-LM blocks (``dataset.pack`` with ``task.sample_break_mode``
eos/complete): the packed sample's layout, losses and gradients equal to the unpacked batch's,
FlexAttention equal to the dense masks, refusals, the logged padding, exact resume, one graph."""

import dataclasses
import json

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import seqkit
from seqkit.cli.common import ConfigBuilder
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import CRITERIA, MODELS
from seqkit.criteria.cross_entropy import AdaptiveLossConfig, CrossEntropyConfig
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
from seqkit.data.lm_dataset import TokenBlockDataset
from seqkit.data.packing import PackedBlockDataset, pack_training_set
from seqkit.data.prefetch import padding_counts
from seqkit.models.modules import document_masks
from seqkit.training.config import TrainConfig
from seqkit.training.trainer import Trainer

from test_language_model import corpus, lm_task  # noqa: F401  (the counting corpus, binarized: a fixture)
from test_packing import _loss_and_grads

seqkit.import_builtin_components()

DICT = Dictionary([f"w{i}" for i in range(28)])  # pad=0, <s>=1, </s>=2, unk=3
ADAPTIVE = {"adaptive_softmax_cutoff": [6, 10], "share_input_output_embed": False, "adaptive_input": True}


def _stream(tmp_path, lines):
    b = IndexedDatasetBuilder(str(tmp_path / "stream"), np.int32)
    for line in lines:
        b.add(list(line) + [DICT.eos()])
    b.finalize()
    return IndexedDataset(str(tmp_path / "stream"))


def _gpt(**changes):
    torch.manual_seed(0)
    cfg = dataclasses.replace(MODELS.choices()["gpt_tiny"], dropout=0.0, attention_dropout=0.0, **changes)
    return MODELS.build(cfg, DICT)


def test_packed_block_layout(tmp_path):
    eos, pad = DICT.eos(), DICT.pad()
    ds = TokenBlockDataset(_stream(tmp_path, [[4, 5], [6, 7, 8], [9]]), DICT, 8, "eos")
    packed = PackedBlockDataset(ds, length=6, rows=2)
    s = packed.collate(np.array([[1, 0], [2, 0], [0, 1]]))  # lines 1 then 2 in row 0, line 0 in row 1
    ni = s["net_input"]
    assert ni["src_tokens"].tolist() == [[eos, 6, 7, 8, eos, 9], [eos, 4, 5, pad, pad, pad]]
    assert s["target"].tolist() == [[6, 7, 8, eos, 9, eos], [4, 5, eos, pad, pad, pad]]
    assert ni["src_segments"].tolist() == [[0, 0, 0, 0, 1, 1], [0, 0, 0, -1, -1, -1]]
    assert ni["src_positions"].tolist() == [[0, 1, 2, 3, 0, 1], [0, 1, 2, 0, 0, 0]]
    assert ni["src_lengths"].tolist() == [6, 3]
    assert (s["ntokens"], s["nsentences"], s["id"].tolist(), s["fixed_shape"]) == (9, 3, [1, 2, 0], True)
    assert padding_counts(s) == (3, 12)  # the train log's `padding`: 3 of 12 positions


@pytest.mark.parametrize("mode,criterion,changes", [
    ("eos", CrossEntropyConfig(), {}),
    ("complete", CrossEntropyConfig(), {"learned_positions": False}),
    ("eos", AdaptiveLossConfig(), ADAPTIVE),
])
def test_packed_lm_losses_equal_unpacked(corpus, mode, criterion, changes):  # noqa: F811
    """fp32, dropout 0: the summed loss of a packed batch of blocks, and its gradients, equal those
    of the same blocks one to a row."""
    task = lm_task(corpus / "bin", tokens_per_sample=16, sample_break_mode=mode)
    ds = task.load_dataset("train")
    model = task.build_model(dataclasses.replace(MODELS.choices()["gpt_tiny"], dropout=0.0, attention_dropout=0.0,
                                                 **changes))
    crit = CRITERIA.build(criterion, task)
    packed = pack_training_set(ds, model, max_tokens=256, max_sentences=0, pack_length=64)
    assert isinstance(packed, PackedBlockDataset) and packed.rows == 4
    batch = packed.batches(256, seed=1, epoch=1)[0]
    with document_masks.force("dense"):
        a = _loss_and_grads(model, crit, packed.collate(batch))
    b = _loss_and_grads(model, crit, ds.collate(batch[:, 0]))
    assert a[0] == pytest.approx(b[0], rel=1e-5) and a[1] == pytest.approx(b[1], rel=1e-5)
    assert a[2].keys() == b[2].keys()
    for name in a[2]:  # 1e-5 of each gradient's scale (its small entries are sums of large terms)
        scale = float(b[2][name].abs().max())
        torch.testing.assert_close(a[2][name], b[2][name], rtol=1e-5, atol=1e-5 * scale, msg=name)


def test_flex_attention_masks_equal_dense_ones_for_blocks(tmp_path):
    """The CUDA form (FlexAttention, here eager on the CPU, forward only) gives the dense masks' outputs."""
    if document_masks.flex_attention is None:
        pytest.skip("this torch has no FlexAttention")
    rng = np.random.default_rng(0)
    ds = TokenBlockDataset(_stream(tmp_path, [rng.integers(4, 32, rng.integers(0, 14)) for _ in range(60)]),
                           DICT, 16, "eos")
    packed = PackedBlockDataset(ds, length=48, rows=4)
    ni = packed.collate(packed.batches(seed=1, epoch=1)[0])["net_input"]
    model = _gpt().eval()
    outs = {}
    with torch.no_grad():
        for impl in ("flex", "dense"):
            with document_masks.force(impl):
                outs[impl] = model(**ni)
    real = ni["src_segments"].ge(0)
    torch.testing.assert_close(outs["flex"][real], outs["dense"][real], rtol=1e-4, atol=1e-4)


def test_lm_pack_refusals(tmp_path):
    stream = _stream(tmp_path, [[4, 5], [6, 7, 8], [9]])
    blocks = TokenBlockDataset(stream, DICT, 4, "eos")
    lstm = MODELS.build(MODELS.choices()["lstm_lm_tiny"], DICT)
    with pytest.raises(SeqkitError, match="LSTMLM takes no document masks"):
        pack_training_set(blocks, lstm, 200, 0, 0)
    with pytest.raises(SeqkitError, match="max_sentences"):
        pack_training_set(blocks, _gpt(), 200, 8, 0)
    with pytest.raises(SeqkitError, match="learned prefix"):
        _gpt().features(torch.ones(1, 3, dtype=torch.long), prefix=torch.zeros(1, 2, 64),
                        segments=torch.zeros(1, 3, dtype=torch.long))
    other = type("DenoisingDataset", (), {"break_mode": "complete"})()
    with pytest.raises(SeqkitError, match="DenoisingDataset blocks of many lengths, not packed"):
        pack_training_set(other, _gpt(), 200, 0, 0)
    none = TokenBlockDataset(stream, DICT, 4, "none")
    assert pack_training_set(none, lstm, 200, 0, 0) is none  # rows of one length already: any model
    assert pack_training_set(blocks, _gpt(), 200, 0, 0).length == 200  # at most max_tokens


def _cfg(corpus, save_dir, *extra):  # noqa: F811
    overrides = ["task=language_modeling", f"task.data={corpus / 'bin'}", "task.tokens_per_sample=16",
                 "task.sample_break_mode=eos", f"checkpoint.save_dir={save_dir}", "model=gpt_tiny",
                 "criterion=cross_entropy", "optimizer=adam", "optimizer.lr=0.01", "lr_scheduler=fixed",
                 "dataset.max_tokens=256", "dataset.pack=true", "dataset.pack_length=64",
                 "common.log_format=json", "common.threads=1", "common.log_interval=2", *extra]
    return OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(overrides))


def _train_log(save_dir):
    with open(save_dir / "train_log.jsonl", encoding="utf-8") as f:
        return [(r["update"], r["loss"], r["padding"]) for r in map(json.loads, f) if r["tag"] == "train"]


def test_packed_lm_run_resumes_exactly(corpus, tmp_path):  # noqa: F811
    """Stopped mid-epoch and resumed: the same losses and weights as a run that never stopped; the
    logged padding is that of the packed rows; every batch has one shape."""
    straight = Trainer(_cfg(corpus, tmp_path / "a", "optimization.max_update=10"))
    straight.run()
    first = Trainer(_cfg(corpus, tmp_path / "b", "optimization.max_update=4"))
    first.run()
    assert first.epoch == 1 and first.batch_offset == 4
    resumed = Trainer(_cfg(corpus, tmp_path / "b", "optimization.max_update=10"))
    resumed.run()
    assert resumed.num_updates == straight.num_updates == 10
    assert _train_log(tmp_path / "a") == _train_log(tmp_path / "b")
    train = straight._load("train", training=True)
    batches = train.batches(256, seed=1, epoch=1)
    padded, total = map(sum, zip(*(padding_counts(train.collate(b)) for b in batches)))
    assert round(padded / total, 4) == 0.0117  # rows of 64 from lines of 1-10 tokens
    unpacked = train.base.batches(256, 0, seed=1, epoch=1)
    padded, total = map(sum, zip(*(padding_counts(train.base.collate(b)) for b in unpacked)))
    assert round(padded / total, 4) == 0.1009  # the same blocks one a row, in token-budget batches
    assert [r[2] for r in _train_log(tmp_path / "a")] == [0.0059, 0.0, 0.0352, 0.0, 0.0039]  # every 2 updates
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert {tuple(train.collate(b)["target"].shape) for b in train.batches(256, seed=1, epoch=2)} == {(4, 64)}


def test_packed_lm_batches_compile_to_one_graph(corpus, tmp_path):  # noqa: F811
    """Under torch.compile (dynamo's graph run eagerly, dense masks on the CPU) packed blocks give one
    graph for every batch, without breaks, and the eager losses."""
    from torch._dynamo.utils import counters

    from seqkit.training.compile import loss_function

    t = Trainer(_cfg(corpus, tmp_path, "model.dropout=0", "model.attention_dropout=0"))
    train = t._load("train", training=True)
    samples = [train.collate(b) for b in train.batches(256, seed=1, epoch=1)[:3]]
    t.model.train()
    eager = [float(t.criterion(t.model, s)[0]) for s in samples]
    fn = loss_function(t.criterion, t.model, True, backend="eager")
    counters.clear()
    losses = [float(fn(s)[0]) for s in samples]
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(eager), rtol=1e-5, atol=0)


# -- masked LM -----------------------------------------------------------------------------------

TINY_ENCODER = dict(encoder_layers=2, embed_dim=32, ffn_dim=64, attention_heads=4, max_positions=64, dropout=0.0,
                    attention_dropout=0.0, layer_norm_impl="torch")


def _mlm(data, preset="roberta_mini", mode="eos", **task_changes):
    from seqkit.tasks.masked_lm import MaskedLMConfig, MaskedLMTask

    task = MaskedLMTask(MaskedLMConfig(data=str(data), tokens_per_sample=24, sample_break_mode=mode, **task_changes))
    torch.manual_seed(0)
    model = task.build_model(dataclasses.replace(MODELS.choices()[preset], **TINY_ENCODER))
    return task, model


@pytest.mark.parametrize("mode,mask_unit", [("eos", "token"), ("complete", "word")])
def test_packed_masked_lm_losses_equal_unpacked(corpus, mode, mask_unit):  # noqa: F811
    """fp32, dropout 0: a packed batch of masked blocks (the same masks: drawn per block and epoch)
    gives the unpacked batch's summed loss and gradients; each block attends to itself only."""
    from seqkit.criteria.masked_lm import MaskedLMLossConfig

    task, model = _mlm(corpus / "bin", mode=mode, mask_unit=mask_unit)
    ds = task.load_dataset("train")
    crit = CRITERIA.build(MaskedLMLossConfig(), task)
    packed = pack_training_set(ds, model, max_tokens=256, max_sentences=0, pack_length=64)
    batch = packed.batches(256, seed=1, epoch=3)[0]
    sample = packed.collate(batch)
    unpacked = ds.collate(batch[:, 0])
    assert torch.equal(sample["target"].sort().values, unpacked["target"].sort().values)  # the same masks
    assert sample["ntokens"] == unpacked["ntokens"] and sample["net_input"]["masked_tokens"].shape == (4, 64)
    with document_masks.force("dense"):
        a = _loss_and_grads(model, crit, sample)
    b = _loss_and_grads(model, crit, unpacked)
    assert a[0] == pytest.approx(b[0], rel=1e-5)
    assert a[2].keys() == b[2].keys()
    for name in a[2]:
        scale = float(b[2][name].abs().max())
        torch.testing.assert_close(a[2][name], b[2][name], rtol=1e-5, atol=1e-5 * scale, msg=name)
    if document_masks.flex_attention is not None:  # the CUDA form's outputs (eager on the CPU, forward only)
        model.eval()
        outs = {}
        with torch.no_grad():
            for impl in ("flex", "dense"):
                with document_masks.force(impl):
                    outs[impl] = model(**sample["net_input"])["mlm"]  # (N, V)
        torch.testing.assert_close(outs["flex"], outs["dense"], rtol=1e-4, atol=1e-4)


def test_masked_lm_pack_refusals(corpus):  # noqa: F811
    task, model = _mlm(corpus / "bin", preset="bert_tiny", sentence_pairs="sop")
    with pytest.raises(SeqkitError, match="sentence_pairs=sop labels each row's pair"):
        pack_training_set(task.load_dataset("train"), model, 256, 0, 64)
    task, model = _mlm(corpus / "bin", mask_unit="span")
    with pytest.raises(SeqkitError, match="mask_unit=span"):
        pack_training_set(task.load_dataset("train"), model, 256, 0, 64)
    task, _ = _mlm(corpus / "bin")
    bert = MODELS.build(dataclasses.replace(MODELS.choices()["bert_tiny"], **TINY_ENCODER), task.dictionary)
    with pytest.raises(SeqkitError, match="sentence \\(NSP/SOP\\) and span-boundary heads"):
        pack_training_set(task.load_dataset("train"), bert, 256, 0, 64)
    with pytest.raises(SeqkitError, match="ElectraModel takes no document masks"):
        pack_training_set(task.load_dataset("train"), _mlm(corpus / "bin", preset="electra_small")[1], 256, 0, 64)
    with pytest.raises(SeqkitError, match="MaskedLMDataset blocks are packed for masked_lm models, not TransformerLM"):
        pack_training_set(task.load_dataset("train"), _gpt(), 256, 0, 64)


def test_packed_masked_lm_run_resumes_exactly(corpus, tmp_path):  # noqa: F811
    """A packed masked-LM run through the trainer, stopped and resumed: the same losses and weights."""
    def cfg(save_dir, *extra):
        overrides = ["task=masked_lm", f"task.data={corpus / 'bin'}", "task.tokens_per_sample=24",
                     "task.sample_break_mode=eos", f"checkpoint.save_dir={save_dir}", "model=roberta_mini",
                     "model.encoder_layers=1", "model.embed_dim=32", "model.ffn_dim=64", "model.max_positions=64",
                     "criterion=masked_lm", "optimizer=adam", "optimizer.lr=0.001", "lr_scheduler=fixed",
                     "dataset.max_tokens=256", "dataset.pack=true", "dataset.pack_length=64",
                     "common.log_format=json", "common.threads=1", "common.log_interval=2", *extra]
        return OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(overrides))

    straight = Trainer(cfg(tmp_path / "a", "optimization.max_update=8"))
    straight.run()
    first = Trainer(cfg(tmp_path / "b", "optimization.max_update=4"))  # (at a log line: logs cover 2 updates)
    first.run()
    assert first.epoch == 1 and first.batch_offset == 4
    resumed = Trainer(cfg(tmp_path / "b", "optimization.max_update=8"))
    resumed.run()
    assert _train_log(tmp_path / "a") == _train_log(tmp_path / "b")
    assert [r[2] for r in _train_log(tmp_path / "a")] == [0.0195, 0.0117, 0.0215, 0.1406]  # packed rows, as logged
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
