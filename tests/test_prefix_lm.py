"""Prefix LM (issue 61; T5's prefix-LM objective): each block's first tokens read bidirectionally and
not scored, the rest causal and scored. The mask (perturbations), the SDPA path against the math,
the loss on continuation tokens only (frozen), prompts read as the prefix with the KV cache, the
seeded random split points, seqkit-eval-lm's continuation protocol (the same tokens for a causal
and a prefix LM), and the refusals."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from transfer_fixtures import make_text, pretrain

from label_fixtures import one_line_error
import seqkit
from seqkit.analysis.eval_lm import EvalLMConfig, evaluate
from seqkit.cli.common import ConfigBuilder
from seqkit.core.checkpoints import load_for_inference
from seqkit.core.registry import CRITERIA, MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.models.modules.attention import attend
from seqkit.models.modules.kernels import prefix_lm_mask
from seqkit.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask
from seqkit.training.config import TrainConfig
from seqkit.training.trainer import Trainer

seqkit.import_builtin_components()
DICT = Dictionary([f"w{i}" for i in range(28)])  # 32 symbols: pad=0, <s>=1, </s>=2, unk=3


def tiny_lm(prefix_lm=False, seed=0):
    torch.manual_seed(seed)
    cfg = dataclasses.replace(MODELS.choices()["gpt_tiny"], dropout=0.0, attention_dropout=0.0, layer_norm_impl="torch")
    model = MODELS.build(cfg, DICT).double().eval()
    model.prefix_lm = prefix_lm
    return model


def tokens(B, T, seed=0):
    return torch.randint(4, len(DICT), (B, T), generator=torch.Generator().manual_seed(seed))


def another(x, j):
    """``x`` ``(B, T)`` with another real token at position j."""
    y = x.clone()
    y[:, j] = (y[:, j] - 4 + 1) % (len(DICT) - 4) + 4
    return y


# -- the mask ------------------------------------------------------------------------------------


def test_prefix_positions_read_the_whole_prefix_and_continuations_never_the_future():
    model = tiny_lm()
    x, lengths, n = tokens(2, 10), torch.tensor([10, 10]), torch.tensor([4, 4])  # prefix: positions 0..3
    with torch.no_grad():
        before = model(x, lengths, src_bidirectional=n)
        for j in range(1, 4):  # a later prefix token changes every earlier prefix output
            after = model(another(x, j), lengths, src_bidirectional=n)
            assert (before[:, :j] - after[:, :j]).abs().amax(-1).min() > 1e-3
        for j in range(4, 10):  # a continuation token: no output before it changes, the prefix's included
            after = model(another(x, j), lengths, src_bidirectional=n)
            assert torch.allclose(before[:, :j], after[:, :j], atol=1e-12)
            assert not torch.allclose(before[:, j], after[:, j])
        # the causal model on the same input: position 0 never reads position 3
        causal = model(x, lengths)
        assert torch.allclose(causal[:, 0], model(another(x, 3), lengths)[:, 0], atol=1e-12)
        # a prefix of one position (the block's predecessor alone) is the causal model
        assert torch.allclose(model(x, lengths, src_bidirectional=torch.tensor([1, 1])), causal, atol=1e-12)


def test_prefix_gradient_reaches_back_only_inside_the_prefix():
    model = tiny_lm()
    emb = model.embed(tokens(1, 8)).detach().requires_grad_(True)  # (1, 8, C)
    x = emb + model.positions(8)
    mask = prefix_lm_mask(torch.tensor([3]), 8)  # prefix: positions 0..2
    for layer in model.layers:
        x = layer(x, mask)
    for i in range(8):
        (g,) = torch.autograd.grad(x[0, i].sum(), emb, retain_graph=True)
        read = g[0].abs().sum(-1) > 0  # (8,) the input positions output i depends on
        assert read.tolist() == [k <= i or k < 3 for k in range(8)]


def test_sdpa_with_the_prefix_mask_equals_the_math_reference():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(3, 2, 7, 8, generator=g, dtype=torch.float64) for _ in range(3))  # (B, H, T, D)
    n = torch.tensor([1, 4, 7])  # causal, a prefix of 4, the whole row
    mask = prefix_lm_mask(n, 7)  # (B, 1, T, T)
    allowed = torch.tensor([[[kk <= qq or kk < int(b) for kk in range(7)] for qq in range(7)] for b in n])
    assert torch.equal(mask[:, 0], allowed)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(8)
    ref = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v  # the math, by hand
    assert torch.allclose(attend(q, k, v, mask, 0.0, False), ref, atol=1e-12)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        assert torch.allclose(attend(q, k, v, mask, 0.0, False), ref, atol=1e-12)
    # n = 1 everywhere is the causal mask: the is_causal kernel path agrees
    assert torch.allclose(attend(q, k, v, prefix_lm_mask(torch.ones(3, dtype=torch.long), 7), 0.0, False),
                          attend(q, k, v, None, 0.0, True), atol=1e-12)


def test_a_prompt_is_read_as_the_prefix_then_continued_from_the_cache():
    """prefill + steps of a prefix-LM model = its full forward with the prompt as each row's prefix."""
    model = tiny_lm(prefix_lm=True)
    full = tokens(3, 9, seed=1)
    lengths = torch.tensor([4, 2, 6])  # right-padded prompts
    prompts = full[:, :6].clone()
    for i, n in enumerate(lengths.tolist()):
        prompts[i, n:] = 0
    rows = torch.arange(3)
    with torch.no_grad():
        ref = model(full, torch.tensor([9, 9, 9]), src_bidirectional=lengths)  # (3, 9, V)
        logits, state = model.prefill(prompts, lengths)
        assert torch.allclose(logits, ref[rows, lengths - 1], atol=1e-10)
        for k in range(3):
            pos = lengths + k
            assert torch.allclose(model.step(full[rows, pos][:, None], state, pos), ref[rows, pos], atol=1e-10)
        causal, _ = tiny_lm().prefill(prompts, lengths)  # the same weights read causally differ
        assert not torch.allclose(causal, logits)


