"""Meters and log output: a progress bar on a TTY (rank 0 only), otherwise clean line or JSON
logs, plus a JSON-lines file of every logged record and, on request, TensorBoard event files."""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

import torch

from seqkit.core.errors import SeqkitError
from seqkit.core.io import atomic_write_text

log = logging.getLogger("seqkit.train")

LN2 = math.log(2)


class Meter:
    """Sums of criterion logging outputs over an interval; losses reported per scored target
    (``sample_size``: target tokens, sentences or tagged words) in base 2; ``tokens_per_s`` counts
    ``ntokens`` (target tokens for translation, input tokens for classification and tagging).

    A logging value may be a number or a 0-d tensor left on the device: tensors are kept as they
    are and summed when ``sums`` is first read, all of them in one host read (on a GPU, the one
    synchronization of a log interval)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._sums: Dict[str, float] = {}
        self._pending: Dict[str, List[torch.Tensor]] = {}  # key -> device values not yet read
        self.updates = 0
        self.start = time.perf_counter()

    def add(self, logging_output: Dict[str, Any]) -> None:
        for k, v in logging_output.items():
            if isinstance(v, torch.Tensor):
                self._pending.setdefault(k, []).append(v.detach().reshape(()))
            else:
                self._sums[k] = self._sums.get(k, 0.0) + float(v)

    @property
    def sums(self) -> Dict[str, float]:
        """Every key's sum as a float (reads the pending device values first)."""
        if self._pending:
            for k, v in zip(self._pending, read_floats([torch.stack([t.double() for t in ts]).sum()
                                                        for ts in self._pending.values()])):
                self._sums[k] = self._sums.get(k, 0.0) + v
            self._pending = {}
        return self._sums

    @sums.setter
    def sums(self, value: Dict[str, float]) -> None:
        self._sums, self._pending = dict(value), {}

    def summary(self) -> Dict[str, float]:
        s = self.sums
        ntok = max(s.get("ntokens", 0.0), 1.0)
        size = max(s.get("sample_size", ntok), 1.0)
        out: Dict[str, float] = {}
        if "loss" in s:
            out["loss"] = round(s["loss"] / size / LN2, 3)
        if "nll_loss" in s:
            nll = s["nll_loss"] / size / LN2
            out["nll_loss"] = round(nll, 3)
            out["ppl"] = round(2 ** min(nll, 60.0), 2)
        if "kd_loss" in s:  # distillation: the KL to the teacher
            out["kd_loss"] = round(s["kd_loss"] / size / LN2, 3)
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        out["tokens_per_s"] = round(s.get("ntokens", 0.0) / elapsed, 1)
        return out


class ShapeCounter:
    """The distinct batch shapes of an epoch (each new one costs a GPU kernel choice, a cuDNN plan
    or a compile), the share of padded positions, and ``data_wait``: the share of wall time the
    loop spent blocked waiting for its next collated batch, per log interval and per epoch."""

    def __init__(self) -> None:
        self.shapes: set = set()
        self.epoch_wait, self.epoch_start = 0.0, time.perf_counter()
        self.reset_interval()

    def reset_interval(self) -> None:
        self.padded, self.positions = 0, 0
        self.wait, self.start = 0.0, time.perf_counter()

    def add(self, stats: Dict[str, Any]) -> None:
        """``stats`` of one update from :func:`seqkit.data.prefetch.collate_group` (with the
        ``data_wait`` seconds the prefetcher adds)."""
        self.shapes.update(stats["shapes"])
        self.padded += stats["padded"]
        self.positions += stats["positions"]
        self.wait += stats.get("data_wait", 0.0)
        self.epoch_wait += stats.get("data_wait", 0.0)

    def summary(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"distinct_shapes": len(self.shapes)}
        if self.positions:
            out["padding"] = round(self.padded / self.positions, 4)
        out["data_wait"] = round(self.wait / max(time.perf_counter() - self.start, 1e-9), 4)
        return out

    def epoch_summary(self) -> Dict[str, Any]:
        """:meth:`summary` with ``data_wait`` over the whole epoch so far."""
        elapsed = max(time.perf_counter() - self.epoch_start, 1e-9)
        return {**self.summary(), "data_wait": round(self.epoch_wait / elapsed, 4)}


def read_floats(values: Sequence[torch.Tensor]) -> List[float]:
    """0-d tensors (on any devices) as floats, with one host read for all of them."""
    if not values:
        return []
    device = values[0].device
    return torch.stack([v.detach().to(device=device, dtype=torch.float64).reshape(()) for v in values]).tolist()


