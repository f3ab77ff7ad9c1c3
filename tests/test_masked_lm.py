"""Masked-LM pretraining: samples (masks, pairs, static/dynamic), the BERT family (ALBERT's
sharing and factorized embeddings, SpanBERT's boundary head), ELECTRA's replaced-token labels,
and short training runs through the one trainer."""

import dataclasses
import json
import random

import pytest
import torch
from omegaconf import OmegaConf

import seqkit
from seqkit.cli.common import ConfigBuilder
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.models.bert import log_unigram
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tasks.masked_lm import MaskedLMConfig, MaskedLMTask
from seqkit.tokenizers.space import SpaceConfig
from seqkit.training.config import TrainConfig
from seqkit.training.trainer import Trainer

seqkit.import_builtin_components()

TINY = dict(encoder_layers=2, embed_dim=32, ffn_dim=64, attention_heads=4, max_positions=64, dropout=0.0,
            attention_dropout=0.0, layer_norm_impl="torch")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlm")
    rng = random.Random(0)
    words = [f"v{i}" for i in range(12)]

    def line():
        start = rng.randrange(len(words))
        return " ".join(words[(start + k) % len(words)] for k in range(rng.randint(3, 9)))

    for split, n in (("train", 300), ("valid", 200)):
        (root / f"{split}.txt").write_text("\n".join(line() for _ in range(n)) + "\n", encoding="utf-8")
    preprocess(PreprocessConfig(task="language_modeling", trainpref=str(root / "train.txt"),
                                validpref=str(root / "valid.txt"), destdir=str(root / "bin"), tokenizer=SpaceConfig()))
    return root / "bin"


def task(corpus, **kw):
    return MaskedLMTask(MaskedLMConfig(data=str(corpus), tokens_per_sample=24, **kw))


def build(name, dictionary, **kw):
    torch.manual_seed(0)
    return MODELS.build(dataclasses.replace(MODELS.choices()[name], **{**TINY, **kw}), dictionary).eval()


# -- samples -------------------------------------------------------------------------------------


def test_mask_is_appended_and_samples_mask_about_15_percent(corpus):
    t = task(corpus)
    assert t.dictionary[t.mask_idx] == "<mask>" and t.mask_idx == len(t.dictionary) - 1
    ds = t.load_dataset("train")
    sample = ds.collate(range(len(ds)))
    src, masked = sample["net_input"]["src_tokens"], sample["net_input"]["masked_tokens"]
    real = (src >= 4) | masked  # maskable positions, before masking (masked ones were real)
    assert abs(masked.sum().item() / real.sum().item() - 0.15) < 0.01
    assert sample["target"].numel() == masked.sum() == sample["sample_size"]
    assert (sample["target"] >= 4).all() and (sample["target"] < t.specials.vocab_size).all()
    assert (src[:, 0] == 1).all()  # <s> first, never masked
    frac_mask = (src[masked] == t.mask_idx).float().mean().item()
    assert abs(frac_mask - 0.8) < 0.05


def test_dynamic_masks_change_per_epoch_and_static_ones_do_not(corpus):
    dyn = task(corpus).load_dataset("train")
    dyn.batches(512, epoch=1)
    a = dyn.collate([0, 1])["net_input"]["masked_tokens"]
    dyn.batches(512, epoch=2)
    b = dyn.collate([0, 1])["net_input"]["masked_tokens"]
    assert not torch.equal(a, b)
    static = task(corpus, mask_copies=2).load_dataset("train")
    assert len(static) == 2 * len(dyn)
    static.batches(512, epoch=1)
    c = static.collate([0, len(dyn)])
    static.batches(512, epoch=2)
    d = static.collate([0, len(dyn)])
    assert torch.equal(c["net_input"]["masked_tokens"], d["net_input"]["masked_tokens"])
    src = c["net_input"]["src_tokens"]  # two copies of block 0: same text, other masks
    assert not torch.equal(c["net_input"]["masked_tokens"][0], c["net_input"]["masked_tokens"][1])
    orig = [s.masked_scatter(m, t) for s, m, t in zip(src, c["net_input"]["masked_tokens"],
                                                       c["target"].split(c["net_input"]["masked_tokens"].sum(1).tolist()))]
    assert torch.equal(orig[0], orig[1])


@pytest.mark.parametrize("mode", ["nsp", "sop"])
def test_sentence_pairs_layout_and_labels(corpus, mode):
    ds = task(corpus, sentence_pairs=mode).load_dataset("train")
    sample = ds.collate(range(len(ds)))
    labels = sample["sentence_target"]
    assert 0.35 < labels.float().mean().item() < 0.65
    src, seg = sample["net_input"]["src_tokens"], sample["net_input"]["segments"]
    for row, s, n in zip(src, seg, sample["net_input"]["src_lengths"].tolist()):
        first_b = int(s[:n].argmax())  # first position of segment 1
        assert row[0] == 1 and row[first_b - 1] == 2 and row[n - 1] == 2  # <s> A </s> B </s>
        assert bool((s[:first_b] == 0).all()) and bool((s[first_b:n] == 1).all())


