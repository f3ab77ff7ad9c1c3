"""Transformer-XL (issue 62; Dai et al., 2019): the rel-shift against direct relative scores
(frozen), the memory property (segment 2 after segment 1's memory = the tail of one forward over
both), no gradient into memory, the streaming batch order (frozen), a few updates lowering the
loss, seqkit-eval-lm's one-stream scoring with mem_len, exact resume with the memory, refusals."""

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from transfer_fixtures import make_text

from label_fixtures import one_line_error
import seqkit
from seqkit.analysis.eval_lm import EvalLMConfig, evaluate
from seqkit.cli.common import ConfigBuilder
from seqkit.core.checkpoints import load, load_for_inference
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.data.lm_dataset import stream_batches
from seqkit.models.modules.relative_attention import causal_memory_mask, rel_shift
from seqkit.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask
from seqkit.training.config import TrainConfig
from seqkit.training.trainer import Trainer

seqkit.import_builtin_components()
DICT = Dictionary([f"w{i}" for i in range(28)])  # 32 symbols


def tiny_xl(mem_len=32, seed=0):
    torch.manual_seed(seed)
    cfg = dataclasses.replace(MODELS.choices()["transformer_xl_tiny"], dropout=0.0, mem_len=mem_len)
    return MODELS.build(cfg, DICT).double().eval()


def tokens(B, T, seed=0):
    return torch.randint(4, len(DICT), (B, T), generator=torch.Generator().manual_seed(seed))


# -- relative scores ---------------------------------------------------------------------------------


def test_rel_shift_puts_each_distance_under_its_key():
    # frozen: T=2 queries after M=1 memory position, K=3; column c of the input is distance K-1-c
    x = torch.arange(6.0).view(1, 1, 2, 3)
    assert rel_shift(x)[0, 0].tolist() == [[1.0, 2.0, 0.0], [3.0, 4.0, 5.0]]  # (0,2): above the diagonal, masked
    # against the direct gather: query i (position M+i) and key j at distance M+i-j, for every allowed pair
    B, H, T, M = 2, 3, 4, 5
    K = M + T
    bd = torch.randn(B, H, T, K, generator=torch.Generator().manual_seed(1))
    shifted = rel_shift(bd)
    allowed = causal_memory_mask(T, M, bd.device)
    for i in range(T):
        for j in range(K):
            if allowed[i, j]:
                assert torch.equal(shifted[:, :, i, j], bd[:, :, i, K - 1 - (M + i - j)])
    assert not allowed[0, M + 1] and allowed[0, M] and allowed[T - 1, K - 1]


# -- memory --------------------------------------------------------------------------------------------


def test_segment_two_with_memory_equals_the_tail_of_one_forward_over_both():
    model, T = tiny_xl(mem_len=8), 8
    x = tokens(2, 2 * T)
    lengths = torch.full((2,), T)
    with torch.no_grad():
        whole = model(x, lengths * 2)  # no blocks: no memory read or kept
        model(x[:, :T], lengths, src_blocks=torch.tensor([4, 9]))
        second = model(x[:, T:], lengths, src_blocks=torch.tensor([5, 10]))
        assert torch.allclose(second, whole[:, T:], atol=1e-10)
        alone = model(x[:, T:], lengths)
        assert not torch.allclose(second, alone, atol=1e-3)  # the memory was read
        # a batch that does not continue the memory's blocks reads none
        assert torch.allclose(model(x[:, T:], lengths, src_blocks=torch.tensor([7, 1])), alone, atol=1e-12)
    # a shorter memory reads only its last positions: not the whole first segment any more
    short = tiny_xl(mem_len=3)
    with torch.no_grad():
        short(x[:, :T], lengths, src_blocks=torch.tensor([0, 1]))
        assert not torch.allclose(short(x[:, T:], lengths, src_blocks=torch.tensor([1, 2])), whole[:, T:], atol=1e-3)


