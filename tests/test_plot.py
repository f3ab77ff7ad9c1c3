"""``seqkit-plot`` (attention heatmaps, training curves) and ``common.tensorboard_logdir``: PNGs of
the expected pixel size, one-line errors for bad input and for a missing optional dependency."""

import json
import struct
import sys

import pytest

from seqkit.analysis.plot import CURVES_FIGSIZE, DPI, attention_figsize
from seqkit.cli.plot import main as plot

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path):
    """(width, height) from a PNG's IHDR chunk, the first after the signature."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    return struct.unpack(">II", data[16:24])


def assert_one_line_error(r, *fragments):
    assert r.code == 1, f"exit code {r.code}; stderr:\n{r.err}"
    assert "Traceback" not in r.err, r.err
    assert len(r.messages) == 1, f"expected one line on stderr, got:\n{r.err}"
    line = r.messages[0]
    assert line.startswith("seqkit-plot: error: ") and r.err.strip().splitlines()[-1] == line, r.err
    for f in fragments:
        assert f in line, f"{f!r} not in {line!r}"
    return line


def write_log(path, run, t0=1_000_000.0, updates=(10, 20, 30)):
    """A small train_log.jsonl as seqkit.training.progress writes it (train and valid records)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [{"tag": "info", "time": t0, "message": "start"}]
    for i, u in enumerate(updates):
        loss = 8.0 - i - run * 0.5
        lines.append({"tag": "train", "time": t0 + 10 * u, "epoch": i + 1, "update": u, "loss": loss,
                      "nll_loss": loss - 0.3, "ppl": round(2 ** (loss - 0.3), 2), "tokens_per_s": 1000.0, "lr": f"{1e-3 * (i + 1):.3g}",
                      "gnorm": 1.0, "train_wall": 10 * u})
        lines.append({"tag": "valid", "time": t0 + 10 * u + 5, "epoch": i + 1, "update": u, "loss": loss + 0.2,
                      "nll_loss": loss - 0.1, "ppl": round(2 ** (loss - 0.1), 2), "best_loss": loss + 0.2})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


# -- curves ---------------------------------------------------------------------------------------
def test_curves_two_runs(run_cli, tmp_path):
    a = write_log(tmp_path / "run_a" / "train_log.jsonl", 0)
    b = write_log(tmp_path / "run_b" / "train_log.jsonl", 1, updates=(15, 30))
    out = tmp_path / "pics" / "curves.png"  # the folder is created
    r = run_cli(plot, ["curves", a, b, f"output={out}"])
    assert r.code == 0, r.err
    assert png_size(out) == (int(CURVES_FIGSIZE[0] * DPI), int(CURVES_FIGSIZE[1] * DPI)) == (1200, 800)
    assert "wrote" in r.err and "2 run(s)" in r.err


@pytest.mark.parametrize("key, title", [("bleu", "valid BLEU"), ("accuracy", "valid accuracy"), ("f1", "valid F1"),
                                        ("tagging", "valid F1"), (None, "learning rate")])
def test_fourth_panel_is_the_logged_score(tmp_path, monkeypatch, key, title):
    pytest.importorskip("matplotlib")
    from seqkit.analysis import plot as plot_module

    run = plot_module.read_log(str(write_log(tmp_path / "train_log.jsonl", 0)))
    for i, r in enumerate(run["valid"]):
        if key == "tagging":  # conlleval's entity figures and the token accuracy: entity F1 is drawn
            r.update(precision=1.0, accuracy=90.0 + i, f1=50.0 + i)
        elif key:
            r[key] = 50.0 + i
    seen = {}
    monkeypatch.setattr(plot_module, "_save", lambda fig, output: seen.update(fig=fig))
    plot_module.write_curves(str(tmp_path / "c.png"), [run], ["a"])
    extra = seen["fig"].axes[3]
    assert extra.get_title() == title
    line = extra.get_lines()[0]
    assert list(line.get_ydata()) == ([50.0, 51.0, 52.0] if key else [1e-3, 2e-3, 3e-3])


