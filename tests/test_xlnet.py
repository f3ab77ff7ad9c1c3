"""XLNet's permutation LM (seqkit.models.xlnet, seqkit.tasks.permutation_lm, seqkit.data.permutation):
the two streams' masks on a frozen order, the query stream's blindness to its own token, partial
prediction, seeded orders, and from the shell: pretraining whose loss falls, seqkit-eval-lm on its
checkpoint, fine-tuning in every adaptation mode, and the settings it reads or refuses."""

import dataclasses
import json

import numpy as np
import pytest
import torch
from test_settings_walk import walk
from transfer_fixtures import binarize, make_text

import seqkit.models.xlnet as xlnet
from label_fixtures import one_line_error
from seqkit.cli.eval_lm import main as eval_lm
from seqkit.cli.train import main as train
from seqkit.data.dictionary import Dictionary
from seqkit.data.permutation import PermutationLMDataset, factorization_rank, predicted_positions
from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.tasks.permutation_lm import PermutationLMConfig
from seqkit.training.config import TrainConfig

DICT = Dictionary()
for _i in range(20):
    DICT.add(f"w{_i}", 1)


def tiny_model(**kw):
    cfg = dataclasses.replace(xlnet.xlnet_tiny(), dropout=0.0, attention_dropout=0.0, **kw)
    torch.manual_seed(0)
    return xlnet.XLNet(cfg, DICT).eval()


# -- the masks -----------------------------------------------------------------------------------------
def test_masks_of_a_fixed_order():
    # order: position 0, 2, 3, 1 (ranks 0, 3, 1, 2); position 4 is padding
    rank = torch.tensor([[0, 3, 1, 2, 5]])
    real = torch.tensor([[True, True, True, True, False]])
    content, query = xlnet.two_stream_masks(rank, real)  # (1, 5, 5) each, [b, i, j]: i reads j
    assert content.shape == query.shape == (1, 5, 5)
    assert content[0].int().tolist() == [[1, 0, 0, 0, 0],   # 0 reads itself
                                         [1, 1, 1, 1, 0],   # 1 (last in the order) reads everyone
                                         [1, 0, 1, 0, 0],   # 2 reads 0 and itself
                                         [1, 0, 1, 1, 0],   # 3 reads 0, 2 and itself
                                         [1, 1, 1, 1, 0]]   # padding (rank 5) reads every real position
    assert query[0].int().tolist() == [[0, 0, 0, 0, 0],
                                       [1, 0, 1, 1, 0],
                                       [1, 0, 0, 0, 0],
                                       [1, 0, 1, 0, 0],
                                       [1, 1, 1, 1, 0]]
    # the definition, at every pair of a random order
    r = torch.from_numpy(factorization_rank(9, np.random.default_rng(3)))[None]
    c, q = xlnet.two_stream_masks(r, torch.ones(1, 9, dtype=torch.bool))
    for i in range(9):
        for j in range(9):
            assert bool(c[0, i, j]) == (r[0, j] <= r[0, i]) and bool(q[0, i, j]) == (r[0, j] < r[0, i])


def _batch(n=9, k=3, seed=0):
    tokens = torch.tensor([[DICT.bos()] + [4 + (7 * i) % 20 for i in range(1, n)]])
    rank = torch.from_numpy(factorization_rank(n, np.random.default_rng(seed)))[None]
    predicted = torch.from_numpy(predicted_positions(rank[0].numpy(), k))[None]
    return tokens, torch.tensor([n]), rank, predicted


def _by_position(model, tokens, lengths, rank, predicted):
    logits = model(tokens, lengths, rank, predicted)  # (N, V), predicted positions in increasing order
    return dict(zip(predicted[0].nonzero()[:, 0].tolist(), logits))


@pytest.mark.parametrize("leaky", [False, True])
def test_query_stream_never_sees_its_own_token(monkeypatch, leaky):
    """Changing token i leaves the prediction at i and at every position before i in the order as it
    was; a query stream that read its own token (the leaky mask) fails the same check."""
    if leaky:  # the query stream given the content stream's mask: reads itself
        real_masks = xlnet.two_stream_masks
        monkeypatch.setattr(xlnet, "two_stream_masks", lambda r, m: (real_masks(r, m)[0],) * 2)
    model = tiny_model()
    tokens, lengths, rank, predicted = _batch(k=2)  # 4 predicted positions
    targets = predicted[0].nonzero()[:, 0].tolist()
    i = sorted(targets, key=lambda p: int(rank[0, p]))[-2]  # one predicted position after it in the order
    changed = tokens.clone()
    changed[0, i] = 4 + (int(tokens[0, i]) - 4 + 5) % 20
    with torch.no_grad():
        before, after = _by_position(model, tokens, lengths, rank, predicted), \
            _by_position(model, changed, lengths, rank, predicted)
    earlier_or_self = [p for p in targets if rank[0, p] <= rank[0, i]]
    same = all(torch.allclose(before[p], after[p], atol=1e-6) for p in earlier_or_self)
    assert same != leaky
    later = [p for p in targets if rank[0, p] > rank[0, i]]
    assert later and not all(torch.allclose(before[p], after[p], atol=1e-6) for p in later)  # the change reaches them