# -- data and loss -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return make_text(tmp_path_factory.mktemp("prefix_lm"))


def lm_task(text, **kw):
    return LanguageModelingTask(LanguageModelingConfig(data=str(text / "lm"), **kw))


def test_blocks_score_only_the_continuation(text):
    task = lm_task(text, tokens_per_sample=8, prefix_length=3)
    ds = task.load_dataset("valid")
    stream = torch.from_numpy(ds.stream.astype(np.int64))
    s = ds.collate([0, 1, len(ds) - 1])
    tgt, n = s["target"], s["net_input"]["src_bidirectional"]
    assert torch.equal(tgt[0, :3], torch.zeros(3, dtype=torch.long)) and torch.equal(tgt[0, 3:], stream[3:8])
    assert torch.equal(tgt[1, 3:], stream[11:16])
    assert n[:2].tolist() == [4, 4]  # the predecessor and 3 prefix tokens; position 3 predicts stream[a + 3]
    last = int(ds.ends[-1] - ds.starts[-1])
    assert s["ntokens"] == 5 + 5 + max(last - 3, 0)
    assert sum(int(ds.collate([i])["target"].ne(0).sum()) for i in range(len(ds))) == ds.num_scored
    causal = task.load_dataset("valid", bidirectional=False).collate([0, 1, len(ds) - 1])
    assert "src_bidirectional" not in causal["net_input"] and torch.equal(causal["target"], tgt)
    # a context window: the context joins the prefix that is read both ways
    windowed = lm_task(text, tokens_per_sample=8, prefix_length=3, context_window=5).load_dataset("valid")
    w = windowed.collate([1])
    assert w["net_input"]["src_bidirectional"].tolist() == [9] and w["target"][0, :8].eq(0).all()


def test_random_split_points_are_seeded_per_epoch_and_validation_keeps_the_fixed_one(text):
    task = lm_task(text, tokens_per_sample=8, prefix_length=3, prefix_random=True)
    train, valid = task.load_dataset("train"), task.load_dataset("valid")
    ids = np.arange(len(train))
    draws = []
    for epoch in (1, 1, 2):
        train.batches(64, seed=5, epoch=epoch)
        draws.append(train.prefixes(ids))
    L = train.ends - train.starts
    assert np.array_equal(draws[0], draws[1]) and not np.array_equal(draws[0], draws[2])
    assert (draws[0] >= np.minimum(1, L - 1)).all() and (draws[0] <= np.maximum(L - 1, 0)).all()
    assert len(set(draws[0].tolist())) > 3  # spread over the block, not one value
    sample = train.collate(ids[:4])
    assert sample["net_input"]["src_bidirectional"].tolist() == (draws[2][:4] + 1).tolist()
    assert not valid.prefix_random and valid.prefixes(np.arange(3)).tolist() == [3, 3, 3]


# frozen: summed cross_entropy (nats) of the 10 continuation tokens of blocks 0 and 1 (tokens_per_sample 8,
# prefix 3) under the seed-0 gpt_tiny in float64; scoring the prefix too would add 6 tokens' worth
FROZEN_LOSS = 42.249435656