def test_curves_labels_and_umbrella(run_cli, tmp_path):
    from seqkit.cli.main import main as seqkit

    a = write_log(tmp_path / "x" / "checkpoints" / "train_log.jsonl", 0)
    b = write_log(tmp_path / "y" / "checkpoints" / "train_log.jsonl", 1)
    out = tmp_path / "c.png"
    r = run_cli(seqkit, ["plot", "curves", a, b, f"output={out}", "labels=[base,big]"])
    assert r.code == 0, r.err
    assert png_size(out) == (1200, 800)
    r = run_cli(seqkit, ["plot", "curves", a, b, f"output={out}", "labels=[only_one]"])
    assert_one_line_error(r, "labels", "2 logs")


def test_run_labels_disambiguate():
    from seqkit.analysis.plot import run_labels

    assert run_labels(["/r/base/train_log.jsonl", "/r/big/train_log.jsonl"]) == ["base", "big"]
    assert run_labels(["/x/checkpoints/train_log.jsonl", "/y/checkpoints/train_log.jsonl"]) == [
        "x/checkpoints", "y/checkpoints"]


@pytest.mark.parametrize("content, fragments", [
    (None, ["no such log file"]),
    ("not json at all\n", ["line 1", "not a JSON line", "train_log.jsonl"]),
    ('{"tag": "train", "update": 1, "loss": 3}\n[1, 2]\n', ["line 2", "not a log record"]),
    ("", ["no train or valid records"]),
    ('{"tag": "info", "time": 1.0}\n', ["no train or valid records"]),
])
def test_curves_bad_log(run_cli, tmp_path, content, fragments):
    log = tmp_path / "run" / "train_log.jsonl"
    if content is not None:
        log.parent.mkdir()
        log.write_text(content)
    out = tmp_path / "c.png"
    r = run_cli(plot, ["curves", log, f"output={out}"])
    assert_one_line_error(r, str(log), *fragments)
    assert not out.exists()


@pytest.mark.parametrize("argv, fragments", [
    (["curves"], ["no logs given"]),
    (["curves", "a.jsonl", "bogus=1"], ["unknown config key 'bogus'", "logs", "output", "labels"]),
    (["attention", "sentence=Hallo"], ["path=CHECKPOINT is required"]),
    (["attention", "path=x.pt", "layers=1"], ["unknown config key 'layers'", "path", "sentence", "beam", "layer"]),
    (["heatmap"], ["unknown plot 'heatmap'", "attention", "curves"]),
    (["attention", "path=x.pt", "sentence=Hallo", "beam=0"], ["beam=0 is out of range", ">= 1"]),
])
def test_bad_arguments(run_cli, argv, fragments):
    assert_one_line_error(run_cli(plot, argv), *fragments)


def test_help(run_cli):
    r = run_cli(plot, ["--help"])
    assert r.code == 0 and "seqkit-plot attention" in r.out and "seqkit-plot curves" in r.out
    r = run_cli(plot, ["attention", "--help"])
    assert r.code == 0 and "sentence" in r.out and "layer" in r.out


def test_missing_matplotlib(run_cli, tmp_path, monkeypatch):
    log = write_log(tmp_path / "run" / "train_log.jsonl", 0)
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    r = run_cli(plot, ["curves", log, f"output={tmp_path / 'c.png'}"])
    assert_one_line_error(r, "needs matplotlib", "pip install 'seqkit[plot]'")
    assert not (tmp_path / "c.png").exists()


def test_free_text_values_are_taken_verbatim(tmp_path):
    from seqkit.cli.plot import AttentionPlotConfig, _config

    sentence = "Er sagt: \"Hallo, Welt\" (ja) [1] {a} ${x} 'q' = \\ back\\"
    cfg = _config("attention", AttentionPlotConfig, [f"path={tmp_path}/a b,c.pt", f"sentence={sentence}", "layer=1"])
    assert cfg.sentence == sentence and cfg.path == f"{tmp_path}/a b,c.pt" and cfg.layer == 1


def test_attention_png_size(tmp_path):
    from seqkit.analysis.plot import write_attention

    out = tmp_path / "a.png"
    weights = [[0.7, 0.2, 0.1], [0.1, 0.8, 0.1]]
    assert write_attention(str(out), weights, ["▁Ein", "▁Hund", "</s>"], ["▁A", "</s>"], "A") == png_size(out)
    w, h = attention_figsize(3, 2)
    assert png_size(out) == (round(w * DPI), round(h * DPI))