def test_no_gradient_flows_into_memory():
    model = tiny_xl().train()
    x, lengths = tokens(2, 12), torch.full((2,), 6)
    model(x[:, :6], lengths, src_blocks=torch.tensor([0, 3])).sum().backward()
    layers, _ = model._memory[True]
    assert all(not h.requires_grad and h.grad_fn is None for h in layers)
    # the first segment's graph is freed: a second backward into it would raise
    model(x[:, 6:], lengths, src_blocks=torch.tensor([1, 4])).sum().backward()
    assert model._memory[True][0][0].shape == (2, 12, 64)  # 6 + 6 positions kept (mem_len 32)


# -- the streaming order ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return make_text(tmp_path_factory.mktemp("xl"))


def test_stream_batches_continue_each_row(text):
    assert [b.tolist() for b in stream_batches(10, 4)] == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert [b.tolist() for b in stream_batches(3, 1)] == [[0], [1], [2]]
    task = LanguageModelingTask(LanguageModelingConfig(data=str(text / "lm"), tokens_per_sample=12, stream_batches=4))
    ds = task.load_dataset("train")
    batches = ds.batches(256, seed=7, epoch=3)  # budget and seed unread: the same order every epoch
    assert [b.tolist() for b in batches] == [b.tolist() for b in stream_batches(len(ds), 4)]
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(ds)))  # every block once
    sample = ds.collate(batches[1])
    assert sample["net_input"]["src_blocks"].tolist() == batches[1].tolist()
    first, second = (ds.collate(b)["net_input"]["src_tokens"] for b in batches[:2])
    stream = ds.stream.astype(np.int64)
    assert second[0, 0].item() == stream[11] and first[0, -1].item() == stream[10]  # row 0 reads on


# -- training, evaluation, resume ---------------------------------------------------------------------


def train_xl(text, save, *extra):
    overrides = ["task=language_modeling", f"task.data={text / 'lm'}", "task.tokens_per_sample=12",
                 "task.stream_batches=8", "model=transformer_xl_tiny", "model.mem_len=12", "optimizer=adam",
                 "optimizer.lr=0.005", "lr_scheduler=fixed", "optimization.max_update=6", f"checkpoint.save_dir={save}",
                 "common.log_format=json", "common.log_interval=1", "common.threads=1", *extra]
    Trainer(OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(overrides))).run()
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def xl_ckpt(text, tmp_path_factory):
    return train_xl(text, tmp_path_factory.mktemp("xl_run"), "optimization.max_update=14")


def test_a_few_updates_lower_the_loss(xl_ckpt):
    records = [json.loads(line) for line in (xl_ckpt.parent / "train_log.jsonl").read_text().splitlines()]
    losses = [float(r["loss"]) for r in records if "loss" in r and r.get("update", 0) and "best_loss" not in r]
    assert len(losses) >= 10 and np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.5
    assert load(str(xl_ckpt))["carry"]["layer0"].shape[1:] == (12, 64)  # the memory travels with the checkpoint


def test_eval_lm_scores_the_stream_once_with_memory(text, xl_ckpt):
    def run(mem_len):
        cfg = EvalLMConfig(task=OmegaConf.create({"data": str(text / "lm")}), path=str(xl_ckpt), gen_subset="valid",
                           tokens_per_sample=6, mem_len=mem_len)
        return evaluate(cfg)

    with_memory, without = run(24), run(0)
    stream = LanguageModelingTask(LanguageModelingConfig(data=str(text / "lm"))).load_dataset("valid").stream
    assert with_memory["tokens"] == without["tokens"] == len(stream)  # every token once
    assert with_memory["mem_len"] == 24 and without["mem_len"] == 0 and with_memory["ppl"] != without["ppl"]
    # by hand: one row, segments of 6, each reading the 24 positions before it
    _, model = load_for_inference(str(xl_ckpt))
    model.eval()
    model.mem_len = 24
    ids = torch.from_numpy(stream.astype(np.int64))
    inputs = torch.cat([torch.tensor([2]), ids[:-1]])
    nll = 0.0
    with torch.no_grad():
        for k, a in enumerate(range(0, len(ids), 6)):
            seg, tgt = inputs[a : a + 6][None], ids[a : a + 6][None]
            nll -= float(model(seg, torch.tensor([seg.size(1)]), target=tgt, src_blocks=torch.tensor([k])).sum())
    assert with_memory["ppl"] == pytest.approx(math.exp(nll / len(ids)), abs=0.0051)
    assert with_memory["loss"] == pytest.approx(nll / len(ids) / math.log(2), abs=1e-4)
    assert run(-1)["mem_len"] == 12  # the checkpoint's