def test_the_loss_counts_only_continuation_tokens(text):
    task = lm_task(text, tokens_per_sample=8, prefix_length=3)
    ds = task.load_dataset("valid")
    torch.manual_seed(0)
    cfg = dataclasses.replace(MODELS.choices()["gpt_tiny"], dropout=0.0, attention_dropout=0.0, layer_norm_impl="torch")
    model = task.build_model(cfg).double().eval()
    assert model.prefix_lm
    criterion = CRITERIA.build(CRITERIA.make_config({"name": "cross_entropy"}), task)
    sample = ds.collate([0, 1])
    with torch.no_grad():
        loss, sample_size, logs = criterion(model, sample)
        lp = model(**sample["net_input"]).log_softmax(-1)  # (2, 8, V)
    target = sample["target"]
    by_hand = -float(lp[:, 3:].gather(-1, target[:, 3:, None]).sum())  # positions 3.. only
    assert int(sample_size) == 10 and logs["ntokens"] == 10
    assert float(loss) == pytest.approx(by_hand, abs=1e-6)
    assert float(loss) == pytest.approx(FROZEN_LOSS, abs=1e-5)


# -- training, eval-lm, refusals -----------------------------------------------------------------


def train_lm(text, save, *extra):
    overrides = ["task=language_modeling", f"task.data={text / 'lm'}", "task.tokens_per_sample=12", "model=gpt_tiny",
                 "optimizer=adam", "optimizer.lr=0.005", "lr_scheduler=fixed", "dataset.max_tokens=256",
                 "optimization.max_update=2", f"checkpoint.save_dir={save}", "common.log_format=json",
                 "common.threads=1", *extra]
    Trainer(OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(overrides))).run()
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def checkpoints(text, tmp_path_factory):
    return {"causal": train_lm(text, tmp_path_factory.mktemp("causal")),
            "prefix": train_lm(text, tmp_path_factory.mktemp("prefix"), "task.prefix_length=5",
                               "task.prefix_random=true")}


def hand_nll(path, text, bidirectional):
    """-log p of each block's continuation (blocks of 12, prefix 5), the prefix read as ``bidirectional`` says."""
    _, model = load_for_inference(str(path))
    model.eval()
    stream = torch.from_numpy(lm_task(text).load_dataset("valid").stream.astype(np.int64))
    total, count = 0.0, 0
    for a in range(0, len(stream), 12):
        b = min(a + 12, len(stream))
        inputs = torch.cat([torch.tensor([2] if a == 0 else [int(stream[a - 1])]), stream[a : b - 1]])[None]
        extra = {"src_bidirectional": torch.tensor([min(6, b - a)])} if bidirectional else {}
        with torch.no_grad():
            lp = model(inputs, torch.tensor([b - a]), **extra).double().log_softmax(-1)[0]  # (L, V)
        total -= float(lp[5:].gather(1, stream[a + 5 : b, None]).sum())
        count += max(b - a - 5, 0)
    return total, count


def test_eval_lm_scores_the_same_continuation_tokens_for_a_causal_and_a_prefix_lm(text, checkpoints, run_cli):
    results = {}
    for name, path in checkpoints.items():
        cfg = EvalLMConfig(task=OmegaConf.create({"data": str(text / "lm")}), path=str(path), gen_subset="valid",
                           tokens_per_sample=12, prefix_length=5)
        results[name] = r = evaluate(cfg)
        nll, count = hand_nll(path, text, name == "prefix")
        assert r["tokens"] == count and r["prefix_length"] == 5 and "word_ppl" not in r
        assert r["ppl"] == pytest.approx(math.exp(nll / count), abs=0.0051)
        assert r["loss"] == pytest.approx(nll / count / math.log(2), abs=1e-4)  # reading it the other way: 1e-3 off
    assert results["causal"]["prefix_read"] == "causally" and results["prefix"]["prefix_read"] == "bidirectionally"
    # without prefix_length the prefix LM keeps its own split; the causal LM scores every token
    cfg = EvalLMConfig(task=OmegaConf.create({"data": str(text / "lm")}), path=str(checkpoints["prefix"]),
                       gen_subset="valid", tokens_per_sample=12)
    assert evaluate(cfg)["tokens"] == results["prefix"]["tokens"]
    cfg.path = str(checkpoints["causal"])
    assert "prefix_read" not in evaluate(cfg)
    from seqkit.cli.eval_lm import main as eval_lm

    r = run_cli(eval_lm, [f"path={checkpoints['prefix']}", f"task.data={text / 'lm'}", "gen_subset=valid",
                          "tokens_per_sample=12", "common.threads=1"])
    assert r.code == 0 and "the continuation after a prefix of 5 read bidirectionally (blocks of 12" in r.err


