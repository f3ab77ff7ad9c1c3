"""Probing: every layer of every pretraining family is read (the top one equals what fine-tuning
reads), control labels are a function of the word type alone, a probe on random features scores
the majority baseline, and seqkit-probe end to end (table, JSON, PNG) or one clear error."""

import json
import math

import numpy as np
import pytest
import torch

from seqkit.analysis.probe import ProbeConfig, control_labels, layer_features, layer_names, scores, train_probe
from seqkit.core.checkpoints import load_for_inference
from seqkit.tokenizers.space import SpaceConfig

from label_fixtures import one_line_error  # noqa: F401
from transfer_fixtures import WORDS, make_text, pretrain

FAMILIES = ["gpt", "lstm_lm", "elmo", "bert", "albert", "electra", "bart"]


@pytest.fixture(scope="module")
def bodies(tmp_path_factory):
    text = make_text(tmp_path_factory.mktemp("probe_text"))
    out = {}
    for name in FAMILIES:
        save = tmp_path_factory.mktemp(name)
        pretrain(text, name, save, updates=2)
        out[name] = save / "checkpoint_last.pt"
    return text, out


def tokens():
    src = torch.tensor([[2, 5, 6, 7, 8, 2], [2, 9, 10, 2, 1, 1]])  # </s> ... </s>, then pads (1)
    return src, torch.tensor([6, 4])


def elmo_layers_by_hand(model, src, lengths):
    """ELMo's layers, sentence by sentence from its modules: ``[x; x]``, then ``[forward_l; backward_l]``
    where the backward stack reads the sentence reversed (its outputs flipped back): a list of
    ``L + 1`` lists of ``(n_b, 2H)``."""
    out = [[] for _ in range(model.cfg.layers + 1)]
    with torch.no_grad():
        for b, n in enumerate(lengths.tolist()):
            x = model.embed(src[b : b + 1, :n])  # (1, n, H)
            f, r = x, x.flip(1)
            out[0].append(torch.cat([x, x], -1)[0])
            for i in range(model.cfg.layers):
                f, _ = model.forward_layers[i](f)
                r, _ = model.backward_layers[i](r)
                out[i + 1].append(torch.cat([f, r.flip(1)], -1)[0])
    return out


@pytest.mark.parametrize("name", FAMILIES)
def test_every_layer_is_read_and_the_top_is_what_fine_tuning_reads(bodies, name):
    _, ckpts = bodies
    task, model = load_for_inference(str(ckpts[name]))
    model.eval()
    d = task.dictionary if hasattr(task, "dictionary") else task.src_dict
    src, lengths = tokens()
    src = src.masked_fill(src.eq(1), d.pad()).masked_fill(src.eq(2), d.eos())
    with torch.no_grad():
        layers = layer_features(model, src, lengths)
        top = model.transfer_features(src, lengths)
        normed = model.final_norm(layers[-1]) if name == "gpt" else None
    names = layer_names(model)
    assert len(layers) == len(names) >= 3
    assert all(h.shape[:2] == src.shape for h in layers)
    if name == "elmo":  # its fine-tuning reading is every layer
        assert torch.equal(torch.stack(layers), top)
        expected = elmo_layers_by_hand(model, src, lengths)
        assert len(expected) == len(layers)
        for i, (want, h) in enumerate(zip(expected, layers)):
            for b, n in enumerate(lengths.tolist()):  # real positions only
                torch.testing.assert_close(h[b, :n], want[b], rtol=1e-5, atol=1e-6, msg=f"layer {i}, sentence {b}")
    elif name == "gpt":  # pre-norm: fine-tuning reads the final norm of the last layer's output
        torch.testing.assert_close(normed, top)
    else:
        torch.testing.assert_close(layers[-1], top)  # (BART: the decoder's last layer)
    if name == "albert":  # one shared layer, called once per layer
        assert len(model.encoder.layers) == 1 and len(layers) == model.cfg.encoder_layers + 1
    if name == "bart":
        assert names[0] == "encoder.0" and names[-1] == f"decoder.{model.cfg.decoder_layers}"


