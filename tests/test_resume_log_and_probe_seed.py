"""Leftovers of interrupted runs, and seeds that hold: a killed seqkit-preprocess leaves a staging
folder the next run removes (SIGTERM: the run itself removes it); a resumed training logs each
update once, as the uninterrupted run does; seqkit-probe's results depend on its seed alone."""

import json
import os
import signal
import subprocess
import sys
import time

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

import seqkit
from seqkit.analysis.probe import ProbeConfig, _lstm_layers, train_probe
from seqkit.cli.common import ConfigBuilder
from seqkit.core.errors import SeqkitError
from seqkit.core.io import staged_dir
from seqkit.data.toy_corpus import make_corpus
from seqkit.preprocess.common import remove_stale_staging
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers.space import SpaceConfig
from seqkit.training.config import TrainConfig
from seqkit.training.progress import drop_records_after
from seqkit.training.trainer import Trainer

from test_probe import write_tagged  # noqa: E402  (a tagged corpus of transfer_fixtures' words)
from test_trainer import data_dir  # noqa: E402,F401  (the toy corpus, binarized: a fixture)
from transfer_fixtures import make_text, pretrain

seqkit.import_builtin_components()

BIN = os.path.dirname(sys.executable)
ENV = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), OMP_NUM_THREADS="1")


# -- preprocess: staging folders ---------------------------------------------------------------------
def staging(parent, name="bin"):
    return sorted(e for e in os.listdir(parent) if e.startswith(f".{name}.tmp-"))


@pytest.fixture(scope="module")
def big_raw(tmp_path_factory):
    """A corpus large enough that binarizing it takes a while (the window a signal lands in)."""
    raw = tmp_path_factory.mktemp("raw")
    make_corpus(str(raw), n_train=40000, n_valid=20, n_test=20, seed=2)
    return raw


def cli_args(raw, dest):
    return [os.path.join(BIN, "seqkit-preprocess"), "source_lang=de", "target_lang=en", f"trainpref={raw}/train",
            f"validpref={raw}/valid", f"destdir={dest}", "tokenizer=space"]


