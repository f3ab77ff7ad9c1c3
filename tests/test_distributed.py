"""torchrun on this CPU with gloo: 2 ranks == 1 rank with update_freq 2, checkpoints cross world
sizes, two "nodes" on localhost, and a failing rank that stops everyone."""

import os
import socket
import subprocess
import sys

import pytest
import torch

BIN = os.path.dirname(sys.executable)
ENV = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), OMP_NUM_THREADS="1")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_args(data, save_dir, *extra):
    return [os.path.join(BIN, "seqkit-train"), f"task.data={data}", f"checkpoint.save_dir={save_dir}",
            "model=transformer_tiny", "model.dropout=0", "dataset.max_tokens=200", "common.threads=1",
            "dataset.valid_subset=", "lr_scheduler.warmup_updates=4", *extra]


def torchrun(*args, nproc=2, **kw):
    cmd = [os.path.join(BIN, "torchrun"), f"--nproc_per_node={nproc}", f"--master_port={free_port()}", *args]
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=180, **kw)


def run(*args):
    return subprocess.run(list(args), env=ENV, capture_output=True, text=True, timeout=180)


def weights(save_dir):
    return torch.load(os.path.join(save_dir, "checkpoint_last.pt"), weights_only=True)


@pytest.fixture(scope="module")
def runs(toy_data, tmp_path_factory):
    _, data = toy_data
    root = tmp_path_factory.mktemp("dist")
    two = torchrun(*train_args(data, root / "two", "optimization.max_update=6"))
    one = run(*train_args(data, root / "one", "optimization.max_update=6", "optimization.update_freq=2"))
    return data, root, two, one


def test_two_ranks_equal_one_rank_with_update_freq_2(runs):
    _, root, two, one = runs
    assert two.returncode == 0, two.stderr[-3000:]
    assert one.returncode == 0, one.stderr[-3000:]
    assert "world size 2" in two.stderr
    a, b = weights(root / "two"), weights(root / "one")
    assert a["train_state"]["num_updates"] == b["train_state"]["num_updates"] == 6
    for k in a["model"]:
        torch.testing.assert_close(a["model"][k], b["model"][k], atol=1e-6, rtol=1e-5, msg=k)


def without_key_bias(name, value):
    """A parameter without its attention key bias: softmax ignores it, so its gradient is zero up to
    rounding and Adam turns that rounding into steps of the learning rate's size. FSDP's sharded
    output weights take the logits loss path where one process takes the fused one (equal to fp32
    rounding): their key biases differ by such steps, everything else as the paths do."""
    if name.endswith("qkv_proj.bias"):
        c = value.numel() // 3
        return torch.cat([value[:c], value[2 * c:]])
    if name.endswith("kv_proj.bias"):
        return value[value.numel() // 2:]
    return value


def test_fsdp_matches_ddp_and_its_checkpoint_resumes_in_one_process(runs, tmp_path):
    data, root, _, one = runs
    fsdp = torchrun(*train_args(data, tmp_path / "fsdp", "optimization.max_update=6", "distributed.strategy=fsdp"))
    assert fsdp.returncode == 0, fsdp.stderr[-3000:]
    a, b = weights(tmp_path / "fsdp"), weights(root / "one")
    assert b["train_state"]["num_updates"] == 6  # (this test runs before the one that moves it on)
    for k in b["model"]:
        torch.testing.assert_close(without_key_bias(k, a["model"][k]), without_key_bias(k, b["model"][k]), atol=1e-5,
                                   rtol=1e-4, msg=k)
    resumed = run(*train_args(data, tmp_path / "fsdp", "optimization.max_update=7", "optimization.update_freq=2"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed at epoch 1, update 6" in resumed.stderr


def test_checkpoints_cross_world_sizes(runs):
    data, root, two, one = runs
    # saved by 2 ranks, resumed by 1 process; saved by 1 process, resumed by 2 ranks
    r1 = run(*train_args(data, root / "two", "optimization.max_update=8", "optimization.update_freq=2"))
    r2 = torchrun(*train_args(data, root / "one", "optimization.max_update=8"))
    assert r1.returncode == 0 and r2.returncode == 0, (r1.stderr[-2000:], r2.stderr[-2000:])
    assert "resumed at epoch 1, update 6" in r1.stderr and "resumed at epoch 1, update 6" in r2.stderr
    a, b = weights(root / "two"), weights(root / "one")
    assert a["train_state"]["num_updates"] == b["train_state"]["num_updates"] == 8
    # still inside epoch 1: epochs end differently per world size (a 2-rank epoch drops an odd last batch)
    assert a["train_state"]["epoch"] == b["train_state"]["epoch"] == 1
    for k in a["model"]:
        torch.testing.assert_close(a["model"][k], b["model"][k], atol=1e-5, rtol=1e-4, msg=k)


def test_two_nodes_on_localhost(toy_data, tmp_path):
    _, data = toy_data
    port = free_port()
    common = [os.path.join(BIN, "torchrun"), "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",
              f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=seqkit-test"]
    args = train_args(data, tmp_path / "ck", "optimization.max_update=4")
    nodes = [subprocess.Popen(common + args, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=180) for p in nodes]
    assert all(p.returncode == 0 for p in nodes), [o[1][-2000:] for o in outs]
    assert weights(tmp_path / "ck")["train_state"]["num_updates"] == 4
    assert any("world size 2" in o[1] for o in outs)


FAILING_PLUGIN = '''
import os
from dataclasses import dataclass
from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import CRITERIA
from seqkit.criteria.cross_entropy import CrossEntropyCriterion

@dataclass
class FailingConfig:
    name: str = arg("fails_on_rank_1", "registry name")

@CRITERIA.register("fails_on_rank_1", FailingConfig)
class Failing(CrossEntropyCriterion):
    calls = 0
    def __call__(self, model, sample):
        Failing.calls += 1
        if os.environ.get("RANK") == "1" and Failing.calls == 3:
            raise SeqkitError("this rank's data is broken")
        return super().__call__(model, sample)
'''


def test_a_failing_rank_stops_every_rank(toy_data, tmp_path):
    _, data = toy_data
    plugin = tmp_path / "failplug"
    plugin.mkdir()
    (plugin / "__init__.py").write_text(FAILING_PLUGIN)
    r = torchrun(*train_args(data, tmp_path / "ck", "optimization.max_update=50", f"common.user_dir={plugin}",
                             "criterion=fails_on_rank_1"))
    assert r.returncode != 0
    assert "seqkit-train [rank 1]: error: this rank's data is broken" in r.stderr
    assert not (tmp_path / "ck" / "checkpoint_last.pt").exists()


def test_generate_shards_over_ranks_and_merges_in_order(runs, tmp_path):
    data, root, two, _ = runs
    assert two.returncode == 0
    gen = [os.path.join(BIN, "seqkit-generate"), f"path={root / 'two' / 'checkpoint_last.pt'}", f"task.data={data}",
           "common.threads=1", "generation.beam=2", "generation.max_len_b=20"]
    single = run(*gen)
    sharded = torchrun(*gen)
    assert single.returncode == 0 and sharded.returncode == 0, sharded.stderr[-2000:]
    assert "2 process(es)" in sharded.stderr
    assert sharded.stdout == single.stdout and single.stdout.count("\nS-") + 1 == 40
