"""The Elman cell (``model.cell=rnn``) in the recurrent encoder-decoder and the recurrent LM, and the
gradient-against-distance measurement (seqkit.analysis.gradients, seqkit-plot gradients and
examples/language_model/vanishing_gradient/measure.py) at tiny sizes."""

import dataclasses
import json
import os
import random
import runpy
import sys

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

import seqkit
from label_fixtures import one_line_error
from seqkit.analysis.gradients import gradient_profile, state_gradients
from seqkit.cli.common import ConfigBuilder
from seqkit.core.checkpoints import load_for_inference
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.generation.translator import Translator
from seqkit.models.lstm_lm import LSTMLM, lstm_lm_tiny
from seqkit.models.rnn import Cell, RNNModel, elman_tiny
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers.space import SpaceConfig
from seqkit.training.config import TrainConfig
from seqkit.training.trainer import Trainer

seqkit.import_builtin_components()
DICT = Dictionary([f"w{i}" for i in range(12)])  # 16 symbols with the 4 specials
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def seq2seq(seed=0, **kw) -> RNNModel:
    torch.manual_seed(seed)
    model = RNNModel(dataclasses.replace(elman_tiny(), dropout=0.0, **kw), DICT, DICT).double().eval()
    with torch.no_grad():  # sharper than the +-0.1 init, so steps and rows differ visibly
        for p in model.parameters():
            p.mul_(8.0)
    return model


def lm(cell="rnn", seed=0, **kw) -> LSTMLM:
    torch.manual_seed(seed)
    return LSTMLM(dataclasses.replace(lstm_lm_tiny(), cell=cell, dropout=0.0, **kw), DICT).double().eval()


# -- the cell and the encoder-decoder ------------------------------------------------------------------
def test_the_decoder_cell_is_torchs_rnn_cell():
    torch.manual_seed(0)
    cell, ref = Cell("rnn", 5, 3, 4).double(), nn.RNNCell(8, 4).double()  # [pre; u] = 5 + 3 inputs
    with torch.no_grad():
        ref.weight_ih.copy_(torch.cat([cell.w_pre, cell.w_step[:, :3]], dim=1))
        ref.weight_hh.copy_(cell.w_step[:, 3:])
        ref.bias_ih.copy_(cell.bias)
        ref.bias_hh.zero_()
    x, u, h = torch.randn(2, 5, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 4).double()
    new_h, c = cell(cell.pre_gates(x), u, h, None)
    assert c is None and cell.w_step.shape == (4, 3 + 4)  # one gate block, no cell state
    torch.testing.assert_close(new_h, ref(torch.cat([x, u], dim=1), h), atol=1e-12, rtol=0)


@pytest.mark.parametrize("attention,step", [("none", "luong"), ("additive", "bahdanau"), ("general", "luong")])
def test_seq2seq_incremental_equals_full_with_reordering(attention, step):
    model = seq2seq(attention=attention, attention_step=step)
    assert isinstance(model.encoder, nn.RNN) and model.encoder.nonlinearity == "tanh" and len(model.bridge) == 1
    src = torch.tensor([[5, 6, 7, 8, 9, 2], [10, 11, 2, 0, 0, 0], [4, 15, 14, 2, 0, 0]])
    prev = torch.tensor([[1, 5, 6, 7, 8, 9], [1, 12, 13, 14, 15, 4], [1, 4, 4, 9, 9, 10]])
    with torch.no_grad():
        enc = model.encode(src, src.ne(0).sum(1))
        cache = model.init_cache(enc, 6)
        assert set(cache) <= {"h", "fed"}  # no cell state c
        for t in range(3):
            model.decode_step(prev[:, t:t + 1], enc, cache, t)
        rows = prev
        for t, order in ((3, torch.tensor([2, 0, 0, 1])), (4, torch.tensor([3, 1]))):  # beams, then sentences leaving
            cache = model.reorder_cache(cache, order, True)
            enc, rows = model.reorder(enc, order), rows[order]
            torch.testing.assert_close(model.decode_step(rows[:, t:t + 1], enc, cache, t),
                                       model.decode(rows[:, : t + 1], enc)[:, t], atol=1e-10, rtol=0)


def test_presets():
    choices = MODELS.choices()
    assert (choices["elman_tiny"].cell, choices["elman_luong_small"].cell) == ("rnn", "rnn")
    assert choices["elman_luong_small"].decoder_hidden == choices["lstm_luong_small"].decoder_hidden