def test_control_labels_are_a_function_of_the_word_type():
    types = [(5,), (6, 7), (5,), (8,), (6, 7), (9,)] * 50
    counts = np.array([70.0, 20.0, 10.0])
    table = control_labels(types, counts, seed=3)
    assert set(table) == {(5,), (6, 7), (8,), (9,)}
    assert table == control_labels(list(reversed(types)), counts, seed=3)  # not the order of appearance
    many = control_labels([(i,) for i in range(3000)], counts, seed=1)
    share = np.bincount(list(many.values()), minlength=3) / 3000
    assert np.allclose(share, counts / counts.sum(), atol=0.03)  # drawn from the task's label distribution


def test_a_probe_on_random_features_scores_the_majority_baseline():
    g = torch.Generator().manual_seed(0)
    y = (torch.rand(3000, generator=g) < 0.7).long()  # 70% label 1
    x = torch.randn(3000, 16, generator=g)
    cfg = ProbeConfig(epochs=60, batch_size=256)
    pred, _ = train_probe([x[:2000]], y[:2000], [x[2000:]], 2, cfg)
    acc, rare = scores(pred, y[2000:], common=1)
    majority = 100.0 * float(y[2000:].eq(1).float().mean())
    assert abs(acc - majority) < 3.0
    assert rare < 10.0  # off the majority label it finds next to nothing
    # and a feature that holds the label is found
    x[:, 3] = y.float()
    pred, _ = train_probe([x[:2000]], y[:2000], [x[2000:]], 2, cfg)
    assert scores(pred, y[2000:], common=1) == (100.0, 100.0)


def test_scores_off_the_common_label():
    gold = torch.tensor([0, 0, 0, 0, 0, 0, 1, 2, 2, 1])  # 0 (say O) is common
    pred = torch.tensor([0, 0, 0, 0, 0, 0, 0, 2, 0, 1])
    assert scores(pred, gold, common=0) == (80.0, 50.0)  # 8 of 10; 2 of the 4 non-O
    every, rare = scores(torch.zeros(6, dtype=torch.long), gold[:6], common=0)
    assert every == 100.0 and math.isnan(rare)  # no gold label off the common one: no figure


def write_tagged(path, n, seed):
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n):
            for w in rng.choice(WORDS, size=rng.integers(3, 8)):
                f.write(f"{w} {'A' if int(w[1:]) < 4 else 'B' if int(w[1:]) < 8 else 'C'}\n")
            f.write("\n")


