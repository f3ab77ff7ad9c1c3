"""tokenizer=char for every task, and looking inside a character-level LSTM's units: the stepped
cell reproduces the LSTM's outputs, correlations find a unit that tracks a property, and
seqkit-plot activations draws a passage (or says in one line why it cannot)."""

import random

import numpy as np
import pytest
import torch

from seqkit.analysis.activations import correlations, property_signals, search, unit_activations
from seqkit.core.checkpoints import load_for_inference
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers.char import CharConfig, CharTokenizer

from label_fixtures import one_line_error, tagged, write_tsv  # noqa: F401  (fixtures are used by name)
from transfer_fixtures import run


def test_char_tokenizer_round_trip():
    tok = CharTokenizer(CharConfig())
    assert tok.encode(' a "b"  c ') == ["a", "▁", '"', "b", '"', "▁", "▁", "c"]
    assert tok.decode(tok.encode('He said "no" (twice).')) == 'He said "no" (twice).'


def passage(n, seed):
    rng = random.Random(seed)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "said"]
    lines = []
    for _ in range(n):
        ws = [rng.choice(words) for _ in range(rng.randint(3, 8))]
        i = rng.randrange(len(ws))
        ws[i] = f'"{ws[i]} {rng.choice(words)}"'
        lines.append(" ".join(ws) + " .")
    return lines


@pytest.fixture(scope="module")
def char_lm(tmp_path_factory):
    root = tmp_path_factory.mktemp("charlm")
    for split, n, seed in (("train", 300, 0), ("valid", 30, 1)):
        (root / f"{split}.txt").write_text("\n".join(passage(n, seed)) + "\n", encoding="utf-8")
    preprocess(PreprocessConfig(task="language_modeling", trainpref=str(root / "train.txt"),
                                validpref=str(root / "valid.txt"), destdir=str(root / "bin"), tokenizer=CharConfig()))
    run(["task=language_modeling", f"task.data={root / 'bin'}", "model=lstm_lm_tiny", "task.tokens_per_sample=64",
         "optimization.max_update=30", "optimizer.lr=0.01", f"checkpoint.save_dir={root / 'ck'}"])
    return root


def test_every_task_reads_characters(char_lm, tagged, tmp_path):  # noqa: F811
    from seqkit.data.dictionary import Dictionary

    d = Dictionary.load(str(char_lm / "bin" / "dict.text.txt"))
    real = [s for s in d.symbols[4:] if not s.startswith("madeupword")]  # (the table is padded to 8)
    assert all(len(s) == 1 for s in real) and "▁" in real and '"' in real
    for lang, text in (("de", "ein Hund"), ("en", "a dog")):
        (tmp_path / f"train.{lang}").write_text(f"{text}\n{text} läuft\n", encoding="utf-8")
    preprocess(PreprocessConfig(source_lang="de", target_lang="en", trainpref=str(tmp_path / "train"),
                                destdir=str(tmp_path / "mt"), tokenizer=CharConfig()))
    assert "ä" in Dictionary.load(str(tmp_path / "mt" / "dict.de.txt")).symbols
    write_tsv(tmp_path / "cls.tsv", ["sentence", "label"], [("good film", "1"), ("bad", "0")])
    preprocess(PreprocessConfig(task="classification", trainpref=str(tmp_path / "cls"), destdir=str(tmp_path / "cls-bin"),
                                tokenizer=CharConfig()))
    from seqkit.core.registry import TASKS

    cls = TASKS.build(TASKS.make_config({"name": "classification", "data": str(tmp_path / "cls-bin")}))
    row = cls.load_dataset("train").src[0].tolist()  # <s> g o o d ▁ f i l m </s>
    assert [cls.src_dict.symbols[i] for i in row[1:-1]] == list("good▁film")
    root, _ = tagged
    preprocess(PreprocessConfig(task="tagging", trainpref=str(root / "train"), destdir=str(tmp_path / "tag-bin"),
                                tokenizer=CharConfig()))
    tag = TASKS.build(TASKS.make_config({"name": "tagging", "data": str(tmp_path / "tag-bin")}))
    ds = tag.load_dataset("train")
    first = ds.src[0].tolist()
    starts = ds.word_starts(0).tolist()
    assert len(first) > len(starts) + 2  # words of several characters, one label at each word's first


def test_property_signals():
    s = property_signals(['ab "cd" (e)'])
    assert s["quotes"].tolist() == [0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0]
    assert s["brackets"].tolist() == [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0]
    assert s["line_position"].tolist() == list(range(12))
    assert s["word_position"].tolist()[:4] == [0, 1, 2, 0]


def test_correlation_search_finds_the_unit_that_is_the_signal():
    g = np.random.default_rng(0)
    signal = (g.random(500) < 0.3).astype(float)
    acts = g.normal(size=(500, 8))
    acts[:, 5] = 0.5 * signal - 0.2 + 0.01 * g.normal(size=500)
    assert correlations(acts, signal)[5] > 0.99
    assert search(acts, {"x": signal}, top=2)["x"][0][0] == 5


def test_stepped_cell_reproduces_the_lstm(char_lm):
    task, model = load_for_inference(str(char_lm / "ck" / "checkpoint_last.pt"))
    model.eval()
    ids = torch.tensor([task.dictionary.eos()] + task.dictionary.encode(list('the "cat"'), append_eos=True))
    with torch.no_grad():
        top = model.transfer_features(ids[None], torch.tensor([len(ids)]))[0]  # (T, H): the last layer's h
    h = unit_activations(model, ids, model.cfg.layers - 1, "hidden")
    torch.testing.assert_close(h, top, rtol=1e-5, atol=1e-6)
    # every layer's h and c after each token, recomputed by the model's own nn.LSTM over each prefix:
    # its final state (L, 1, H) is the state after that prefix's last token
    with torch.no_grad():
        x = model.embed(ids[None])  # (1, T, E); eval: no dropout
        finals = [model.lstm(x[:, : t + 1])[1] for t in range(len(ids))]
    for layer in range(model.cfg.layers):
        for state, k in (("hidden", 0), ("cell", 1)):
            expected = torch.stack([f[k][layer, 0] for f in finals])  # (T, H)
            got = unit_activations(model, ids, layer, state)
            assert got.shape == (len(ids), model.cfg.hidden_dim)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6, msg=f"layer {layer} {state}")
    c = unit_activations(model, ids, 0, "cell")
    assert not torch.equal(c, unit_activations(model, ids, 0, "hidden"))


def test_seqkit_plot_activations(char_lm, run_cli, tmp_path, tiny_train_args):
    from seqkit.cli.plot import main as plot

    text = tmp_path / "passage.txt"
    text.write_text("\n".join(passage(12, 5)) + "\n", encoding="utf-8")
    out = tmp_path / "act.png"
    r = run_cli(plot, ["activations", f"path={char_lm / 'ck' / 'checkpoint_last.pt'}", f"text_file={text}",
                       f"output={out}", "property=quotes"])
    assert r.code == 0, r.err
    assert out.is_file() and "quotes: best units" in r.err and "r=" in r.err
    r = run_cli(plot, ["activations", f"path={char_lm / 'ck' / 'checkpoint_last.pt'}", f"text_file={text}",
                       "unit=999", f"output={tmp_path / 'x.png'}"])
    one_line_error(r, "seqkit-plot", "unit=999", log_lines_allowed=True)
    assert not (tmp_path / "x.png").exists()