def test_resume_reads_the_memory_it_stopped_with(text, tmp_path):
    straight = train_xl(text, tmp_path / "straight")
    train_xl(text, tmp_path / "resumed", "optimization.max_update=3")
    resumed = train_xl(text, tmp_path / "resumed")
    a, b = load(str(straight)), load(str(resumed))
    assert a["train_state"]["num_updates"] == b["train_state"]["num_updates"] == 6
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    for k in a["carry"]:
        assert torch.equal(a["carry"][k], b["carry"][k]), k


# -- refusals -----------------------------------------------------------------------------------------


def test_refusals_are_one_line(text, xl_ckpt, run_cli, tmp_path):
    from seqkit.cli.eval_lm import main as eval_lm
    from seqkit.cli.generate import main as generate
    from seqkit.cli.train import main as train

    base = ["task=language_modeling", f"task.data={text / 'lm'}", "task.tokens_per_sample=12", "common.threads=1",
            "optimization.max_update=1", f"checkpoint.save_dir={tmp_path / 'ck'}"]
    xl = ["model=transformer_xl_tiny", "task.stream_batches=4"]
    cases = [
        (["model=transformer_xl_tiny"], "model.mem_len=32 reads the previous segment of each row"),
        (["model=gpt_tiny", "task.stream_batches=4"], "task.stream_batches=4 orders batches for a model that carries"),
        ([*xl, "task.prefix_length=4"], "model transformer_xl cannot read a prefix bidirectionally"),
        ([*xl, "dataset.max_tokens=256"], "dataset.max_tokens: seqkit-train"),
        ([*xl, "task.sample_break_mode=eos"], "task.stream_batches reads the stream as consecutive blocks"),
        (["model=transformer_xl_tiny", "model.mem_len=0", "task.sample_break_mode=eos", "dataset.pack=true"],
         "dataset.pack=true: transformer_xl's relative attention takes no document masks"),
    ]
    for extra, fragment in cases:
        one_line_error(run_cli(train, [*base, *extra]), "seqkit-train", fragment, log_lines_allowed=True)
        assert not (tmp_path / "ck").exists()  # nothing written
    ev = [f"path={xl_ckpt}", f"task.data={text / 'lm'}", "gen_subset=valid", "common.threads=1"]
    one_line_error(run_cli(eval_lm, [*ev, "context_window=4"]), "seqkit-eval-lm", "context_window", "set mem_len=")
    one_line_error(run_cli(eval_lm, [*ev, "task.context_window=4"]), "seqkit-eval-lm", "context_window", "mem_len=")
    one_line_error(run_cli(eval_lm, [*ev, "max_tokens=64"]), "seqkit-eval-lm", "max_tokens", "one stream")
    one_line_error(run_cli(eval_lm, [*ev, "prefix_length=3"]), "seqkit-eval-lm", "no prefix LM")
    r = run_cli(generate, [f"path={xl_ckpt}", "input=-", "common.threads=1"], stdin="w1 w2\n")
    one_line_error(r, "seqkit-generate", "does not continue a transformer_xl model", log_lines_allowed=True)
