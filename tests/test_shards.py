"""A corpus in shards, ``task.data=dir1:dir2:...`` (fairseq's convention): epoch e trains on shard
(e-1) % N, valid/test come from the first, all shards share the first's dictionaries, and a run
killed with SIGKILL inside the second shard resumes to the same parameters and losses."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from seqkit.cli.train import main as train
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import TASKS
from seqkit.tasks.folders import epoch_dir, shard_dirs
from seqkit.tasks.translation import TranslationConfig, TranslationTask
from seqkit.training.shards import shard_count

BIN = os.path.dirname(sys.executable)
ENV = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), OMP_NUM_THREADS="1")
VOLATILE = ("time", "tokens_per_s", "train_wall", "data_wait", "wps", "wall")  # clock readings


def shard_from(data, dest, split):
    """A copy of the toy folder whose train split is its ``split`` split: another shard of one corpus."""
    shutil.copytree(data, dest)
    for side in ("de", "en"):
        for ext in ("bin", "idx"):
            shutil.copy(data / f"{split}.de-en.{side}.{ext}", dest / f"train.de-en.{side}.{ext}")
    return dest


@pytest.fixture(scope="module")
def shards(toy_data, tmp_path_factory):
    """Two shards: train = the toy corpus's valid (shard 1) and test (shard 2) sentences, 40 pairs each."""
    _, data = toy_data
    root = tmp_path_factory.mktemp("shards")
    return shard_from(data, root / "shard0", "valid"), shard_from(data, root / "shard1", "test")


def test_round_robin_and_first_shard_for_valid(shards, toy_data):
    a, b = shards
    data = f"{a}:{b}"
    assert shard_dirs(data) == [str(a), str(b)]
    assert [epoch_dir(data, e) for e in (1, 2, 3, 4)] == [str(a), str(b), str(a), str(b)]
    task = TranslationTask(TranslationConfig(data=data))
    one, two = task.load_dataset("train", epoch=1), task.load_dataset("train", epoch=2)
    assert np.array_equal(one.src_sizes, task.load_dataset("valid").src_sizes)  # shard 1's train is valid
    assert np.array_equal(two.src_sizes, task.load_dataset("test").src_sizes)  # shard 2's is test
    assert np.array_equal(task.load_dataset("train", epoch=3).src_sizes, one.src_sizes)
    assert not np.array_equal(one.src_sizes, two.src_sizes)
    assert task.load_dataset("train").src_sizes.tolist() == one.src_sizes.tolist()  # no epoch: the first


def test_language_modeling_reads_shards(tmp_path):
    from seqkit.preprocess.text import PreprocessConfig, preprocess
    from seqkit.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask
    from seqkit.tokenizers.space import SpaceConfig

    (tmp_path / "a.txt").write_text("a b c .\nb c a .\n" * 5, encoding="utf-8")
    (tmp_path / "v.txt").write_text("c b a .\n", encoding="utf-8")
    preprocess(PreprocessConfig(task="language_modeling", trainpref=str(tmp_path / "a.txt"),
                                validpref=str(tmp_path / "v.txt"), destdir=str(tmp_path / "s0"), tokenizer=SpaceConfig()))
    shutil.copytree(tmp_path / "s0", tmp_path / "s1")
    for ext in ("bin", "idx"):  # shard 2's train: the valid stream
        shutil.copy(tmp_path / "s0" / f"valid.text.{ext}", tmp_path / "s1" / f"train.text.{ext}")
    task = LanguageModelingTask(LanguageModelingConfig(data=f"{tmp_path / 's0'}:{tmp_path / 's1'}", tokens_per_sample=4))
    one, two, valid = (task.load_dataset("train", epoch=1).stream, task.load_dataset("train", epoch=2).stream,
                       task.load_dataset("valid").stream)
    assert len(one) == 10 * len(valid) and np.array_equal(two, valid)


def test_a_shard_with_another_dictionary_is_refused(run_cli, shards, tmp_path, tiny_train_args):
    a, b = shards
    other = shutil.copytree(b, tmp_path / "other")
    with open(other / "dict.en.txt", "a", encoding="utf-8") as f:
        f.write("zzz 1\n")
    save_dir = tmp_path / "ck"
    r = run_cli(train, [f"task.data={a}:{b}:{other}", f"checkpoint.save_dir={save_dir}", *tiny_train_args])
    assert r.code == 1 and "Traceback" not in r.err
    line = r.err.strip().splitlines()[-1]
    assert line.startswith("seqkit-train: error: ") and "shard 3" in line and str(other) in line and "dict.en.txt" in line
    assert not save_dir.exists()


def test_a_task_that_reads_one_folder_refuses_shards(shards):
    a, b = shards
    cfg = TASKS.make_config({"name": "classification", "data": f"{a}:{b}"})
    with pytest.raises(SeqkitError, match="names 2 shards, but task classification reads one folder"):
        shard_count(cfg, TASKS.builder("classification"))
    assert shard_count(TASKS.make_config({"name": "translation", "data": f"{a}:{b}"}), TASKS.builder("translation")) == 2


def train_args(data, save_dir):
    return [os.path.join(BIN, "seqkit-train"), f"task.data={data}", f"checkpoint.save_dir={save_dir}",
            "model=transformer_tiny", "model.dropout=0.1", "dataset.max_tokens=256", "common.threads=1",
            "common.log_interval=1", "common.log_format=json", "checkpoint.save_interval_updates=1",
            "lr_scheduler.warmup_updates=5", "optimization.max_epoch=2"]


def train_records(save_dir):
    """The train and valid log lines without their clock readings."""
    rows = [json.loads(line) for line in open(save_dir / "train_log.jsonl") if line.strip()]
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows if r.get("tag") in ("train", "valid")]


def test_sigkill_in_the_second_shard_then_resume_is_exact(shards, tmp_path):
    a, b = shards
    data = f"{a}:{b}"
    straight = subprocess.run(train_args(data, tmp_path / "straight"), env=ENV, capture_output=True, text=True,
                              timeout=300)
    assert straight.returncode == 0, straight.stderr[-2000:]
    assert "epoch 1 trains on shard 1 of 2" in straight.stderr and "epoch 2 trains on shard 2 of 2" in straight.stderr
    records = train_records(tmp_path / "straight")
    first_epoch = max(r["update"] for r in records if r["tag"] == "train" and r["epoch"] == 1)
    total = max(r["update"] for r in records)
    assert total > first_epoch + 2  # the second shard has updates to kill in

    killed = tmp_path / "killed"
    proc = subprocess.Popen(train_args(data, killed), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        log = killed / "train_log.jsonl"
        if log.exists() and any(r["tag"] == "train" and r["epoch"] == 2 for r in train_records_safe(log)):
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before the second shard"
    saved = torch.load(killed / "checkpoint_last.pt", weights_only=True)["train_state"]
    assert saved["num_updates"] < total

    resumed = subprocess.run(train_args(data, killed), env=ENV, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed at epoch" in resumed.stderr and "trains on shard 2 of 2" in resumed.stderr
    x = torch.load(tmp_path / "straight" / "checkpoint_last.pt", weights_only=True)
    y = torch.load(killed / "checkpoint_last.pt", weights_only=True)
    assert x["train_state"]["num_updates"] == y["train_state"]["num_updates"] == total
    differing = [k for k in x["model"] if not torch.equal(x["model"][k], y["model"][k])]
    assert not differing, f"killed after update {saved['num_updates']}: {differing[:5]} differ"
    assert train_records(killed) == records


def train_records_safe(log):
    """The log's records so far (a line being written is skipped)."""
    out = []
    for line in open(log):
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out