# -- attention from a trained checkpoint -----------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoint(toy_data, tmp_path_factory, tiny_train_args):
    from seqkit.cli.train import train

    _, data = toy_data
    save_dir = tmp_path_factory.mktemp("plot_ck")
    train([f"task.data={data}", f"checkpoint.save_dir={save_dir}", "optimization.max_update=4",
           "checkpoint.no_epoch_checkpoints=true", *tiny_train_args])
    return save_dir / "checkpoint_last.pt"


def test_attention_plot(run_cli, checkpoint, tmp_path):
    out = tmp_path / "attention.png"
    r = run_cli(plot, ["attention", f"path={checkpoint}", "sentence=Der Hund spielt im Park.", f"output={out}",
                       "beam=2", "layer=0"])
    assert r.code == 0, r.err
    width, height = png_size(out)
    assert 500 <= width <= 2400 and 400 <= height <= 2400, (width, height)  # MAX_INCHES a side at most
    assert "wrote" in r.err and "source x" in r.err


def test_attention_missing_checkpoint(run_cli, tmp_path):
    r = run_cli(plot, ["attention", f"path={tmp_path / 'nope.pt'}", "sentence=Der Hund.",
                       f"output={tmp_path / 'a.png'}"])
    assert_one_line_error(r, "nope.pt")
    assert not (tmp_path / "a.png").exists()


# -- tensorboard ----------------------------------------------------------------------------------
def scalar_tags(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = list(folder.glob("events.out.tfevents.*"))
    assert files, f"no events file in {folder}"
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_logdir(run_cli, toy_data, tmp_path, tiny_train_args):
    from seqkit.cli.train import main as train

    _, data = toy_data
    tb = tmp_path / "tb"
    r = run_cli(train, [f"task.data={data}", f"checkpoint.save_dir={tmp_path / 'ck'}", "optimization.max_update=4",
                        "common.log_interval=2", f"common.tensorboard_logdir={tb}", "checkpoint.no_save=true",
                        *tiny_train_args])
    assert r.code == 0, r.err
    train_scalars = scalar_tags(tb / "train")
    assert [step for step, _ in train_scalars["loss"]] == [2, 4]
    assert {"nll_loss", "ppl", "lr", "gnorm", "tokens_per_s"} <= set(train_scalars)
    valid_scalars = scalar_tags(tb / "valid")
    assert [step for step, _ in valid_scalars["loss"]] == [4]
    # the same figures as the JSON log
    records = [json.loads(x) for x in (tmp_path / "ck" / "train_log.jsonl").read_text().splitlines()]
    valid = [x for x in records if x["tag"] == "valid"]
    assert valid_scalars["loss"][0][1] == pytest.approx(valid[0]["loss"])


def test_missing_tensorboard(run_cli, toy_data, tmp_path, tiny_train_args, monkeypatch):
    from seqkit.cli.train import main as train

    for name in [m for m in sys.modules if m.startswith("tensorboard") or m.startswith("torch.utils.tensorboard")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    _, data = toy_data
    r = run_cli(train, [f"task.data={data}", f"checkpoint.save_dir={tmp_path / 'ck'}", "optimization.max_update=4",
                        f"common.tensorboard_logdir={tmp_path / 'tb'}", *tiny_train_args])
    assert r.code == 1 and "Traceback" not in r.err, r.err
    assert r.messages == ["seqkit-train: error: common.tensorboard_logdir needs tensorboard: "
                          "pip install 'seqkit[tensorboard]'"], r.err
    assert not list((tmp_path / "ck").glob("checkpoint*.pt")) and not (tmp_path / "tb").exists()


# -- pruning --------------------------------------------------------------------------------------
def test_pruning_plot(run_cli, tmp_path):
    rows = [{"method": m, "share": s, "bleu": 40 - 10 * s * (2 if m == "heads" else 1), "per_s_b64": 300 + 10 * s}
            for m in ("heads", "magnitude") for s in (0.0, 0.2, 0.4)]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = run_cli(plot, ["pruning", str(results), f"output={tmp_path / 'p.png'}"])
    assert r.code == 0 and "6 rows" in r.err, r.err
    assert png_size(tmp_path / "p.png") == (800, 500)
    results.write_text('{"method": "heads"}\n')
    assert_one_line_error(run_cli(plot, ["pruning", str(results)]), "method, share and per_s_b64")
