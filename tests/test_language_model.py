"""Causal language modeling: token blocks, the GPT and LSTM language models at tiny dimensions
(frozen outputs, causality, incremental decoding = full forward), the adaptive softmax, training
through the one trainer, eval-lm against a perplexity computed by hand, and prompt continuation."""

import dataclasses
import json
import math
import random

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import seqkit
from seqkit.analysis.eval_lm import EvalLMConfig, evaluate
from seqkit.cli.common import ConfigBuilder
from seqkit.core.checkpoints import load_for_inference
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.data.lm_dataset import block_bounds
from seqkit.generation.translator import Translator
from seqkit.models.pretrained import _drop_heads
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers.space import SpaceConfig
from seqkit.training.config import TrainConfig
from seqkit.training.trainer import Trainer

seqkit.import_builtin_components()

DICT = Dictionary([f"w{i}" for i in range(28)])  # 32 symbols: pad=0, <s>=1, </s>=2, unk=3
ADAPTIVE_INPUT = {"adaptive_softmax_cutoff": [8, 20], "share_input_output_embed": False, "adaptive_input": True}
LMS = {"transformer_lm": ("gpt_tiny", {}), "lstm_lm": ("lstm_lm_tiny", {}),
       "transformer_lm_adaptive_input": ("gpt_tiny", ADAPTIVE_INPUT)}


def build(name, seed=0, **kw):
    torch.manual_seed(seed)
    preset, variant = LMS[name]
    cfg = MODELS.choices()[preset]
    off = {"dropout": 0.0}
    if "attention_dropout" in {f.name for f in dataclasses.fields(cfg)}:
        off.update(attention_dropout=0.0, layer_norm_impl="torch")
    return MODELS.build(dataclasses.replace(cfg, **{**off, **variant, **kw}), DICT).double().eval()


def tokens(B, T, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, len(DICT), (B, T), generator=g)


# -- blocks ------------------------------------------------------------------------------------