def test_refusals_are_one_line(text, checkpoints, run_cli, tmp_path):
    from seqkit.cli.eval_lm import main as eval_lm
    from seqkit.cli.train import main as train

    base = ["task=language_modeling", f"task.data={text / 'lm'}", "task.tokens_per_sample=12", "common.threads=1",
            "optimization.max_update=1", f"checkpoint.save_dir={tmp_path / 'ck'}"]
    cases = [
        (["model=lstm_lm_tiny", "task.prefix_length=4"], "model lstm_lm cannot read a prefix bidirectionally"),
        (["model=gpt_tiny", "task.prefix_random=true"], "task.prefix_random=true draws a prefix LM's split points"),
        (["model=gpt_tiny", "task.prefix_length=12"], "prefix_length=12 leaves no token of a block"),
        (["model=gpt_tiny", "task.prefix_length=4", "task.sample_break_mode=eos", "dataset.pack=true"],
         "dataset.pack=true: a prefix LM's rows hold one block each"),
    ]
    for extra, fragment in cases:
        one_line_error(run_cli(train, [*base, *extra]), "seqkit-train", fragment, log_lines_allowed=True)
        assert not (tmp_path / "ck").exists()  # nothing written
    ev = [f"path={checkpoints['prefix']}", f"task.data={text / 'lm'}", "gen_subset=valid", "common.threads=1"]
    one_line_error(run_cli(eval_lm, [*ev, "task.prefix_random=true"]), "seqkit-eval-lm",
                   "task.prefix_random: seqkit-eval-lm splits every block at one prefix_length")
    one_line_error(run_cli(eval_lm, [*ev, "prefix_length=3", "task.prefix_length=4"]), "seqkit-eval-lm",
                   "prefix_length=3 and task.prefix_length=4 disagree")
    # tasks that would ignore it: a masked LM's training has no such setting, its scoring no continuation
    one_line_error(run_cli(train, [*base[1:], "task=masked_lm", "model=roberta_mini", "task.prefix_length=4"]),
                   "seqkit-train", "prefix_length")
    pretrain(text, "roberta", tmp_path / "mlm", updates=1)
    mlm = [f"path={tmp_path / 'mlm' / 'checkpoint_last.pt'}", f"task.data={text / 'lm'}", "gen_subset=valid"]
    one_line_error(run_cli(eval_lm, [*mlm, "prefix_length=3"]), "seqkit-eval-lm",
                   "prefix_length=3: a masked_lm checkpoint is scored at its masked or noised positions")


def test_what_would_read_a_prefix_lm_causally_refuses_it(text, checkpoints, run_cli, tmp_path):
    """Fine-tuning its body, in-context classification, HuggingFace export and distillation would
    read a prefix LM's prompt causally (or hand a causal model its bidirectional prefix): one line."""
    from transfer_fixtures import binarize

    from seqkit.cli.export import main as export
    from seqkit.cli.generate import main as generate
    from seqkit.cli.train import main as train

    prefix = checkpoints["prefix"]
    cls = binarize(text, tmp_path / "cls", prefix)
    one_line_error(run_cli(train, ["task=classification", f"task.data={cls}", "model=pretrained_classifier",
                                   f"model.path={prefix}", "optimization.max_update=1", "common.threads=1",
                                   f"checkpoint.save_dir={tmp_path / 'ft'}"]),
                   "seqkit-train", "is a prefix LM", "fine-tune a causal language model", log_lines_allowed=True)
    one_line_error(run_cli(generate, [f"path={prefix}", f"task.data={cls}", "gen_subset=valid", "icl.shots=0",
                                      "icl.verbalizers=[v1,v2]", "common.threads=1"]),
                   "seqkit-generate", "is a prefix LM", "use a causal LM", log_lines_allowed=True)
    pytest.importorskip("transformers")
    one_line_error(run_cli(export, ["format=huggingface", f"path={prefix}", f"output={tmp_path / 'hf'}"]),
                   "seqkit-export", "is a prefix LM", "no HuggingFace counterpart", log_lines_allowed=True)
    for student, teacher in ((["task.prefix_length=5"], checkpoints["causal"]), ([], prefix)):
        one_line_error(run_cli(train, ["task=language_modeling", f"task.data={text / 'lm'}", "model=gpt_tiny",
                                       "task.tokens_per_sample=12", *student, "criterion=distillation",
                                       f"criterion.teacher={teacher}", "optimization.max_update=1",
                                       "common.threads=1", f"checkpoint.save_dir={tmp_path / 'kd'}"]),
                       "seqkit-train", "criterion=distillation with a prefix LM", log_lines_allowed=True)
    assert not any((tmp_path / d).exists() for d in ("ft", "hf", "kd"))