def signal_while_staging(raw, dest, sig):
    """Start seqkit-preprocess, send ``sig`` once its staging folder exists; its return code."""
    proc = subprocess.Popen(cli_args(raw, dest), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not staging(dest.parent) and proc.poll() is None:
        time.sleep(0.002)
    proc.send_signal(sig)
    proc.wait(timeout=120)
    assert not dest.exists(), "the run finished before the signal came"
    return proc.returncode


def test_a_killed_preprocess_leaves_a_staging_folder_that_the_next_run_removes(big_raw, tmp_path):
    dest = tmp_path / "out" / "bin"
    dest.parent.mkdir()
    assert signal_while_staging(big_raw, dest, signal.SIGKILL) == -signal.SIGKILL
    assert len(staging(dest.parent)) == 1  # what the issue saw: killed mid-way, the folder stays
    preprocess(PreprocessConfig(source_lang="de", target_lang="en", trainpref=f"{big_raw}/train",
                                validpref=f"{big_raw}/valid", destdir=str(dest), tokenizer=SpaceConfig()))
    assert staging(dest.parent) == [] and (dest / "preprocess.json").is_file()
    assert sorted(os.listdir(dest.parent)) == ["bin"]


def test_sigterm_stops_preprocess_without_a_staging_folder(big_raw, tmp_path):
    dest = tmp_path / "out" / "bin"
    dest.parent.mkdir()
    assert signal_while_staging(big_raw, dest, signal.SIGTERM) == 128 + signal.SIGTERM
    assert os.listdir(dest.parent) == []


def test_a_signal_just_after_a_temporary_entry_is_made_still_removes_it(tmp_path, monkeypatch):
    """The race the CI suite met under load (the test above, 2026-11-30): SIGTERM's SystemExit landing
    between the making of the staging folder and the keeping of its name left the folder behind.
    Here the "signal" is raised right after the making: of a staging folder, and of an atomic write's file."""
    from seqkit.core.io import atomic_write_bytes

    made = []
    real_mkdir, real_open = os.mkdir, os.open

    def mkdir_then_signal(path, mode=0o777, **kw):
        real_mkdir(path, mode, **kw)
        made.append(path)
        raise SystemExit(143)

    def open_then_signal(path, flags, mode=0o777, **kw):
        fd = real_open(path, flags, mode, **kw)
        if flags & os.O_CREAT:
            made.append(path)
            raise SystemExit(143)
        return fd

    monkeypatch.setattr(os, "mkdir", mkdir_then_signal)
    with pytest.raises(SystemExit):
        with staged_dir(str(tmp_path / "out")):
            pass
    monkeypatch.setattr(os, "mkdir", real_mkdir)
    monkeypatch.setattr(os, "open", open_then_signal)
    with pytest.raises(SystemExit):
        atomic_write_bytes(str(tmp_path / "file.txt"), b"data")
    monkeypatch.setattr(os, "open", real_open)
    assert len(made) == 2 and os.listdir(tmp_path) == []


def test_only_this_destinations_stale_staging_folders_are_removed(tmp_path, monkeypatch):
    raw = tmp_path / "raw"
    make_corpus(str(raw), n_train=50, n_valid=5, n_test=5)
    stale = [".bin.tmp-ab_c1234", ".bin.tmp-zz99zz99.old"]
    others = [".bin2.tmp-ab_c1234", ".bin.tmp-notmine", "bin.tmp-ab_c1234"]
    for name in stale + others:
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.de-en.de.bin").write_bytes(b"half written")
    cfg = PreprocessConfig(source_lang="de", target_lang="en", trainpref=f"{raw}/train", destdir=str(tmp_path / "bin"),
                           tokenizer=SpaceConfig())
    preprocess(cfg)
    assert sorted(os.listdir(tmp_path)) == sorted(others + ["bin", "raw"])
    # a run that fails part way (here: while binarizing) removes its own staging folder
    import seqkit.preprocess.text

    def fails(*args, **kwargs):
        assert staging(tmp_path) != [".bin.tmp-notmine"]  # inside the staging folder
        raise OSError("disk full")

    monkeypatch.setattr(seqkit.preprocess.text, "_binarize", fails)
    with pytest.raises(OSError):
        preprocess(PreprocessConfig(**{**cfg.__dict__, "overwrite": True}))
    assert staging(tmp_path) == [".bin.tmp-notmine"] and (tmp_path / "bin" / "preprocess.json").is_file()


def test_a_classification_folder_drops_stale_staging_and_cleans_up_after_ctrl_c(tmp_path, monkeypatch):
    """The labelled preprocessor stages the same way: an earlier run's staging folder goes, and a
    KeyboardInterrupt while staging leaves nothing behind (the finished folder stays as it was)."""
    import seqkit.preprocess.labelled
    from label_fixtures import write_tsv

    write_tsv(tmp_path / "train.tsv", ["sentence", "label"], [("good film", "1"), ("bad one", "0")] * 5)
    (tmp_path / ".bin.tmp-k1ll3d00").mkdir()
    (tmp_path / ".bin.tmp-k1ll3d00" / "train.input.bin").write_bytes(b"half written")
    cfg = PreprocessConfig(task="classification", trainpref=str(tmp_path / "train"), destdir=str(tmp_path / "bin"),
                           tokenizer=SpaceConfig())
    preprocess(cfg)
    assert staging(tmp_path) == [] and (tmp_path / "bin" / "preprocess.json").is_file()
    before = sorted(os.listdir(tmp_path / "bin"))

    def interrupted(*args, **kwargs):
        assert len(staging(tmp_path)) == 1  # inside the staging folder
        raise KeyboardInterrupt

    monkeypatch.setattr(seqkit.preprocess.labelled, "write_meta", interrupted)  # the last write inside the staging folder
    with pytest.raises(KeyboardInterrupt):
        preprocess(PreprocessConfig(**{**cfg.__dict__, "overwrite": True}))
    assert staging(tmp_path) == [] and sorted(os.listdir(tmp_path / "bin")) == before


def test_two_runs_writing_one_destdir_at_once(tmp_path):
    """Two runs staging the same destdir (two jobs started together): the second does not remove the
    first's staging folder as a killed run's, and the one that finishes second replaces the folder
    (overwrite=true) or stops with one line, its own staging removed and the other's output kept."""
    dest = tmp_path / "bin"
    with staged_dir(str(dest), overwrite=True) as first:
        assert remove_stale_staging(str(dest)) == [] and os.path.isdir(first)  # held: not stale
        with staged_dir(str(dest), overwrite=True) as second:
            Path(second, "x").write_text("second")
        assert dest.is_dir() and (dest / "x").read_text() == "second"
        Path(first, "x").write_text("first")
    assert (dest / "x").read_text() == "first" and staging(tmp_path) == []  # overwrite=true: replaced
    with pytest.raises(SeqkitError, match="was filled by another run while this one worked"):
        with staged_dir(str(tmp_path / "bin2")) as third:
            (tmp_path / "bin2").mkdir()
            (tmp_path / "bin2" / "x").write_text("other run")
            Path(third, "x").write_text("third")
    assert (tmp_path / "bin2" / "x").read_text() == "other run" and staging(tmp_path, "bin2") == []
    killed = tmp_path / ".bin.tmp-k1ll3d00"
    killed.mkdir()
    assert remove_stale_staging(str(dest)) == [str(killed)]  # nobody holds it: an earlier run's


# -- training: the log of a resumed run ---------------------------------------------------------------
def make_cfg(data_dir, save_dir, *extra):
    overrides = [f"task.data={data_dir}", f"checkpoint.save_dir={save_dir}", "model=transformer_tiny",
                 "model.dropout=0.1", "dataset.max_tokens=200", "lr_scheduler.warmup_updates=5",
                 "common.log_format=json", "common.threads=1", "common.log_interval=1",
                 "checkpoint.save_interval_updates=4", *extra]
    return OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(overrides))