def test_fine_tuning_reads_every_position_both_ways():
    model = tiny_model()
    tokens = torch.tensor([[DICT.bos(), 5, 6, 7, DICT.eos()]])
    changed = tokens.clone()
    changed[0, 3] = 9
    with torch.no_grad():
        a, b = model.transfer_features(tokens, torch.tensor([5])), model.transfer_features(changed, torch.tensor([5]))
    assert not torch.allclose(a[0, 0], b[0, 0]) and not torch.allclose(a[0, 4], b[0, 4])  # before and after it
    assert model.transfer_pooling == "last"


# -- partial prediction and seeded orders ---------------------------------------------------------------
def test_partial_prediction_takes_the_last_1_in_k_of_the_order():
    rank = np.array([0, 3, 1, 6, 2, 5, 4])  # the order: positions 0, 2, 4, 1, 6, 5, 3
    assert predicted_positions(rank, 3).nonzero()[0].tolist() == [3, 5]  # (7 - 1) // 3 = 2: ranks 5 and 6
    assert predicted_positions(rank, 6).nonzero()[0].tolist() == [3]
    assert predicted_positions(rank, 1).sum() == 6  # every position after <s>


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return make_text(tmp_path_factory.mktemp("xlnet"))


def dataset(text, seed=1, fixed=False, k=6):
    return PermutationLMDataset(IndexedDataset(str(text / "lm" / "train.text")), DICT.bos(), DICT.pad(), 24,
                                "complete", k, seed, fixed_orders=fixed)


