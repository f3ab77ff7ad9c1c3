"""The GPU training path, checked on the CPU: few batch shapes (lengths rounded up to a multiple),
batches collated ahead in a thread with an unchanged order, and an update that never reads a device
value on the host between log lines."""

import contextlib
import json

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import seqkit
from seqkit.cli.common import ConfigBuilder
from seqkit.data.pair_dataset import pad_right, round_length
from seqkit.data.prefetch import Prefetcher, padding_counts
from seqkit.training.config import TrainConfig
from seqkit.training.trainer import Trainer

from test_trainer import data_dir  # noqa: F401  (the toy corpus, binarized: a fixture)

seqkit.import_builtin_components()


def make_cfg(data_dir, save_dir, *extra):
    overrides = [f"task.data={data_dir}", f"checkpoint.save_dir={save_dir}", "model=transformer_tiny",
                 "dataset.max_tokens=200", "lr_scheduler.warmup_updates=5", "common.log_format=json",
                 "common.threads=1", "common.log_interval=2", *extra]
    return OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(overrides))


# Python-level routes to a tensor's value on the host (a TorchFunctionMode sees each call). Not
# `.to(device)`: device-agnostic code (torch's clip_grad_norm_ moves norms `.to(first_device)`) that
# reads only when it copies off a device, counted as an op below
HOST_CALLS = {"item", "tolist", "numpy", "cpu", "equal", "allclose", "__bool__", "__int__", "__float__", "__index__",
              "__array__", "__format__", "__repr__"}
# ops that make the host wait for the device (a TorchDispatchMode sees them, from C++ too): a scalar
# read, a comparison answered on the host, an output whose shape depends on the values
HOST_OPS = {"_local_scalar_dense", "equal", "is_nonzero", "allclose", "nonzero", "masked_select"}


def _names_cpu(value) -> bool:
    return value is not None and torch.device(value).type == "cpu"


class _HostCalls(TorchFunctionMode):
    def __init__(self, reads: list):
        super().__init__()
        self.reads = reads

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in HOST_CALLS:
            self.reads.append(func.__name__)
        return func(*args, **(kwargs or {}))


class _HostOps(TorchDispatchMode):
    def __init__(self, reads: list):
        super().__init__()
        self.reads = reads

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        bool_index = name == "index" and any(i is not None and i.dtype == torch.bool for i in args[1])
        device_to_host = (name == "_to_copy" and _names_cpu(kwargs.get("device")) and tensors[0].device.type != "cpu"
                          ) or (name == "copy_" and tensors[0].device.type == "cpu" and tensors[1].device.type != "cpu")
        if name in HOST_OPS or bool_index or device_to_host:
            self.reads.append(f"aten.{name}")
        return func(*args, **kwargs)


@contextlib.contextmanager
def host_reads():
    """The list of every read of a tensor's value on the host while open, by any route: a Python call
    (``.item()``, ``.tolist()``, ``.cpu()``, ``bool(t)``, ``if t:``, ``torch.equal`` ...) and an op that
    waits for the device, from C++ too (``one_hot`` without a size reads the max)."""
    reads: list = []
    with _HostCalls(reads), _HostOps(reads):
        yield reads


def train_records(save_dir):
    with open(save_dir / "train_log.jsonl", encoding="utf-8") as f:
        return [r for r in map(json.loads, f) if r["tag"] == "train"]


def test_round_length_and_pad_right():
    assert [round_length(n, 8) for n in (1, 8, 9, 16, 17)] == [8, 8, 16, 16, 24]
    assert round_length(13, 1) == 13 and round_length(13, 8, cap=14) == 13 and round_length(13, 8, cap=16) == 16
    out = pad_right([torch.tensor([4, 5, 6]), torch.tensor([7])], pad=1, prepend=2, multiple=8)
    assert out.tolist() == [[2, 4, 5, 6, 1, 1, 1, 1], [2, 7, 1, 1, 1, 1, 1, 1]]
    sample = {"net_input": {"src_tokens": out, "src_lengths": torch.tensor([4, 2]),
                            "prev_output_tokens": torch.zeros(2, 8, dtype=torch.long)}, "ntokens": 5}
    assert padding_counts(sample) == (10 + 11, 32)


