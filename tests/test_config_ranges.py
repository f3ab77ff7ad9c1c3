"""Range checks of config values (``arg(ge=, gt=, le=, lt=, choices=)``): one clean error line
naming the key and the valid range, raised where the config is built, before any work starts."""

from dataclasses import dataclass
from typing import List, Optional

import pytest

import seqkit
from seqkit.cli.average import main as average
from seqkit.cli.generate import main as generate
from seqkit.cli.preprocess import main as preprocess
from seqkit.cli.score import main as score
from seqkit.cli.train import main as train
from seqkit.core.config import arg, check_ranges
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import GROUPS, OPTIMIZERS


@dataclass
class Inner:
    cell: str = arg("lstm", "recurrent cell", choices=("lstm", "gru"))
    dropout: float = arg(0.1, "dropout", ge=0, lt=1)


@dataclass
class Outer:
    lr: float = arg(1e-3, "learning rate", gt=0)
    coverage: float = arg(1.0, "share covered", gt=0, le=1)
    patience: int = arg(-1, "-1: off", ge=-1)
    ceiling: float = arg(0.5, "below one", lt=1)
    betas: List[float] = arg(help="two betas", factory=lambda: [0.9, 0.98], ge=0, lt=1)
    limit: Optional[int] = arg(None, "None: no limit", ge=1)
    free: int = arg(-7, "no bounds at all")
    inner: Inner = arg(help="a nested section", factory=Inner)


def error_of(cfg, prefix=""):
    with pytest.raises(SeqkitError) as e:
        check_ranges(cfg, prefix)
    return str(e.value)


def test_defaults_and_edges_pass():
    check_ranges(Outer())
    check_ranges(Outer(coverage=1, patience=-1, betas=[0, 0.999], limit=1, inner=Inner("gru", 0.0)))


@pytest.mark.parametrize("kwargs, message", [
    ({"lr": 0.0}, "lr=0.0 is out of range: must be > 0"),
    ({"lr": float("nan")}, "lr=nan is out of range: must be > 0"),
    ({"coverage": 1.5}, "coverage=1.5 is out of range: must be in (0, 1]"),
    ({"patience": -2}, "patience=-2 is out of range: must be >= -1"),
    ({"ceiling": 1.0}, "ceiling=1.0 is out of range: must be < 1"),
    ({"betas": [0.9, 1.0]}, "betas[1]=1.0 is out of range: must be in [0, 1)"),
    ({"limit": 0}, "limit=0 is out of range: must be >= 1"),
    ({"inner": Inner(dropout=1.5)}, "inner.dropout=1.5 is out of range: must be in [0, 1)"),
    ({"inner": Inner(cell="rnn")}, "inner.cell='rnn' is not valid; choose one of: lstm, gru"),
])
def test_each_kind_of_violation(kwargs, message):
    assert error_of(Outer(**kwargs)) == message


def test_prefix_and_none_where_the_default_is_not_none():
    assert error_of(Inner(dropout=-0.1), "model.") == "model.dropout=-0.1 is out of range: must be in [0, 1)"
    assert error_of(Inner(dropout=None), "model.") == "model.dropout=None is out of range: must be in [0, 1)"
    check_ranges(Outer(free=-10**9))


def test_registry_make_config_checks_ranges():
    seqkit.import_builtin_components()
    with pytest.raises(SeqkitError, match=r"^optimizer\.lr=-1 is out of range: must be > 0$"):
        OPTIMIZERS.make_config({"name": "adam", "lr": -1})


def test_every_component_default_and_preset_is_in_range():
    """Guards every registered config, new models and plugins' included."""
    from seqkit.generation.config import GenerateConfig
    from seqkit.preprocess.text import PreprocessConfig
    from seqkit.scoring.text import ScoreConfig
    from seqkit.training.average import AverageConfig
    from seqkit.training.config import TrainConfig

    seqkit.import_builtin_components()
    for group, registry in GROUPS.items():
        for name, cfg in registry.choices().items():
            check_ranges(cfg, f"{group}.")  # raises naming group.field on a bad default
    for schema in (TrainConfig, GenerateConfig, PreprocessConfig, ScoreConfig, AverageConfig):
        check_ranges(schema())


# -- the commands: one line, exit 1, before any file is read ----------------------------------------
def assert_range_error(r, line):
    assert r.code == 1, r.err
    assert "Traceback" not in r.err, r.err
    assert r.messages == [line], r.err


@pytest.mark.parametrize("override, line", [
    ("optimizer.lr=-1", "optimizer.lr=-1.0 is out of range: must be > 0"),
    ("model.dropout=1.5", "model.dropout=1.5 is out of range: must be in [0, 1)"),
    ("model.activation=tanh", "model.activation='tanh' is not valid; choose one of: relu, gelu, gelu_tanh, silu"),
    ("dataset.max_tokens=0", "dataset.max_tokens=0 is out of range: must be > 0"),
    ("optimizer.betas=[0.9,1.0]", "optimizer.betas[1]=1.0 is out of range: must be in [0, 1)"),
    ("common.device=tpu", "common.device='tpu' is not valid; choose one of: auto, cpu, cuda"),
    ("criterion.label_smoothing=1", "criterion.label_smoothing=1.0 is out of range: must be in [0, 1)"),
])
def test_train_out_of_range(run_cli, tmp_path, override, line):
    save_dir = tmp_path / "ck"
    r = run_cli(train, [f"task.data={tmp_path / 'nowhere'}", f"checkpoint.save_dir={save_dir}", override])
    assert_range_error(r, f"seqkit-train: error: {line}")
    assert not save_dir.exists()


def test_generate_out_of_range(run_cli, tmp_path):
    r = run_cli(generate, ["batch_size=0", "path=x"])
    assert_range_error(r, "seqkit-generate: error: batch_size=0 is out of range: must be >= 1")
    r = run_cli(generate, ["generation.beam=0", "path=x"])
    assert_range_error(r, "seqkit-generate: error: generation.beam=0 is out of range: must be >= 1")


def test_preprocess_out_of_range(run_cli, tmp_path):
    dest = tmp_path / "bin"
    args = ["source_lang=de", "target_lang=en", f"trainpref={tmp_path / 'nowhere'}", f"destdir={dest}"]
    r = run_cli(preprocess, [*args, "workers=0"])
    assert_range_error(r, "seqkit-preprocess: error: workers=0 is out of range: must be >= 1")
    r = run_cli(preprocess, [*args, "tokenizer.vocab_size=0"])
    assert_range_error(r, "seqkit-preprocess: error: tokenizer.vocab_size=0 is out of range: must be > 0")
    assert not dest.exists()


def test_score_and_average_out_of_range(run_cli):
    r = run_cli(score, ["hyp=x", "ref=y", "output_format=xml"])
    assert_range_error(r, "seqkit-score: error: output_format='xml' is not valid; choose one of: text, json")
    r = run_cli(average, ["save_dir=x", "last=0", "output=y"])
    assert_range_error(r, "seqkit-average: error: last=0 is out of range: must be >= 1")


def test_help_shows_ranges(run_cli):
    out = run_cli(train, ["--help"]).out
    assert "common.log_interval" in out and "[50; >= 1]" in out
    assert "['fp32'; one of: fp32, bf16, fp16]" in out
