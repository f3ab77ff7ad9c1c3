"""Exact resume after SIGKILL: a run killed at a random update and resumed ends bit-identical to
a run that was never interrupted (CPU, same seed)."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import torch

BIN = os.path.dirname(sys.executable)
ENV = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), OMP_NUM_THREADS="1")
TOTAL = 24


def args(data, save_dir):
    return [os.path.join(BIN, "seqkit-train"), f"task.data={data}", f"checkpoint.save_dir={save_dir}",
            "model=transformer_tiny", "model.dropout=0.1", "dataset.max_tokens=256", "common.threads=1",
            "common.log_interval=1", "common.log_format=json", "checkpoint.save_interval_updates=1",
            "lr_scheduler.warmup_updates=5", f"optimization.max_update={TOTAL}"]


def last_update(log_path):
    if not os.path.exists(log_path):
        return 0
    updates = [json.loads(line).get("update", 0) for line in open(log_path) if line.strip()]
    return max(updates, default=0)


def test_sigkill_at_a_random_update_then_resume_is_bit_identical(toy_data, tmp_path):
    _, data = toy_data
    straight = subprocess.run(args(data, tmp_path / "straight"), env=ENV, capture_output=True, text=True, timeout=300)
    assert straight.returncode == 0, straight.stderr[-2000:]

    kill_at = random.randint(3, TOTAL - 4)
    killed_dir = tmp_path / "killed"
    proc = subprocess.Popen(args(data, killed_dir), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and last_update(killed_dir / "train_log.jsonl") < kill_at and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"the run ended before update {kill_at}"
    saved = torch.load(killed_dir / "checkpoint_last.pt", weights_only=True)["train_state"]["num_updates"]
    assert saved < TOTAL

    resumed = subprocess.run(args(data, killed_dir), env=ENV, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed at epoch" in resumed.stderr
    a = torch.load(tmp_path / "straight" / "checkpoint_last.pt", weights_only=True)
    b = torch.load(killed_dir / "checkpoint_last.pt", weights_only=True)
    assert a["train_state"]["num_updates"] == b["train_state"]["num_updates"] == TOTAL
    differing = [k for k in a["model"] if not torch.equal(a["model"][k], b["model"][k])]
    assert not differing, f"killed at update {kill_at} (checkpoint at {saved}): {differing[:5]} differ"
    for name, moments in a["optimizer"]["state"].items():
        assert all(torch.equal(v, b["optimizer"]["state"][name][k]) for k, v in moments.items()), name