def test_rounded_lengths_give_fewer_shapes_and_the_same_losses(data_dir, tmp_path):
    """Padding to a multiple of 8 changes no loss (dropout off: padding is masked everywhere) and
    leaves fewer distinct batch shapes; the log reports both figures."""
    runs = {}
    for m in (1, 8):
        save = tmp_path / f"m{m}"
        t = Trainer(make_cfg(data_dir, save, "optimization.max_update=12", "model.dropout=0.0",
                             f"dataset.required_seq_len_multiple={m}"))
        t.run()
        runs[m] = train_records(save)
    one, eight = runs[1], runs[8]
    assert [r["update"] for r in one] == [r["update"] for r in eight] == [2, 4, 6, 8, 10, 12]
    for a, b in zip(one, eight):
        assert abs(a["loss"] - b["loss"]) <= 2e-3  # logged rounded to 3 decimals
    assert all(r["distinct_shapes"] >= 1 for r in one + eight)
    assert all(0.0 <= a["padding"] < b["padding"] < 1.0 for a, b in zip(one, eight))
    shapes = {}
    for m in (1, 8):  # the shapes of every batch of an epoch, at a small token budget
        ds = Trainer(make_cfg(data_dir, tmp_path / "p", f"dataset.required_seq_len_multiple={m}"))._load("train")
        batches = [ds.collate(b) for b in ds.batches(64, seed=1, epoch=1)]
        shapes[m] = {(b["net_input"]["src_tokens"].shape, b["target"].shape) for b in batches}
        if m == 8:
            assert all(s.size(1) % 8 == 0 for b in batches for s in (b["net_input"]["src_tokens"], b["target"]))
    assert len(shapes[8]) <= len(shapes[1]) / 2  # 11 against 22


def test_prefetching_changes_nothing(data_dir, tmp_path):
    """Batches collated ahead in a thread: the same batches in the same order, so the run is
    bit-identical to collating in the loop, through an epoch boundary and a stop mid-epoch."""
    params = {}
    for depth in (0, 3):
        t = Trainer(make_cfg(data_dir, tmp_path / f"d{depth}", "optimization.max_update=23",
                             f"dataset.prefetch={depth}"))
        assert t.prefetch == depth
        t.run()
        params[depth] = t.model.state_dict()
        assert t.epoch > 1 and t.batch_offset > 0  # crossed an epoch, stopped inside the next
    assert all(torch.equal(params[0][k], params[3][k]) for k in params[0])
    a, b = train_records(tmp_path / "d0"), train_records(tmp_path / "d3")
    assert [r["loss"] for r in a] == [r["loss"] for r in b]
    assert all(0.0 <= r["data_wait"] <= 1.0 for r in a + b)  # the share of time the loop waited for batches


def test_prefetcher_order_errors_and_early_close():
    groups = [[np.array([i])] for i in range(20)]
    seen = [int(s[0]["id"]) for s, _ in Prefetcher(lambda b: {"id": torch.tensor(b[0])}, groups, depth=4)]
    assert seen == list(range(20))

    def broken(b):
        if int(b[0]) == 5:
            raise ValueError("bad batch 5")
        return {"id": torch.tensor(b[0])}

    with pytest.raises(ValueError, match="bad batch 5"):
        list(Prefetcher(broken, groups, depth=2))
    early = Prefetcher(lambda b: {"id": torch.tensor(b[0])}, groups, depth=2)
    next(iter(early))
    early.close()  # returns: the thread is stopped while it waits on a full queue
    assert early._thread is None


READ_ROUTES = {
    "t.item()": lambda t: t.item(), "t.tolist()": lambda t: t.tolist(), "t.cpu()": lambda t: t.cpu(),
    "t.numpy()": lambda t: t.numpy(), "np.asarray(t)": np.asarray,
    "torch.equal": lambda t: torch.equal(t, t), "t.equal": lambda t: t.equal(t), "bool(t)": bool,
    "int(t)": int, "float(t)": float, "if t:": lambda t: 1 if t else 0, "list index": lambda t: [0, 1, 2][t],
    "f-string": lambda t: f"{t}", "print": lambda t: print(t), "torch.allclose": lambda t: torch.allclose(t, t),
    "one_hot without a size (a read in C++)": lambda t: torch.nn.functional.one_hot(t.view(1)),
    "a boolean mask": lambda t: t.view(1)[t.view(1) > 0], "t.nonzero()": lambda t: t.nonzero(),
    # a copy off a device (meta stands for it on a CPU: the copy is counted, then fails for want of data)
    "t.to('cpu') from a device": lambda t: _off_meta(lambda m: m.to("cpu")),
    "cpu_tensor.copy_(t) from a device": lambda t: _off_meta(lambda m: torch.ones(1).copy_(m)),
}


def _off_meta(copy) -> None:
    with pytest.raises(NotImplementedError, match="meta"):
        copy(torch.ones(1, device="meta"))