def records(save_dir, tag="train"):
    with open(os.path.join(save_dir, "train_log.jsonl"), encoding="utf-8") as f:
        return [r for r in map(json.loads, f) if r["tag"] == tag]


SAME = ("epoch", "update", "loss", "nll_loss", "ppl", "lr", "gnorm")  # not times, nor shapes seen since start


class Killed(Exception):
    pass


def test_a_resumed_run_logs_every_update_once(data_dir, tmp_path, monkeypatch):
    Trainer(make_cfg(data_dir, tmp_path / "straight", "optimization.max_update=20")).run()

    step = Trainer.train_step

    def dies_after_update_14(self, samples):
        if self.num_updates == 14:  # logged 13 and 14 after the checkpoint at 12: then nothing more
            raise Killed()
        return step(self, samples)

    monkeypatch.setattr(Trainer, "train_step", dies_after_update_14)
    with pytest.raises(Killed):
        Trainer(make_cfg(data_dir, tmp_path / "killed", "optimization.max_update=20")).run()
    monkeypatch.undo()
    saved = torch.load(tmp_path / "killed" / "checkpoint_last.pt", weights_only=True)["train_state"]["num_updates"]
    assert saved == 12 and records(tmp_path / "killed")[-1]["update"] == 14
    with open(tmp_path / "killed" / "train_log.jsonl", "a", encoding="utf-8") as f:
        f.write('{"tag": "train", "epoch": 2, "upd')  # a record the kill cut short

    torch.manual_seed(999)
    Trainer(make_cfg(data_dir, tmp_path / "killed", "optimization.max_update=20")).run()
    resumed = records(tmp_path / "killed")
    updates = [r["update"] for r in resumed]
    assert updates == list(range(1, 21))  # strictly increasing, each update once
    straight = records(tmp_path / "straight")
    assert [{k: r.get(k) for k in SAME} for r in resumed] == [{k: r.get(k) for k in SAME} for r in straight]
    assert [r["update"] for r in records(tmp_path / "killed", "valid")] == \
        [r["update"] for r in records(tmp_path / "straight", "valid")]


