"""A new model family plugs in from a user folder (``common.user_dir``) with no edit to seqkit:
a tiny GRU encoder-decoder with attention trains with seqkit-train and decodes with seqkit-generate."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = "seqkit_test_gru_plugin"  # a name no other module has: the plugin is imported by folder name
# the documented example plugin (docs/configuration.md), copied under that name
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "plugin" / "myplugin"


def _env():
    return dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
                OMP_NUM_THREADS="1")


def _run(args, **kw):
    return subprocess.run(args, env=_env(), capture_output=True, text=True, timeout=120, **kw)


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugins") / PLUGIN
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture(scope="module")
def trained(plugin_dir, toy_data, tmp_path_factory):
    """seqkit-train with the plugin's model: a separate process, so seqkit's own registries are all it has."""
    save_dir = tmp_path_factory.mktemp("gru") / "checkpoints"
    _, data = toy_data
    proc = _run(["seqkit-train", f"common.user_dir={plugin_dir}", "model=my_gru", "model.embed_dim=32", "model.hidden=48", f"task.data={data}",
                 f"checkpoint.save_dir={save_dir}", "optimization.max_update=15", "optimizer.lr=3e-3",
                 "lr_scheduler=fixed", "dataset.max_tokens=2048", "common.threads=1"])
    return proc, save_dir


def test_train_with_plugin_model(trained):
    proc, save_dir = trained
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"model my_gru: [\d,]+ parameters", proc.stderr), proc.stderr
    assert "done: reached max_update 15; 15 updates" in proc.stderr
    assert (save_dir / "checkpoint_last.pt").is_file()


def test_generate_with_plugin_model(trained, plugin_dir, toy_data):
    proc, save_dir = trained
    assert proc.returncode == 0, proc.stderr[-3000:]
    raw, data = toy_data
    gen = _run(["seqkit-generate", f"path={save_dir / 'checkpoint_last.pt'}", f"task.data={data}",
                f"common.user_dir={plugin_dir}", "common.threads=1", "generation.beam=2", "generation.max_len_b=20"])
    assert gen.returncode == 0, gen.stderr[-3000:]
    n = len((raw / "test.de").read_text(encoding="utf-8").splitlines())
    ids = [int(m) for m in re.findall(r"^D-(\d+)\t", gen.stdout, re.M)]
    assert ids == list(range(n))


def test_generate_reimports_the_runs_plugin(trained, toy_data):
    """The checkpoint stores the absolute user_dir; generate re-imports it (as fairseq does)."""
    proc, save_dir = trained
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, data = toy_data
    gen = _run(["seqkit-generate", f"path={save_dir / 'checkpoint_last.pt'}", f"task.data={data}", "common.threads=1"])
    assert gen.returncode == 0, gen.stderr[-3000:]
    assert "D-0\t" in gen.stdout


def test_generate_with_a_vanished_plugin_names_the_missing_model(trained, toy_data, tmp_path):
    """A checkpoint whose plugin folder is gone: one line naming the unknown model."""
    import torch

    proc, save_dir = trained
    state = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)
    state["cfg"]["common"]["user_dir"] = str(tmp_path / "moved-away")
    torch.save(state, tmp_path / "ck.pt")
    _, data = toy_data
    gen = _run(["seqkit-generate", f"path={tmp_path / 'ck.pt'}", f"task.data={data}", "common.threads=1"])
    assert gen.returncode == 1
    lines = gen.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in gen.stderr, gen.stderr
    assert lines[0].startswith("seqkit-generate: error: unknown model 'my_gru'; valid: "), lines[0]
    assert "transformer" in lines[0]


def test_unknown_model_lists_valid_names(run_cli, toy_data, tmp_path):
    from seqkit.cli.train import main

    _, data = toy_data
    r = run_cli(main, [f"task.data={data}", "model=grux", f"checkpoint.save_dir={tmp_path / 'ck'}"])
    assert r.code == 1
    assert len(r.err.strip().splitlines()) == 1, r.err
    assert r.err.startswith("seqkit-train: error: unknown model 'grux'; valid: ")
    assert "transformer_tiny" in r.err and "transformer_small" in r.err
    assert not (tmp_path / "ck").exists()