def test_seqkit_probe_end_to_end(bodies, run_cli, tmp_path):
    from seqkit.cli.probe import main as probe
    from seqkit.preprocess.text import PreprocessConfig, preprocess

    _, ckpts = bodies
    write_tagged(tmp_path / "train.conll", 80, 0)
    write_tagged(tmp_path / "valid.conll", 20, 1)
    preprocess(PreprocessConfig(task="tagging", trainpref=str(tmp_path / "train.conll"),
                                validpref=str(tmp_path / "valid.conll"), destdir=str(tmp_path / "bin"),
                                tokenizer=SpaceConfig(), vocab_from=str(ckpts["gpt"])))
    out = tmp_path / "res" / "gpt.json"
    r = run_cli(probe, [f"path={ckpts['gpt']}", f"data={tmp_path / 'bin'}", f"output={out}", "epochs=30",
                        "threads=1"])
    assert r.code == 0, r.err
    result = json.loads(out.read_text())
    rows = result["layers"]
    assert [row["layer"] for row in rows] == ["0", "1", "2"]  # gpt_tiny: the embeddings, then 2 layers
    # the tag is a function of the word: the embeddings hold it, and so (by memorizing types) does the control
    assert rows[0]["accuracy"] == 100.0 and rows[0]["control"] >= 95.0
    assert all(row["selectivity"] == round(row["accuracy"] - row["control"], 2) for row in rows)
    assert all(row["rare_selectivity"] == round(row["rare_accuracy"] - row["rare_control"], 2) for row in rows)
    assert rows[0]["rare_accuracy"] == 100.0 and result["common_label"] in ("A", "B", "C")
    assert len(result["mix"]["weights"]) == len(rows) and abs(sum(result["mix"]["weights"]) - 1) < 1e-3
    assert "| scalar mix |" in r.out and (tmp_path / "res" / "gpt.md").is_file()
    assert (tmp_path / "res" / "gpt.png").is_file()
    # a masked LM's dictionary ends with <mask>: data binarized with its vocabulary is probed all the same
    preprocess(PreprocessConfig(task="tagging", trainpref=str(tmp_path / "train.conll"),
                                validpref=str(tmp_path / "valid.conll"), destdir=str(tmp_path / "bert-bin"),
                                tokenizer=SpaceConfig(), vocab_from=str(ckpts["bert"])))
    r = run_cli(probe, [f"path={ckpts['bert']}", f"data={tmp_path / 'bert-bin'}", "epochs=30", "threads=1",
                        "layers=[0]", "mix=false"])
    assert r.code == 0, r.err
    assert "| 0 | 100.0 |" in r.out
    r = run_cli(probe, [f"path={ckpts['gpt']}", f"data={tmp_path / 'bin'}", "layers=[0,9]"])
    one_line_error(r, "seqkit-probe", "layers=[9]", "0-2", log_lines_allowed=True)
    # data with a dictionary of its own (not vocab_from the checkpoint)
    preprocess(PreprocessConfig(task="tagging", trainpref=str(tmp_path / "train.conll"),
                                validpref=str(tmp_path / "valid.conll"), destdir=str(tmp_path / "own-bin"),
                                tokenizer=SpaceConfig()))
    r = run_cli(probe, [f"path={ckpts['bert']}", f"data={tmp_path / 'own-bin'}", "random_init=true"])
    one_line_error(r, "seqkit-probe", "another dictionary", log_lines_allowed=True)


def test_a_layer_is_chosen_on_one_split_and_reported_on_another(bodies, run_cli, tmp_path):
    """report=test: the same probes score a second split; the chosen split's figures are those of a
    run without it, and the summary names the layer best there with its figures on the other."""
    from seqkit.cli.probe import main as probe
    from seqkit.preprocess.text import PreprocessConfig, preprocess

    _, ckpts = bodies
    for name, n, seed in (("train", 80, 0), ("valid", 20, 1), ("test", 20, 2)):
        write_tagged(tmp_path / f"{name}.conll", n, seed)
    preprocess(PreprocessConfig(task="tagging", trainpref=str(tmp_path / "train.conll"),
                                validpref=str(tmp_path / "valid.conll"), testpref=str(tmp_path / "test.conll"),
                                destdir=str(tmp_path / "bin"), tokenizer=SpaceConfig(), vocab_from=str(ckpts["gpt"])))
    common = [f"path={ckpts['gpt']}", f"data={tmp_path / 'bin'}", "epochs=5", "threads=1", "random_init=true"]
    results = {}
    for tag, extra in (("alone", []), ("both", ["report=test"])):
        r = run_cli(probe, [*common, f"output={tmp_path / tag / 'r.json'}", *extra])
        assert r.code == 0, r.err
        results[tag] = json.loads((tmp_path / tag / "r.json").read_text())
    keys = ("accuracy", "rare_accuracy", "control", "selectivity")
    alone, both = results["alone"], results["both"]
    assert [[row[k] for k in keys] for row in both["layers"]] == [[row[k] for k in keys] for row in alone["layers"]]
    assert all("report_accuracy" in row and "report_selectivity" in row for row in both["layers"])
    best = max(both["layers"], key=lambda row: row["accuracy"])
    assert both["chosen"]["layer"] == best["layer"] and both["chosen"]["chosen_on"] == "valid"
    assert both["chosen"]["report_accuracy"] == best["report_accuracy"] and both["report_vectors"] > 0
    assert "chosen on valid: layer" in (tmp_path / "both" / "r.md").read_text()
    r = run_cli(probe, [*common, "report=valid"])
    one_line_error(r, "seqkit-probe", "report=valid", log_lines_allowed=True)