# -- the language model ----------------------------------------------------------------------------------
@pytest.mark.parametrize("cell", ["rnn", "gru"])
def test_lm_prefill_and_steps_equal_the_full_forward(cell):
    model = lm(cell)
    assert isinstance(model.lstm, nn.RNN if cell == "rnn" else nn.GRU)
    full = torch.randint(4, len(DICT), (3, 9), generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([4, 2, 6])
    prompts = full[:, :6].clone()
    for i, n in enumerate(lengths.tolist()):
        prompts[i, n:] = 0
    with torch.no_grad():
        ref = model(full, torch.tensor([9, 9, 9]))  # (3, 9, V)
        logits, state = model.prefill(prompts, lengths)
        assert set(state) == {"h"} and state["h"].shape == (3, 2, 24)  # (B, L, H), no c
        rows = torch.arange(3)
        torch.testing.assert_close(logits, ref[rows, lengths - 1], atol=1e-10, rtol=0)
        for k in range(3):
            pos = lengths + k
            torch.testing.assert_close(model.step(full[rows, pos][:, None], state, pos), ref[rows, pos],
                                       atol=1e-10, rtol=0)


def test_int8_keeps_the_elman_layers_in_fp32(caplog):
    from seqkit.generation.quantize import quantize_int8

    model = lm("rnn").float()  # tied output, H 24 != E 16: a Linear projection to quantize
    x = torch.randint(4, len(DICT), (2, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = model(x, torch.tensor([7, 7]))
        with caplog.at_level("INFO", logger="seqkit.generate"):
            quantize_int8(model)
        out = model(x, torch.tensor([7, 7]))
    assert type(model.lstm) is nn.RNN and "1 Elman nn.RNN layer(s) stay fp32" in caplog.text
    assert "quantized" in type(model.proj).__module__ and (out - ref).abs().max() < 0.05
    with pytest.raises(SeqkitError, match=r"its weights are in RNN \(RNN: Elman layers, which it does not cover\)"):
        quantize_int8(lm("rnn", hidden_dim=16).float())  # H = E, tied: nothing but the Elman layers


def test_probe_features_and_the_activations_refusal():
    from seqkit.analysis.activations import unit_activations
    from seqkit.analysis.probe import layer_features

    model = lm("rnn")
    x = torch.randint(4, len(DICT), (2, 5), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        layers = layer_features(model, x, torch.tensor([5, 5]))
        torch.testing.assert_close(layers[-1], model.lstm(model.embed(x))[0], atol=1e-12, rtol=0)
    assert len(layers) == 3
    with pytest.raises(SeqkitError, match="model.cell=rnn: give a checkpoint trained with model.cell=lstm"):
        unit_activations(model, x[0], 0, "cell")


# -- training and generating, end to end ------------------------------------------------------------------
@pytest.fixture(scope="module")
def lm_corpus(tmp_path_factory):
    """Lines that count up from a random word: learnable in a few updates."""
    root = tmp_path_factory.mktemp("elman_lm")
    rng = random.Random(0)
    words = [f"v{i}" for i in range(12)]
    for split, n in (("train", 300), ("valid", 30)):
        lines = []
        for _ in range(n):
            start = rng.randrange(12)
            lines.append(" ".join(words[(start + k) % 12] for k in range(rng.randint(3, 9))))
        (root / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    preprocess(PreprocessConfig(task="language_modeling", trainpref=str(root / "train.txt"),
                                validpref=str(root / "valid.txt"), destdir=str(root / "bin"), tokenizer=SpaceConfig()))
    return root / "bin"


def train(overrides):
    trainer = Trainer(OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(
        ["common.threads=1", "common.log_format=json", "common.log_interval=1", "lr_scheduler=fixed", *overrides])))
    trainer.run()
    save_dir = trainer.cfg.checkpoint.save_dir
    with open(os.path.join(save_dir, "train_log.jsonl"), encoding="utf-8") as f:
        losses = [r["loss"] for r in map(json.loads, f) if r["tag"] == "train"]
    return os.path.join(save_dir, "checkpoint_last.pt"), losses


def test_the_elman_lm_trains_and_continues_prompts(lm_corpus, tmp_path):
    ck, losses = train(["task=language_modeling", f"task.data={lm_corpus}", "task.tokens_per_sample=16",
                        "model=lstm_lm_tiny", "model.cell=rnn", "model.dropout=0", "criterion=cross_entropy",
                        "optimizer=adam", "optimizer.lr=0.02", "dataset.max_tokens=256",
                        "optimization.max_update=60", f"checkpoint.save_dir={tmp_path}"])
    assert sum(losses[-5:]) / 5 < 0.6 * sum(losses[:5]) / 5, losses
    _, model = load_for_inference(ck)
    assert isinstance(model.lstm, nn.RNN) and model.cfg.cell == "rnn"
    out = Translator.from_checkpoint(ck, beam=2, max_len_b=4).translate(["v3 v4", "v7"])
    assert len(out) == 2 and all(out)


def test_the_elman_translator_trains_and_translates(toy_data, tmp_path):
    _, data = toy_data
    ck, losses = train([f"task.data={data}", "model=elman_tiny", "model.dropout=0", "optimizer.lr=3e-3",
                        "dataset.max_tokens=1024", "optimization.max_update=30", "dataset.valid_subset=",
                        f"checkpoint.save_dir={tmp_path}"])
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5, losses
    t = Translator.from_checkpoint(ck, beam=2, max_len_b=5)
    assert isinstance(t.model.encoder, nn.RNN) and len(t.translate(["ein haus", "der hund"])) == 2


@pytest.mark.parametrize("model", ["elmo_tiny", "bilstm_classifier_tiny"])
def test_models_without_a_cell_choice_refuse_it(model, run_cli, tmp_path):
    from seqkit.cli.train import main as train_main

    r = run_cli(train_main, [f"model={model}", "model.cell=rnn", f"checkpoint.save_dir={tmp_path / 'ck'}"])
    one_line_error(r, "seqkit-train", "cell")
    assert not (tmp_path / "ck").exists()


# -- gradient against distance -------------------------------------------------------------------------------
def one_unit_elman(w: float) -> LSTMLM:
    """A 1-unit Elman LM at a zero state that zero inputs never move: dL/dh_{T-k} = w^k dL/dh_T."""
    model = lm("rnn", embed_dim=1, hidden_dim=1, layers=1, share_input_output_embed=False)
    with torch.no_grad():
        model.embed.weight.zero_()
        model.lstm.weight_hh_l0.fill_(w)
        model.lstm.bias_ih_l0.zero_()
        model.lstm.bias_hh_l0.zero_()
        model.head.weight.copy_(torch.arange(len(DICT), dtype=torch.float64)[:, None])  # logit_v = v h
    return model


def test_gradient_at_distance_k_is_w_to_the_k_by_hand():
    block = torch.tensor([[4, 5, 6, 7, 5, 9], [8, 8, 8, 8, 8, 4]])  # targets 9 and 4
    g = state_gradients(one_unit_elman(0.5), block, 4)
    # h_T = 0: uniform softmax, dL/dh_T = sum_v p_v v - y = 7.5 - y
    expected = torch.tensor([[1.5, 3.5]], dtype=torch.float64) * 0.5 ** torch.arange(5.0, dtype=torch.float64)[:, None]
    torch.testing.assert_close(g, expected, atol=1e-12, rtol=0)
    profile = gradient_profile(one_unit_elman(-2.0), [block, block[:1]], 2)
    assert profile["mean"] == pytest.approx([(1.5 + 3.5 + 1.5) / 3 * 2 ** k for k in range(3)])
    assert profile["median"] == pytest.approx([1.5, 3.0, 6.0]) and profile["sequences"] == 3


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_gradient_rows_are_each_sequences_own(cell):
    model = lm(cell)
    block = torch.randint(4, len(DICT), (3, 8), generator=torch.Generator().manual_seed(4))
    together = state_gradients(model, block, 6)
    alone = torch.cat([state_gradients(model, block[i:i + 1], 6) for i in range(3)], dim=1)
    torch.testing.assert_close(together, alone, atol=1e-12, rtol=0)
    assert (together[0] > 0).all() and not model.training


def test_gradient_refusals():
    with pytest.raises(SeqkitError, match="a block of 5 input tokens has states at distances 0-4"):
        state_gradients(lm("rnn"), torch.full((1, 6), 5), 5)
    gpt = MODELS.build(MODELS.choices()["gpt_tiny"], DICT)
    with pytest.raises(SeqkitError, match="gradient distances read a recurrent language model"):
        state_gradients(gpt, torch.full((1, 6), 5), 2)


def results_json(path, cells=("rnn", "lstm")):
    runs = [{"cell": c, "updates": u, "mean": [1.0, 0.1 if c == "rnn" else 0.5, 0.0]} for c in cells for u in (0, 10)]
    path.write_text(json.dumps({"title": "tiny", "distances": [0, 1, 2], "runs": runs}), encoding="utf-8")
    return path


def test_seqkit_plot_gradients(run_cli, tmp_path):
    from seqkit.cli.plot import main as plot

    pytest.importorskip("matplotlib")
    r = run_cli(plot, ["gradients", str(results_json(tmp_path / "results.json")), f"output={tmp_path / 'g.png'}"])
    assert r.code == 0, r.err
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG" and "4 curve(s)" in r.err
    (tmp_path / "bad.json").write_text('{"runs": []}', encoding="utf-8")
    one_line_error(run_cli(plot, ["gradients", str(tmp_path / "bad.json")]), "seqkit-plot",
                   "needs distances and runs with cell, updates and mean")


def test_the_measurement_script_runs(lm_corpus, tmp_path, monkeypatch):
    script = os.path.join(ROOT, "examples", "language_model", "vanishing_gradient", "measure.py")
    monkeypatch.setattr(sys, "argv", [script, str(lm_corpus), str(tmp_path), "--embed-dim", "8", "--hidden-dim", "8",
                                      "--length", "6", "--updates", "3", "--batch-size", "4", "--measure-batches", "2",
                                      "--threads", str(torch.get_num_threads())])
    runpy.run_path(script, run_name="__main__")  # in this process: no second torch import
    result = json.loads((tmp_path / "results.json").read_text())
    assert [(run["cell"], run["updates"]) for run in result["runs"]] == [(c, u) for c in ("rnn", "gru", "lstm")
                                                                        for u in (0, 3)]
    assert result["distances"] == list(range(6)) and all(len(run["mean"]) == 6 for run in result["runs"])
    assert all(run["sequences"] == 8 for run in result["runs"])