def test_span_masking_gives_boundaries_outside_the_spans(corpus):
    ds = task(corpus, mask_unit="span").load_dataset("train")
    sample = ds.collate(range(8))
    ni = sample["net_input"]
    masked = ni["masked_tokens"].reshape(-1)
    assert not masked[ni["sbo_left"]].any() and not masked[ni["sbo_right"]].any()
    assert (ni["sbo_offset"] >= 0).all() and ni["sbo_left"].numel() == sample["target"].numel()


# -- models ------------------------------------------------------------------------------------


def test_bert_frozen_output_and_heads(corpus):
    t = task(corpus, sentence_pairs="nsp")
    model = build("bert_tiny", t.dictionary)
    ds = t.load_dataset("valid")
    sample = ds.collate([0, 1, 2])
    out = model(**sample["net_input"])
    assert out["mlm"].shape == (sample["target"].numel(), len(t.dictionary))
    assert out["sentence"].shape == (3, 2)
    # the output bias starts at the log unigram of the dictionary's counts (unigram_bias_init)
    counts = torch.tensor(t.dictionary.counts[4:8], dtype=torch.float64) + 1
    start = (counts / (sum(t.dictionary.counts) + len(t.dictionary))).log()
    assert model.mlm_head.bias[4:8].tolist() == pytest.approx(start.tolist(), abs=1e-6)
    assert (out["mlm"][0, 4:8] - model.mlm_head.bias[4:8]).tolist() == pytest.approx(FROZEN_BERT, abs=1e-4)
    zero = build("bert_tiny", t.dictionary, unigram_bias_init=False)
    assert not zero.mlm_head.bias.any()


FROZEN_BERT = [0.32955, -1.15467, 1.56244, -0.39793]  # mlm logits less the bias, first masked position, ids 4..7


def test_embed_init_std_starts_the_tied_head_near_the_unigram(corpus):
    t = task(corpus)
    ds = t.load_dataset("valid")
    sample = ds.collate(range(40))
    target = sample["target"]  # (N,)
    unigram = torch.nn.functional.cross_entropy(log_unigram(t.dictionary).expand(len(target), -1), target)
    excess = {}
    for std in (0.0, 0.02):
        model = build("bert_mini", t.dictionary, embed_init_std=std, embedding_dim=0)
        enc = model.encoder
        if std:
            for table in (enc.embed_tokens.weight[4:], enc.embed_positions.weight, enc.embed_segments.weight):
                assert float(table.detach().std()) == pytest.approx(std, rel=0.25)  # tables of 64 to 2,048 values
        with torch.no_grad():
            logits = model(**sample["net_input"])["mlm"]  # (N, V)
        excess[std] = float(torch.nn.functional.cross_entropy(logits, target) - unigram)
    # E**-0.5 = 0.18 at C 32: logits of std ~1 around the unigram bias (+0.29 nats here); 0.02: std ~0.1
    assert excess[0.0] > 0.2 and abs(excess[0.02]) < 0.02, excess  # nats


def test_albert_shares_one_layer_and_factorizes_embeddings(corpus):
    d = task(corpus).dictionary
    shared = build("albert_mini", d)
    unshared = build("albert_mini", d, share_layers=False)
    bert = build("bert_mini", d, embedding_dim=0)
    assert len(shared.encoder.layers) == 1 and len(unshared.encoder.layers) == 2
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    layer = sum(p.numel() for p in shared.encoder.layers[0].parameters())
    assert n(unshared) - n(shared) == layer  # the second layer's parameters are the first's
    assert shared.encoder.embed_tokens.weight.shape == (len(d), 128)  # E = 128, projected to C = 32
    assert shared.encoder.embed_proj.weight.shape == (32, 128)
    assert bert.encoder.embed_proj is None
    # the one set of parameters gets gradient from every application
    x = torch.randint(4, 16, (2, 7))
    shared.train()(x, torch.tensor([7, 7]))["mlm"].sum().backward()
    assert shared.encoder.layers[0].ffn.fc1.weight.grad.abs().sum() > 0


def test_electra_labels_mark_exactly_the_replaced_tokens(corpus):
    t = task(corpus, leave_unmasked_prob=0.0, random_token_prob=0.0)
    model = build("electra_mini", t.dictionary, generator_layers=1)
    sample = t.load_dataset("train").collate(range(6))
    torch.manual_seed(3)
    out = model(**sample["net_input"], mlm_target=sample["target"])
    masked = sample["net_input"]["masked_tokens"]
    labels = out["disc_labels"]
    assert not labels[~masked].any()  # only masked positions can be replaced
    sampled = out["corrupted"][masked]
    assert torch.equal(labels[masked], sampled != sample["target"])
    assert model.generator.embed_tokens is model.encoder.embed_tokens
    # ELECTRA's generator starts at zero bias: near-uniform first samples, which the discriminator
    # can tell without context (logs/electra_unigram_start_collapse: from a unigram start it cannot)
    assert not model.generator_head.bias.any()


