"""Batches collated ahead of the training loop, in a background thread.

The loop asks for the epoch's update groups in order; a thread collates the next ``depth`` of
them meanwhile (into pinned memory when they go to a GPU, so the copy can run without blocking the
host). The order never changes and collation is a pure function of the indices (every random
transform is seeded by example and epoch), so a run with prefetching is bit-identical to one
without, and exact resume is unchanged. With ``depth`` 0 batches are collated in the loop.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Sequence, Tuple

import numpy as np
import torch

Sample = Dict[str, Any]


def batch_shape(sample: Sample) -> Tuple[Tuple[int, ...], ...]:
    """The shapes of a sample's tensors (net_input and target): what a GPU kernel sees."""
    tensors = [v for _, v in sorted(sample.get("net_input", {}).items()) if isinstance(v, torch.Tensor)]
    if isinstance(sample.get("target"), torch.Tensor):
        tensors.append(sample["target"])
    return tuple(tuple(t.shape) for t in tensors)


def padding_counts(sample: Sample) -> Tuple[int, int]:
    """(padded positions, all positions) of the source tokens ``(B, S)`` against ``src_lengths``,
    plus, for a sequence target ``(B, T)``, its positions past the sentence ends."""
    net = sample.get("net_input", {})
    padded, total = 0, 0
    src, lengths = net.get("src_tokens"), net.get("src_lengths")
    if isinstance(src, torch.Tensor) and isinstance(lengths, torch.Tensor) and src.dim() == 2:
        total += src.numel()
        padded += src.numel() - int(lengths.sum())
    prev = net.get("prev_output_tokens")
    if isinstance(prev, torch.Tensor) and prev.dim() == 2 and "ntokens" in sample:
        total += prev.numel()  # the decoder's positions: one per target token, the rest is padding
        padded += prev.numel() - int(sample["ntokens"])
    return padded, total


def pin(sample: Any) -> Any:
    """The sample with every tensor in page-locked memory (copies to a GPU then need not block)."""
    if isinstance(sample, torch.Tensor):
        return sample.pin_memory()
    if isinstance(sample, dict):
        return {k: pin(v) for k, v in sample.items()}
    return sample


def collate_group(collate: Callable[[np.ndarray], Sample], group: Sequence[np.ndarray], pin_memory: bool) -> Tuple[List[Sample], Dict[str, Any]]:
    """The samples of one update and their shape/padding figures (read on the CPU tensors)."""
    samples = [collate(b) for b in group]
    padded = sum(padding_counts(s)[0] for s in samples)
    total = sum(padding_counts(s)[1] for s in samples)
    stats = {"shapes": [batch_shape(s) for s in samples], "padded": padded, "positions": total}
    if pin_memory:
        samples = [pin(s) for s in samples]
    return samples, stats


class Prefetcher:
    """Iterates over ``groups`` (the update groups of an epoch, each a list of index arrays) as
    collated ``(samples, stats)``, ``depth`` groups ahead in a daemon thread. ``close`` stops the
    thread early (a run that stops mid-epoch); an error in the thread is raised in the loop."""

    def __init__(self, collate: Callable[[np.ndarray], Sample], groups: Sequence[Sequence[np.ndarray]], depth: int,
                 pin_memory: bool = False):
        self.collate, self.groups, self.depth, self.pin_memory = collate, groups, depth, pin_memory
        self._queue: "queue.Queue[Any]" = queue.Queue(maxsize=max(depth, 1))
        self._stop = threading.Event()
        self._thread = None
        if depth > 0:
            self._thread = threading.Thread(target=self._produce, name="seqkit-collate", daemon=True)
            self._thread.start()

    def _produce(self) -> None:
        try:
            for group in self.groups:
                item = collate_group(self.collate, group, self.pin_memory)
                while not self._stop.is_set():
                    try:
                        self._queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
        except BaseException as e:  # handed to the loop, which raises it
            self._queue.put(e)

    def __iter__(self) -> Iterator[Tuple[List[Sample], Dict[str, Any]]]:
        """Each group's ``(samples, stats)``; ``stats["data_wait"]`` is the seconds the loop was
        blocked here for it (collating it, with ``depth`` 0; waiting for the thread, otherwise)."""
        if self._thread is None:
            for group in self.groups:
                t0 = time.perf_counter()
                samples, stats = collate_group(self.collate, group, self.pin_memory)
                stats["data_wait"] = time.perf_counter() - t0
                yield samples, stats
            return
        for _ in range(len(self.groups)):
            t0 = time.perf_counter()
            item = self._queue.get()
            waited = time.perf_counter() - t0
            if isinstance(item, BaseException):
                raise item
            item[1]["data_wait"] = waited
            yield item

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            while self._thread.is_alive():  # unblock a producer waiting on a full queue
                try:
                    self._queue.get(timeout=0.05)
                except queue.Empty:
                    pass
            self._thread = None


def to_device(sample: Any, device: torch.device) -> Any:
    """``sample``'s tensors (also inside a dict) on ``device``, copied without blocking; as it is on a CPU."""
    if device.type == "cpu":
        return sample
    if isinstance(sample, torch.Tensor):
        return sample.to(device, non_blocking=True)
    if isinstance(sample, dict):
        return {k: to_device(v, device) for k, v in sample.items()}
    return sample