def test_block_bounds_for_each_break_mode():
    sizes = np.array([3, 1, 5, 2])  # lines in the stream: [0,3) [3,4) [4,9) [9,11)
    assert [b.tolist() for b in block_bounds(sizes, 4, "none")] == [[0, 4, 8], [4, 8, 11]]
    assert [b.tolist() for b in block_bounds(sizes, 4, "eos")] == [[0, 3, 4, 8, 9], [3, 4, 8, 9, 11]]
    # complete: whole lines while they fit; the 5-token line is cut alone
    assert [b.tolist() for b in block_bounds(sizes, 4, "complete")] == [[0, 4, 8, 9], [4, 8, 9, 11]]
    with pytest.raises(SeqkitError, match="sample_break_mode"):
        block_bounds(sizes, 4, "sentence")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A small corpus with structure to learn (each line counts up from a random word), binarized."""
    root = tmp_path_factory.mktemp("lm")
    rng = random.Random(0)
    words = [f"v{i}" for i in range(12)]

    def line():
        start = rng.randrange(len(words))
        return " ".join(words[(start + k) % len(words)] for k in range(rng.randint(3, 9)))

    for split, n in (("train", 300), ("valid", 30)):
        lines = [line() if i % 7 else "" for i in range(n)]  # an empty line now and then: a lone eos
        (root / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = PreprocessConfig(task="language_modeling", trainpref=str(root / "train.txt"),
                           validpref=str(root / "valid.txt"), destdir=str(root / "bin"), tokenizer=SpaceConfig())
    preprocess(cfg)
    return root


def lm_task(data, **kw):
    from seqkit.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask

    return LanguageModelingTask(LanguageModelingConfig(data=str(data), **kw))


def test_preprocess_keeps_every_line_and_counts_words(corpus):
    meta = json.loads((corpus / "bin" / "preprocess.json").read_text())
    assert meta["task"] == "language_modeling"
    lines = (corpus / "valid.txt").read_text().splitlines()
    assert meta["words"]["valid"] == sum(len(s.split()) + 1 for s in lines)
    ds = lm_task(corpus / "bin", tokens_per_sample=16).load_dataset("valid")
    assert ds.num_scored == meta["words"]["valid"]  # word-level: one token per word and per line end
    assert int((ds.stream == 2).sum()) == len(lines)  # empty lines kept as a lone eos


def test_blocks_shift_by_one_and_context_is_read_not_scored(corpus):
    task = lm_task(corpus / "bin", tokens_per_sample=8, context_window=5)
    ds = task.load_dataset("valid")
    stream = torch.from_numpy(ds.stream.astype(np.int64))
    sample = ds.collate([0, 1, 2])
    src, tgt = sample["net_input"]["src_tokens"], sample["target"]
    assert src[0, 0] == 2 and torch.equal(tgt[0, :8], stream[:8])  # first block: eos, then the stream
    assert torch.equal(src[0, 1:8], stream[:7]) and not tgt[0, 8:].any()  # (right-padded to block 1's 13)
    # block 1 scores stream[8:16] after 5 tokens of context: input stream[2:15], target pad x5 + stream[8:16]
    assert torch.equal(src[1], stream[2:15]) and torch.equal(tgt[1, :5], torch.zeros(5, dtype=torch.long))
    assert torch.equal(tgt[1, 5:], stream[8:16])
    scored = sum(int(ds.collate([i])["target"].ne(0).sum()) for i in range(len(ds)))
    assert scored == ds.num_scored == len(stream)  # every token once
    assert task.load_dataset("train").input_starts.tolist() == task.load_dataset("train").starts.tolist()


# -- models ------------------------------------------------------------------------------------


FROZEN = {  # logits[0, -1, 4:8] of tokens(2, 6) through the seed-0 tiny model (float64)
    "transformer_lm": [0.19486512, 1.95469177, 0.06380457, 0.43623396],
    "lstm_lm": [0.01701198, -0.01102608, 0.00222893, -0.01835218],
    "transformer_lm_adaptive_input": [-4.95538101, -1.91393719, -1.18874346, -2.09663902],  # log-probs
}


@pytest.mark.parametrize("name", sorted(LMS))
def test_frozen_outputs(name):
    logits = build(name)(tokens(2, 6), torch.tensor([6, 6]))
    assert logits.shape == (2, 6, len(DICT))
    assert logits[0, -1, 4:8].tolist() == pytest.approx(FROZEN[name], abs=1e-6)


@pytest.mark.parametrize("name", sorted(LMS))
def test_a_position_never_sees_the_future(name):
    model = build(name)
    x = tokens(2, 10)
    before = model(x, torch.tensor([10, 10]))
    for j in (3, 7):
        y = x.clone()
        y[:, j] = (y[:, j] - 4 + 1) % (len(DICT) - 4) + 4  # another real token at position j
        after = model(y, torch.tensor([10, 10]))
        assert torch.allclose(before[:, :j], after[:, :j], atol=1e-12)  # earlier outputs unchanged
        assert not torch.allclose(before[:, j], after[:, j])  # position j itself reads token j


@pytest.mark.parametrize("name", sorted(LMS))
def test_prefill_and_steps_equal_the_full_forward(name):
    """Right-padded prompts of different lengths, then tokens fed one step at a time."""
    model = build(name)
    full = tokens(3, 9, seed=1)  # each row: prompt of length P_i, then continuation
    lengths = torch.tensor([4, 2, 6])
    prompts = full[:, :6].clone()
    for i, n in enumerate(lengths.tolist()):
        prompts[i, n:] = 0
    with torch.no_grad():
        ref = model(full, torch.tensor([9, 9, 9]))  # (3, 9, V)
        logits, state = model.prefill(prompts, lengths)
        rows = torch.arange(3)
        assert torch.allclose(logits, ref[rows, lengths - 1], atol=1e-10)
        for k in range(3):  # feed full[i, P_i + k] at position P_i + k
            pos = lengths + k
            logits = model.step(full[rows, pos][:, None], state, pos)
            assert torch.allclose(logits, ref[rows, pos], atol=1e-10)


def test_adaptive_softmax_scores_targets_as_its_full_distribution():
    model = build("transformer_lm", adaptive_softmax_cutoff=[8, 20], share_input_output_embed=False)
    x, target = tokens(2, 7), tokens(2, 7, seed=3)
    target[1, 5:] = 0  # padding: not scored
    lp = model(x, torch.tensor([7, 7]), target=target)  # (B, T)
    full = model(x, torch.tensor([7, 7])).log_softmax(-1)  # already log-probs: log_softmax keeps them
    assert torch.allclose(full.exp().sum(-1), torch.ones(2, 7, dtype=full.dtype), atol=1e-6)
    ref = full.gather(-1, target[..., None]).squeeze(-1).masked_fill(target.eq(0), 0.0)
    assert torch.allclose(lp.double(), ref, atol=1e-5)
    with pytest.raises(SeqkitError, match="share_input_output_embed=false"):
        build("transformer_lm", adaptive_softmax_cutoff=[8, 20])
    with pytest.raises(SeqkitError, match="cutoffs must increase"):
        build("lstm_lm", adaptive_softmax_cutoff=[20, 8], share_input_output_embed=False)


def test_adaptive_input_embeds_with_the_softmax_weights():
    model = build("transformer_lm_adaptive_input")
    softmax = model.head.adaptive  # head: tokens 0..7 at C 64; tails: 8..19 at 16, 20..31 at 4
    x = torch.tensor([[5, 9, 25]])
    e = model.embed(x)[0]  # (3, C)
    assert torch.equal(e[0], softmax.head.weight[5])
    assert torch.allclose(e[1], softmax.tail[0][1].weight[9 - 8] @ softmax.tail[0][0].weight, atol=1e-12)
    assert torch.allclose(e[2], softmax.tail[1][1].weight[25 - 20] @ softmax.tail[1][0].weight, atol=1e-12)
    # the only token table is the softmax's: the plain adaptive model has V x C more parameters
    plain = build("transformer_lm", adaptive_softmax_cutoff=[8, 20], share_input_output_embed=False)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(plain) - count(model) == len(DICT) * 64
    # input occurrences train the output weights of the rare bands
    model(x, torch.tensor([3])).sum().backward()
    assert softmax.tail[1][1].weight.grad[25 - 20].abs().sum() > 0
    _drop_heads(model)  # fine-tuning drops the output layer; the embeddings keep every shared weight
    assert model.head is None and count(model) == count(plain) - len(DICT) * 64 and torch.equal(model.embed(x)[0], e)
    for bad in ({"adaptive_softmax_cutoff": []}, {"share_input_output_embed": True}):
        with pytest.raises(SeqkitError, match="adaptive_input=true shares the adaptive softmax"):
            build("transformer_lm_adaptive_input", **bad)


# -- training, eval-lm, generation ---------------------------------------------------------------


def train(corpus, save_dir, model, *extra, criterion="cross_entropy"):
    overrides = ["task=language_modeling", f"task.data={corpus / 'bin'}", "task.tokens_per_sample=16",
                 f"checkpoint.save_dir={save_dir}", f"model={model}", f"criterion={criterion}",
                 "optimizer=adam", "optimizer.lr=0.01", "lr_scheduler=fixed", "dataset.max_tokens=256",
                 "optimization.max_update=60", "common.log_format=json", "common.threads=1", *extra]
    trainer = Trainer(OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(overrides)))
    result = trainer.run()
    return trainer, result, save_dir / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    runs = {name: train(corpus, tmp_path_factory.mktemp(name), preset, f"optimizer.lr={lr}")
            for name, preset, lr in (("gpt", "gpt_tiny", 0.01), ("lstm", "lstm_lm_tiny", 0.1))}
    runs["gpt_adaptive_input"] = train(corpus, tmp_path_factory.mktemp("gpt_ai"), "gpt_tiny", "optimizer.lr=0.01",
                                       "model.adaptive_softmax_cutoff=[6,10]", "model.share_input_output_embed=false",
                                       "model.adaptive_input=true", criterion="adaptive_loss")
    return runs


@pytest.mark.parametrize("name", ["gpt", "lstm", "gpt_adaptive_input"])
def test_training_beats_the_unigram_baseline(corpus, trained, name):
    counts = np.bincount(lm_task(corpus / "bin").load_dataset("train").stream.astype(np.int64))
    p = counts[counts > 0] / counts.sum()
    unigram_bits = float(-(p * np.log2(p)).sum())
    _, result, _ = trained[name]
    assert result["valid"]["nll_loss"] < 0.6 * unigram_bits  # counting lines are very predictable


def hand_nll(model, stream, block, context):
    """Sum of -log p over the stream, scored block by block with up to ``context`` earlier tokens."""
    total = 0.0
    for a in range(0, len(stream), block):
        b, s = min(a + block, len(stream)), max(0, a - context)
        inputs = torch.cat([torch.tensor([2] if s == 0 else [int(stream[s - 1])]), stream[s : b - 1]])
        with torch.no_grad():
            lp = model(inputs[None], torch.tensor([len(inputs)])).double().log_softmax(-1)[0]  # (L, V)
        total -= float(lp[a - s :].gather(1, stream[a:b, None]).sum())
    return total


@pytest.mark.parametrize("name", ["gpt", "lstm", "gpt_adaptive_input"])
@pytest.mark.parametrize("context", [0, 6])
def test_eval_lm_equals_the_perplexity_by_hand(corpus, trained, name, context):
    ck = trained[name][2]
    cfg = EvalLMConfig(task=OmegaConf.create({"data": str(corpus / "bin")}), path=str(ck), gen_subset="valid",
                       tokens_per_sample=10, context_window=context, max_tokens=64)
    r = evaluate(cfg)
    _, model = load_for_inference(str(ck))
    model.eval()
    stream = torch.from_numpy(lm_task(corpus / "bin").load_dataset("valid").stream.astype(np.int64))
    nll = hand_nll(model, stream, 10, context)
    assert r["tokens"] == len(stream) == r["words"]
    assert r["ppl"] == pytest.approx(math.exp(nll / len(stream)), abs=0.0051)  # printed to 2 decimals
    assert r["word_ppl"] == r["ppl"]  # word-level vocabulary: a token is a word
    assert r["ppl"] < r["unigram_ppl"] < 16  # the model beats the no-context baseline
    assert r["loss"] == pytest.approx(nll / len(stream) / math.log(2), abs=1e-4)


def test_eval_lm_rejects_blocks_beyond_the_positions(corpus, trained):
    cfg = EvalLMConfig(task=OmegaConf.create({"data": str(corpus / "bin")}), path=str(trained["gpt"][2]),
                       gen_subset="train", tokens_per_sample=200, context_window=100)
    with pytest.raises(SeqkitError, match="exceeds the model's 256 positions"):
        evaluate(cfg)


def test_eval_lm_rejects_learned_positions_never_trained(corpus, trained):
    cfg = EvalLMConfig(task=OmegaConf.create({"data": str(corpus / "bin")}), path=str(trained["gpt"][2]),
                       gen_subset="valid", tokens_per_sample=16, context_window=8)
    with pytest.raises(SeqkitError, match="= 24 reaches learned positions the model never trained .* blocks of 16"):
        evaluate(cfg)
    cfg.path = str(trained["lstm"][2])  # no positions to outgrow
    assert evaluate(cfg)["context_window"] == 8


@pytest.mark.parametrize("name", ["gpt", "lstm", "gpt_adaptive_input"])
def test_prompts_continue_alike_batched_or_one_by_one(trained, name):
    ck = str(trained[name][2])
    t = Translator.from_checkpoint(ck, beam=1, max_len_b=8)
    prompts = ["v3 v4", "v7", "v1 v2 v3 v4 v5", "v10 v11"]
    batched = t.translate(prompts)
    assert batched == [t.translate([p])[0] for p in prompts]
    assert batched[0].split()[:2] == ["v5", "v6"]  # the model learnt to count
    beam = Translator.from_checkpoint(ck, beam=4, nbest=2, max_len_b=8).translate_nbest(prompts[:2])
    assert all(len(n) == 2 and n[0]["score"] >= n[1]["score"] for n in beam)


def test_sampling_is_seeded_and_respects_top_k(trained):
    t = Translator.from_checkpoint(str(trained["gpt"][2]), beam=3, sampling=True, sampling_topk=2, max_len_b=6,
                                   nbest=3)
    torch.manual_seed(5)
    a = t.translate_nbest(["v3"])
    torch.manual_seed(5)
    assert a == t.translate_nbest(["v3"])


def test_seqkit_generate_says_it_continued_prompts(trained, run_cli):
    from seqkit.cli.generate import main as generate

    r = run_cli(generate, [f"path={trained['gpt'][2]}", "input=-", "generation.beam=1", "generation.max_len_b=4",
                           "common.threads=1"], stdin="v3 v4\nv7\n")
    assert r.code == 0, r.err
    assert "generated 2 continuations in " in r.err and "translated 2 sentences" not in r.err
    assert "packed_weights" not in r.err  # how the weights were laid out: a DEBUG line


def test_generation_longer_than_the_positions_is_one_clear_error(trained):
    t = Translator.from_checkpoint(str(trained["gpt"][2]), beam=1, max_len_b=300)
    with pytest.raises(SeqkitError, match="lower generation.max_len_b"):
        t.translate(["v1"])


def test_a_translation_model_is_refused_by_the_lm_task(corpus, tmp_path):
    with pytest.raises(SeqkitError, match="task language_modeling trains lm models"):
        train(corpus, tmp_path, "transformer_tiny")


def test_preprocess_language_modeling_bad_input(tmp_path):
    with pytest.raises(SeqkitError, match="file not found"):
        preprocess(PreprocessConfig(task="language_modeling", trainpref=str(tmp_path / "nope.txt"),
                                    destdir=str(tmp_path / "bin"), tokenizer=SpaceConfig()))
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    with pytest.raises(SeqkitError, match="no training sentences"):
        preprocess(PreprocessConfig(task="language_modeling", trainpref=str(tmp_path / "empty.txt"),
                                    destdir=str(tmp_path / "bin"), tokenizer=SpaceConfig()))
    assert not (tmp_path / "bin").exists()


def test_eval_lm_bad_input_is_one_line(corpus, tmp_path, trained):
    import os
    import subprocess
    import sys

    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])

    def run(*args):
        p = subprocess.run(["seqkit-eval-lm", *args], capture_output=True, text=True, env=env, timeout=120)
        errors = [line for line in p.stderr.strip().splitlines() if " | INFO | " not in line]  # progress lines aside
        assert p.returncode == 1 and len(errors) == 1 and errors[0].startswith("seqkit-eval-lm: error: "), p.stderr
        return errors[0]

    assert "not found" in run(f"path={tmp_path / 'none.pt'}", f"task.data={corpus / 'bin'}")
    assert "no split 'nope'" in run(f"path={trained['gpt'][2]}", f"task.data={corpus / 'bin'}", "gen_subset=nope")
    assert "unknown config key" in run(f"path={trained['gpt'][2]}", "context=3")


@pytest.mark.parametrize("name", ["gpt", "lstm"])
def test_eval_lm_int8_stays_within_two_percent_of_fp32(corpus, trained, name):
    ck = trained[name][2]
    base = dict(task=OmegaConf.create({"data": str(corpus / "bin")}), path=str(ck), gen_subset="valid",
                tokens_per_sample=10, max_tokens=64)
    fp32, int8 = evaluate(EvalLMConfig(**base)), evaluate(EvalLMConfig(**base, quantize="int8"))
    assert int8["tokens"] == fp32["tokens"] and int8["tokens_per_s"] > 0
    assert int8["ppl"] == pytest.approx(fp32["ppl"], rel=0.02)
    assert int8["ppl"] != fp32["ppl"]  # (the int8 layers did run)


def test_int8_benchmark_measures_a_language_model(corpus, trained, tmp_path):
    """benchmarks/int8.py on an LM checkpoint: seqkit-eval-lm's perplexities at fp32 and int8 and a
    tokens/s per round; a missing checkpoint is one error line."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    bench = [sys.executable, str(Path(__file__).resolve().parents[1] / "benchmarks" / "int8.py")]
    ck = trained["gpt"][2]
    done = subprocess.run([*bench, str(ck), str(corpus / "bin"), "--rounds", "1", "--threads", "1",
                           "--tokens-per-sample", "10"], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    fp32 = evaluate(EvalLMConfig(task=OmegaConf.create({"data": str(corpus / "bin")}), path=str(ck),
                                 gen_subset="valid", tokens_per_sample=10))
    assert row["tokens_per_sample"] == 10 and "batch" not in row
    assert row["none"]["scores"]["ppl"] == fp32["ppl"] and row["none"]["scores"]["word_ppl"] == fp32["word_ppl"]
    assert row["int8"]["scores"]["ppl"] == pytest.approx(fp32["ppl"], rel=0.02)
    assert row["int8"]["scores"]["loss"] != fp32["loss"]  # (the int8 layers did run)
    assert len(row["none"]["per_s_rounds"]) == len(row["speedup_rounds"]) == 1 and row["speedup"] > 0
    bad = subprocess.run([*bench, str(tmp_path / "nope.pt"), str(corpus / "bin")], capture_output=True, text=True, env=env)
    assert bad.returncode != 0 and bad.stderr.strip().count("\n") == 0 and "Traceback" not in bad.stderr