def test_drop_records_after_keeps_the_file_up_to_the_checkpoint(tmp_path):
    path = tmp_path / "train_log.jsonl"
    lines = [{"tag": "train", "update": u} for u in (1, 2, 3)] + [{"tag": "valid", "update": 3}, {"tag": "info"}]
    lines += [{"tag": "train", "update": u} for u in (4, 5)] + [{"tag": "valid", "update": 5}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"tag": "tr', encoding="utf-8")
    assert drop_records_after(str(path), 3) == 4
    assert [json.loads(line) for line in path.read_text().splitlines()] == lines[:5]
    assert drop_records_after(str(path), 3) == 0 and os.listdir(tmp_path) == ["train_log.jsonl"]
    assert drop_records_after(str(tmp_path / "none.jsonl"), 3) == 0


# -- probe: the seed alone decides -------------------------------------------------------------------
def test_a_probe_depends_on_its_seed_not_on_the_global_rng():
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 3, (600,), generator=g)
    xs = [torch.randn(600, 8, generator=g) + y.unsqueeze(1) * 0.3 for _ in range(3)]  # weakly informative
    cfg = ProbeConfig(epochs=3, batch_size=64, seed=5)

    def once(cfg):
        pred, weights = train_probe([x[:400] for x in xs], y[:400], [x[400:] for x in xs], 3, cfg)
        return pred.tolist(), weights

    first = once(cfg)
    torch.manual_seed(123)
    torch.rand(17)  # other use of the global generator in between
    assert once(cfg) == first
    assert once(ProbeConfig(epochs=3, batch_size=64, seed=6)) != first


def test_lstm_layers_are_built_once_and_draw_nothing():
    lstm = nn.LSTM(6, 5, num_layers=2, batch_first=True)
    x = torch.randn(3, 4, 6)
    state = torch.get_rng_state()
    with torch.no_grad():
        out = _lstm_layers(lstm, x)
        again = _lstm_layers(lstm, x)
        top, _ = lstm(x)
    assert torch.equal(torch.get_rng_state(), state)
    assert len(out) == 3 and torch.equal(out[0], x)
    torch.testing.assert_close(out[-1], top)
    assert all(torch.equal(a, b) for a, b in zip(out, again))


def test_two_probe_runs_agree_whatever_ran_between(tmp_path):
    from seqkit.analysis.probe import run

    (tmp_path / "text").mkdir()
    text = make_text(tmp_path / "text")
    pretrain(text, "lstm_lm", tmp_path / "lstm", updates=2)
    ckpt = tmp_path / "lstm" / "checkpoint_last.pt"
    write_tagged(tmp_path / "train.conll", 40, 0)
    write_tagged(tmp_path / "valid.conll", 10, 1)
    preprocess(PreprocessConfig(task="tagging", trainpref=str(tmp_path / "train.conll"),
                                validpref=str(tmp_path / "valid.conll"), destdir=str(tmp_path / "bin"),
                                tokenizer=SpaceConfig(), vocab_from=str(ckpt)))
    cfg = ProbeConfig(path=str(ckpt), data=str(tmp_path / "bin"), epochs=3, threads=1)
    first = run(cfg)
    torch.manual_seed(77)
    nn.Linear(4, 4)  # other use of the global generator in between
    assert run(cfg) == first
    other = run(ProbeConfig(**{**cfg.__dict__, "seed": 2}))
    assert other["mix"]["weights"] != first["mix"]["weights"]