@pytest.mark.parametrize("route", READ_ROUTES)
def test_the_host_read_counter_sees_every_route(route):
    """The counter itself: each way of reading a device value on the host is counted, and work that
    stays on the device is not."""
    t = torch.tensor(1)
    with host_reads() as reads:
        READ_ROUTES[route](t)
    assert reads, f"{route} read the tensor and was not counted"
    with host_reads() as reads:
        u = (t * 2 + torch.ones(3)).sum().to(torch.float64).to("cpu", non_blocking=True)
        torch.where(u > 0, u, -u).clamp_(max=1e9)
    assert reads == []


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_an_update_reads_nothing_from_the_device(data_dir, tmp_path, monkeypatch, precision):
    """Between log lines an update never reads a tensor on the host (on a GPU each read waits for
    the queue to drain): losses, counts, the gradient norm and the skip decision stay on the
    device, with the fused Adam skipping non-finite steps itself. Counted on the CPU by
    ``host_reads`` (every route, tested above), with the encoder's padding mask as on a GPU (where
    it is always passed, not decided by a read)."""
    import seqkit.models.transformer as transformer

    t = Trainer(make_cfg(data_dir, tmp_path / "r", "optimizer.impl=fused", f"common.precision={precision}",
                         "checkpoint.no_save=true"))
    ds = t._load("train")
    samples = [ds.collate(b) for b in ds.batches(200, seed=1, epoch=1)[:3]]
    t.train_step([samples[0]])  # warm-up: the optimizer builds its state
    with host_reads() as reads:
        logs = [t.train_step([{k: v for k, v in samples[1].items() if k != "src_padded"}])]
        # the counter sees reads: without collation's flag, the CPU asks "is there padding?"
        assert reads and set(reads) <= {"__bool__", "aten._local_scalar_dense"}, reads
        reads.clear()
        logs.append(t.train_step([samples[0]]))  # with the flag (src_padded) nothing is asked
        assert reads == []
        monkeypatch.setattr(transformer, "padding_mask", lambda keep, padded=None: keep[:, None, None, :])
        logs.append(t.train_step([samples[2]]))
        assert reads == []
    monkeypatch.undo()
    assert t.num_updates == 4 and all(float(l["stepped"]) == 1.0 for l in logs)
    t.settle()  # one read for all outcomes: nothing was skipped
    assert t.num_updates == 4


def test_resume_with_prefetching_is_bit_identical(data_dir, tmp_path):
    """Stopped mid-epoch with batches collated ahead, resumed: the same weights as a run that
    never stopped and never prefetched (the thread's unused batches are dropped, not counted)."""
    straight = Trainer(make_cfg(data_dir, tmp_path / "a", "optimization.max_update=20", "dataset.prefetch=0"))
    straight.run()
    first = Trainer(make_cfg(data_dir, tmp_path / "b", "optimization.max_update=11", "dataset.prefetch=3"))
    first.run()
    assert first.batch_offset > 0
    resumed = Trainer(make_cfg(data_dir, tmp_path / "b", "optimization.max_update=20", "dataset.prefetch=3"))
    resumed.run()
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert resumed.num_updates == 20 and all(torch.equal(a[k], b[k]) for k in a)


def test_compile_mode_is_checked(data_dir, tmp_path):
    from seqkit.core.config import check_ranges
    from seqkit.core.errors import SeqkitError
    from seqkit.training.compile import _mode

    assert _mode("default") == {} and _mode("reduce-overhead") == {"mode": "reduce-overhead"}
    with pytest.raises(SeqkitError, match="common.compile_mode='fast' is not valid; choose one of: default, "):
        check_ranges(make_cfg(data_dir, tmp_path, "common.compile_mode=fast"))


def test_the_gpu_defaults_pad_lengths_to_8_and_prefetch_4(data_dir, tmp_path, monkeypatch):
    """dataset.required_seq_len_multiple=0 and dataset.prefetch=-1 (the defaults) mean 8 and 4 on a
    GPU, 1 and 0 on a CPU; a value given is kept on both. Without a GPU the trainer is told its device
    is one, to show it pads its batches with what the function picks."""
    import seqkit.training.trainer as trainer
    from seqkit.training.config import DatasetConfig
    from seqkit.training.trainer import device_batching

    assert (DatasetConfig().prefetch, DatasetConfig().required_seq_len_multiple) == (-1, 0)
    assert device_batching(-1, 0, torch.device("cuda")) == device_batching(-1, 0, torch.device("cuda", 1)) == (4, 8)
    assert device_batching(-1, 0, torch.device("cpu")) == (0, 1)
    assert device_batching(2, 16, torch.device("cuda")) == device_batching(2, 16, torch.device("cpu")) == (2, 16)
    assert device_batching(0, 1, torch.device("cuda")) == (0, 1)
    assert Trainer(make_cfg(data_dir, tmp_path / "cpu")).length_multiple == 1
    monkeypatch.setattr(trainer, "device_batching", lambda p, m, device: device_batching(p, m, torch.device("cuda")))
    t = Trainer(make_cfg(data_dir, tmp_path / "gpu", "dataset.prefetch=0"))
    assert (t.prefetch, t.length_multiple) == (0, 8)
    ds = t._load("train")
    batches = [ds.collate(b) for b in ds.batches(64, seed=1, epoch=1)]
    assert all(b["net_input"]["src_tokens"].size(1) % 8 == 0 and b["target"].size(1) % 8 == 0 for b in batches)
