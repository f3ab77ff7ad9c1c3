"""Used or refused, walked, for the tool commands: seqkit-probe, seqkit-export, seqkit-plot (each
subcommand) and seqkit-import. Each field of a command's schema, set alone to a valid value other
than its default, is refused in one line naming it or read by the command (the walk of
tests/test_settings_walk.py, which takes the fields from the schema)."""

import json

import pytest
from test_refused_commands import lstm_lms, text  # noqa: F401  (fixtures by name)
from test_plot import write_log
from test_settings_walk import walk
from transfer_fixtures import binarize

from label_fixtures import translation_ckpt  # noqa: F401


def test_probe(text, lstm_lms, run_cli, monkeypatch, tmp_path):  # noqa: F811
    from seqkit.analysis.probe import ProbeConfig
    from seqkit.cli.probe import main as probe

    data = binarize(text, tmp_path / "cls", lstm_lms["word"])
    base = [f"path={lstm_lms['word']}", f"data={data}", "threads=1", "epochs=1", "max_train=40"]
    assert walk(run_cli, monkeypatch, probe, "seqkit-probe", "probe", ProbeConfig, base, tmp_path) == []


@pytest.mark.parametrize("fmt", ["ctranslate2", "huggingface"])
def test_export(fmt, translation_ckpt, run_cli, monkeypatch, tmp_path):  # noqa: F811
    from seqkit.cli.export import main as export
    from seqkit.export import ExportConfig

    pytest.importorskip("ctranslate2" if fmt == "ctranslate2" else "transformers")
    base = [f"format={fmt}", f"path={translation_ckpt}", f"output={tmp_path / 'out'}", "overwrite=true"]
    assert walk(run_cli, monkeypatch, export, "seqkit-export", "export", ExportConfig, base, tmp_path,
                keys=lambda key: key != "format") == []


def _logs(tmp_path):
    """Two runs' train_log.jsonl and one pruning results.jsonl, as seqkit-plot reads them."""
    logs = [write_log(tmp_path / run / "train_log.jsonl", i) for i, run in enumerate(("a", "b"))]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps({"method": m, "share": s, "bleu": 30 - 10 * s, "per_s_b64": 100 + s})
                               + "\n" for m in ("heads", "magnitude") for s in (0.0, 0.5)), encoding="utf-8")
    return logs, results


@pytest.mark.parametrize("command", ["attention", "curves", "pruning", "activations"])
def test_plot(command, translation_ckpt, lstm_lms, run_cli, monkeypatch, tmp_path):  # noqa: F811
    from seqkit.analysis import plot as schemas
    from seqkit.cli.plot import main as plot

    pytest.importorskip("matplotlib")
    logs, results = _logs(tmp_path)
    passage = tmp_path / "passage.txt"
    passage.write_text('he said "v1 v2" (v3)\nv4 v5\n', encoding="utf-8")
    out = f"output={tmp_path / 'plot.png'}"
    base, schema = {
        "attention": ([f"path={translation_ckpt}", "sentence=ein haus", "beam=2", out], schemas.AttentionPlotConfig),
        "curves": ([str(logs[0]), str(logs[1]), out], schemas.CurvesPlotConfig),
        "pruning": ([str(results), out], schemas.PruningPlotConfig),
        "activations": ([f"path={lstm_lms['char']}", f"text_file={passage}", out], schemas.ActivationsPlotConfig),
    }[command]
    # the plain arguments of curves and pruning are their list field: walked as a given key
    given = {"curves": ["logs=[" + ",".join(map(str, logs)) + "]"], "pruning": [f"results=[{results}]"]}
    base = given.get(command, base[:-1]) + [out] if command in given else base
    assert walk(run_cli, monkeypatch, lambda argv: plot([command, *argv]), "seqkit-plot", f"plot_{command}", schema,
                base, tmp_path) == []


def test_import(run_cli, monkeypatch, tmp_path):
    from hf_fixtures import make_gpt2, toy_english

    from seqkit.cli.import_hf import ImportConfig
    from seqkit.cli.import_hf import main as import_hf

    pytest.importorskip("transformers")
    folder = make_gpt2(str(tmp_path / "gpt2"), toy_english(60))
    base = [f"path={folder}", f"output={tmp_path / 'gpt2.pt'}", "overwrite=true"]
    assert walk(run_cli, monkeypatch, import_hf, "seqkit-import", "import", ImportConfig, base, tmp_path) == []