def test_discriminator_figures_against_the_base_rate():
    from seqkit.analysis.eval_lm import binary_auc, discriminator_figures

    assert binary_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75
    assert binary_auc([0.5, 0.5, 0.5], [1, 0, 0]) == 0.5  # ties count half
    logits = torch.tensor([-2.0, -1.0, 3.0, -0.5])  # (P,)
    labels = torch.tensor([False, False, True, True])
    tokens = torch.tensor([5, 6, 5, 7])  # token 5 is replaced once in two: 1 bit each; 6 and 7 are given away
    assert discriminator_figures(logits, labels, tokens) == {
        "disc_positions": 4, "replaced": 50.0, "disc_loss": 0.5276, "disc_base_rate_loss": 1.0,
        "disc_token_only_loss": 0.5, "disc_accuracy": 75.0, "disc_base_rate_accuracy": 50.0,
        "disc_token_only_accuracy": 75.0, "disc_auc": 1.0}


def test_a_masked_lm_model_refuses_the_wrong_task_options(corpus):
    with pytest.raises(SeqkitError, match="sentence head"):
        task(corpus, sentence_pairs="sop").build_model(dataclasses.replace(MODELS.choices()["roberta_mini"], **TINY))
    with pytest.raises(SeqkitError, match="mask_unit=span"):
        task(corpus).build_model(dataclasses.replace(MODELS.choices()["spanbert_mini"], **TINY))


# -- training ----------------------------------------------------------------------------------


def train(corpus, save_dir, model, criterion, *extra):
    overrides = ["task=masked_lm", f"task.data={corpus}", "task.tokens_per_sample=24", f"checkpoint.save_dir={save_dir}",
                 f"model={model}", "model.encoder_layers=2", "model.embed_dim=32", "model.ffn_dim=64",
                 "model.attention_heads=4", "model.max_positions=64", "model.dropout=0", "model.attention_dropout=0",
                 f"criterion={criterion}", "optimizer=adam", "optimizer.lr=0.002", "lr_scheduler=fixed",
                 "dataset.max_tokens=512", "optimization.max_update=150", "common.log_format=json", "common.threads=1",
                 "checkpoint.best_checkpoint_metric=accuracy", "checkpoint.maximize_best_checkpoint_metric=true", *extra]
    trainer = Trainer(OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(overrides)))
    result = trainer.run()
    lines = (save_dir / "train_log.jsonl").read_text().splitlines()
    return result, [r for r in map(json.loads, lines) if r["tag"] == "valid"]


@pytest.mark.parametrize("model, criterion, extra", [
    ("roberta_mini", "masked_lm", []),
    ("bert_mini", "masked_lm", ["task.sentence_pairs=nsp"]),
    ("albert_mini", "masked_lm", ["task.sentence_pairs=sop", "task.mask_unit=word"]),
    ("spanbert_mini", "masked_lm", ["task.mask_unit=span"]),
    ("electra_mini", "electra", ["model.generator_layers=1"]),
])
def test_every_objective_trains(corpus, tmp_path, model, criterion, extra):
    """Counting lines: a masked word follows from its neighbours, which a model learns slowly from
    scratch; after 150 updates the loss has fallen and accuracy is clearly above 1 in 12."""
    result, valid = train(corpus, tmp_path, model, criterion, *extra)
    assert valid[-1]["nll_loss"] < valid[0]["nll_loss"]
    assert result["best"] > 100.0 / 12 + 4
    if any(e.startswith("task.sentence_pairs=") for e in extra):
        assert "sentence_accuracy" in valid[-1]
    if criterion == "electra":
        assert valid[-1]["disc_accuracy"] > 50
        assert 0 < valid[-1]["replaced"] < 50  # % of all positions; about 15% less the generator's hits


def test_cloze_fills_slots_from_python_and_the_shell(corpus, tmp_path):
    import os
    import subprocess
    import sys

    from seqkit.generation.cloze import Cloze

    train(corpus, tmp_path, "roberta_mini", "masked_lm")
    ck = str(tmp_path / "checkpoint_last.pt")
    cloze = Cloze.from_checkpoint(ck)
    (slots,) = cloze.fill(["v3 v4 <mask> v6 [MASK]"], topk=3)
    assert len(slots) == 2 and all(len(s) == 3 for s in slots)
    assert all(w.startswith("v") and 0 < p <= 1 for s in slots for w, p in s)  # real words, no specials
    assert all(s[0][1] >= s[1][1] >= s[2][1] for s in slots)
    with pytest.raises(SeqkitError, match="no <mask>"):
        cloze.fill(["v3 v4 v5"])
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    proc = subprocess.run(["seqkit-generate", f"path={ck}", "input=-", "common.threads=1"], input="v1 <mask> v3\n",
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "S-0\tv1 <mask> v3" and lines[1].startswith("M-0\t0\t")
    assert len(lines[1].split("\t")) == 2 + 2 * 5  # M-0, slot 0, then 5 fillers with probabilities