def drop_records_after(path: str, num_updates: int) -> int:
    """Rewrite the JSON-lines log ``path`` (atomically) without the records of updates after
    ``num_updates``: a killed run wrote them after the checkpoint a resumed run starts from, and the
    resumed run writes them again. A line the kill cut short goes too. Returns the lines dropped."""
    if not os.path.isfile(path):
        return 0
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    kept = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:  # a torn last line, or an empty one
            continue
        update = rec.get("update") if isinstance(rec, dict) else None
        if isinstance(update, (int, float)) and not isinstance(update, bool) and update > num_updates:
            continue
        kept.append(line)
    if len(kept) < len(lines):
        atomic_write_text(path, "".join(line + "\n" for line in kept))
        log.info("%s: dropped %d record(s) after update %d, the resumed checkpoint's", path,
                 len(lines) - len(kept), num_updates)
    return len(lines) - len(kept)


def _summary_writer_class() -> type:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # torch.utils.tensorboard needs the tensorboard package
        raise SeqkitError("common.tensorboard_logdir needs tensorboard: pip install 'seqkit[tensorboard]'") from None
    return SummaryWriter


class Progress:
    """Writes records as a tqdm bar (TTY), ``key=value`` lines (simple) or JSON lines (json).

    With ``tensorboard_logdir``, train and valid records also go to TensorBoard as scalars against
    the update number, in ``DIR/train`` and ``DIR/valid`` (fairseq's layout)."""

    def __init__(self, fmt: str, log_file: Optional[str], enabled: bool, tensorboard_logdir: Optional[str] = None):
        if fmt == "auto":
            fmt = "tqdm" if sys.stderr.isatty() else "simple"
        if fmt not in ("tqdm", "simple", "json"):
            raise SeqkitError(f"unknown common.log_format {fmt!r}; valid: auto, tqdm, simple, json")
        # checked on every rank, so a missing tensorboard stops all of them alike, before any update
        writer_class = _summary_writer_class() if tensorboard_logdir else None
        self.fmt, self.enabled = fmt, enabled
        self._file = open(log_file, "a", encoding="utf-8") if (enabled and log_file) else None
        self._bar = None
        self._tb_dir = os.path.expanduser(tensorboard_logdir) if (enabled and tensorboard_logdir) else None
        self._tb_class = writer_class
        self._tb_writers: Dict[str, Any] = {}  # tag -> SummaryWriter, opened at its first record

    def start_epoch(self, epoch: int, total: int, done: int) -> None:
        if self.enabled and self.fmt == "tqdm":
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=done, desc=f"epoch {epoch:03d}", leave=False, dynamic_ncols=True)

    def step(self, stats: Dict[str, Any], move: bool = True) -> None:
        """Called every update: moves the bar (no-op for line formats); ``move=False`` only
        refreshes its figures (at a log line, when they are read)."""
        if self._bar is not None:
            if move:
                self._bar.update(1)
            self._bar.set_postfix({k: stats[k] for k in ("loss", "ppl", "lr", "tokens_per_s") if k in stats}, refresh=False)

    def end_epoch(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def record(self, tag: str, stats: Dict[str, Any]) -> None:
        """A log line (and a JSON-lines record) for ``tag`` in train, valid, epoch, info."""
        if not self.enabled:
            return
        rec = {"tag": tag, "time": round(time.time(), 3), **stats}
        if self._file is not None:
            self._file.write(json.dumps(rec) + "\n")
            self._file.flush()
        if self._tb_dir is not None and tag in ("train", "valid") and "update" in stats:
            self._tensorboard(tag, stats)
        if self.fmt == "json":
            print(json.dumps(rec), file=sys.stderr, flush=True)
            return
        line = f"[{tag}] " + " | ".join(f"{k} {v}" for k, v in stats.items())
        if self._bar is not None:
            self._bar.write(line, file=sys.stderr)
        else:
            log.info(line)

    def _tensorboard(self, tag: str, stats: Dict[str, Any]) -> None:
        writer = self._tb_writers.get(tag)
        if writer is None:
            writer = self._tb_writers[tag] = self._tb_class(os.path.join(self._tb_dir, tag))
        step = int(stats["update"])
        for key, value in stats.items():
            if key == "update" or isinstance(value, bool):
                continue
            try:
                writer.add_scalar(key, float(value), step)  # lr is logged as a string
            except (TypeError, ValueError):
                continue
        writer.flush()  # readable by a running tensorboard at once, and nothing lost on a crash

    def close(self) -> None:
        self.end_epoch()
        if self._file is not None:
            self._file.close()
            self._file = None
        for writer in self._tb_writers.values():
            writer.close()
        self._tb_writers = {}