def test_batches_predict_only_the_last_of_each_order(text):
    ds = dataset(text, k=4)
    sample = ds.collate(range(8))
    ni = sample["net_input"]
    for b in range(8):
        n = int(ni["src_lengths"][b])
        rank, predicted = ni["perm_rank"][b, :n], ni["target_positions"][b]
        assert sorted(rank.tolist()) == list(range(n)) and rank[0] == 0  # a permutation, <s> first
        assert predicted[:n].tolist() == (rank >= n - max(1, (n - 1) // 4)).tolist()
        assert not predicted[n:].any() and (ni["perm_rank"][b, n:] == ni["src_tokens"].size(1)).all()
    assert torch.equal(sample["target"], ni["src_tokens"][ni["target_positions"]])
    assert sample["sample_size"] == int(ni["target_positions"].sum())


def test_orders_are_seeded(text):
    ranks = lambda ds, epoch: (ds.batches(512, epoch=epoch), ds.collate(range(6))["net_input"]["perm_rank"])[1]  # noqa: E731
    a, b = dataset(text), dataset(text)
    assert torch.equal(ranks(a, 1), ranks(b, 1))  # the same seed and epoch: the same orders
    assert not torch.equal(ranks(a, 1), ranks(a, 2))  # a new epoch: new orders
    assert not torch.equal(ranks(a, 1), ranks(dataset(text, seed=2), 1))
    v = dataset(text, fixed=True)
    assert torch.equal(ranks(v, 1), ranks(v, 5))  # validation: fixed


# -- from the shell -------------------------------------------------------------------------------------
PRETRAIN = ["task=permutation_lm", "model=xlnet_tiny", "criterion=cross_entropy", "task.tokens_per_sample=24",
            "task.partial_prediction=2", "optimizer=adam", "optimizer.lr=0.005", "lr_scheduler=fixed",
            "dataset.max_tokens=512", "common.threads=1", "common.log_format=json", "common.log_interval=1",
            "model.dropout=0"]


@pytest.fixture(scope="module")
def pretrained(text, tmp_path_factory):
    """A 40-update pretraining run from the CLI: its folder and the classification data in its vocabulary."""
    save = tmp_path_factory.mktemp("xlnet_pre")
    try:
        train([*PRETRAIN, f"task.data={text / 'lm'}", f"checkpoint.save_dir={save}", "optimization.max_update=40"])
    except SystemExit as e:
        assert not e.code, e
    ck = save / "checkpoint_last.pt"
    return save, ck, binarize(text, save / "cls", ck)


def test_pretraining_loss_falls(pretrained):
    save, _, _ = pretrained
    records = [json.loads(line) for line in (save / "train_log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if r["tag"] == "train"]
    assert len(losses) >= 30
    assert np.mean(losses[-5:]) < np.mean(losses[:3]) - 0.5, losses  # bits per predicted token (4.47 -> 3.52)
    assert [r for r in records if r["tag"] == "valid"][-1]["accuracy"] > 0


def test_eval_lm_scores_the_predicted_positions(pretrained, text, run_cli):
    _, ck, _ = pretrained
    r = run_cli(eval_lm, [f"path={ck}", f"task.data={text / 'lm'}", "gen_subset=valid", "common.threads=1"])
    assert r.code == 0, r.err
    out = json.loads(r.out.strip().splitlines()[-1])
    assert out["scored_tokens"] > 0 and out["loss"] < out["unigram_train_loss"]


FINETUNE_MODES = [("full", []), ("frozen", []), ("bitfit", []), ("lora", []), ("prompt", []), ("ulmfit", []),
                  ("adapter", ["model.adapter.placement=pfeiffer"])]


@pytest.mark.parametrize("mode, extra", FINETUNE_MODES, ids=[m for m, _ in FINETUNE_MODES])
def test_fine_tuning_in_each_mode(pretrained, run_cli, tmp_path, mode, extra):
    _, ck, data = pretrained
    r = run_cli(train, ["task=classification", f"task.data={data}", "model=pretrained_classifier", f"model.path={ck}",
                        f"model.adapt={mode}", *extra, "criterion=cross_entropy", "optimizer.lr=1e-3",
                        "lr_scheduler=fixed", "dataset.max_tokens=512", "optimization.max_update=3",
                        "common.threads=1", f"checkpoint.save_dir={tmp_path / 'ft'}"])
    assert r.code == 0, r.err
    assert "body xlnet from" in r.err and "query_head" in r.err  # the query stream's start and output layer dropped
    assert (tmp_path / "ft" / "checkpoint_last.pt").is_file()


@pytest.mark.parametrize("args, fragment", [
    (["model.adapt=adapter"], "model.adapter.placement=houlsby"),  # houlsby is the default placement
])
def test_a_mode_the_body_cannot_take_is_one_line(pretrained, run_cli, tmp_path, args, fragment):
    _, ck, data = pretrained
    r = run_cli(train, ["task=classification", f"task.data={data}", "model=pretrained_classifier", f"model.path={ck}",
                        *args, "criterion=cross_entropy", "common.threads=1", f"checkpoint.save_dir={tmp_path / 'ft'}"])
    one_line_error(r, "seqkit-train", fragment, log_lines_allowed=True)
    assert not (tmp_path / "ft").exists()


@pytest.mark.parametrize("args, fragment", [
    (["criterion=masked_lm"], "trains with criterion=cross_entropy"),
    (["criterion=label_smoothed_cross_entropy", "model=gpt_tiny"], "task permutation_lm trains permutation_lm models: xlnet"),
    (["task.tokens_per_sample=65"], "task.tokens_per_sample=65 exceeds"),
])
def test_bad_pretraining_settings_are_one_line(text, run_cli, tmp_path, args, fragment):
    r = run_cli(train, [*PRETRAIN, f"task.data={text / 'lm'}", f"checkpoint.save_dir={tmp_path / 'ck'}", *args])
    one_line_error(r, "seqkit-train", fragment, log_lines_allowed=True)
    assert not (tmp_path / "ck").exists()


def test_every_task_and_model_setting_is_read(text, run_cli, monkeypatch, tmp_path):
    """The walk of tests/test_settings_walk.py over the fields of task=permutation_lm and model=xlnet:
    each is read by the base run (or, set alone, refused in one line naming it)."""
    base = [*PRETRAIN, f"task.data={text / 'lm'}", f"checkpoint.save_dir={tmp_path / 'ck'}",
            "optimization.max_update=1"]
    ours = {f"task.{f.name}" for f in dataclasses.fields(PermutationLMConfig)}
    ours |= {f"model.{f.name}" for f in dataclasses.fields(xlnet.XLNetConfig)}
    assert walk(run_cli, monkeypatch, train, "seqkit-train", "train", TrainConfig, base, tmp_path,
                keys=lambda key: key in ours) == []
