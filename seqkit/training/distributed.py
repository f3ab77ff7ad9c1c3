"""Process-group set-up for ``torchrun`` (env:// rendezvous); a single process needs none."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import List

import torch
import torch.distributed as dist


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def pick_device(pref: str, local_rank: int) -> torch.device:
    if pref == "cuda" or (pref == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            from seqkit.errors import SeqkitError

            raise SeqkitError("common.device=cuda but no CUDA device is available")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def init(device_pref: str, timeout_minutes: float = 10.0) -> DistInfo:
    """Join the process group torchrun describes in the environment (no-op for one process)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(device_pref, local_rank)
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=datetime.timedelta(minutes=timeout_minutes))
    return DistInfo(rank, world, local_rank, device)


def all_reduce_sum(values: List[float], info: DistInfo) -> List[float]:
    """Element-wise sum over ranks (identity for one process)."""
    if info.world_size == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=info.device)
    dist.all_reduce(t)
    return t.tolist()


def cleanup() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
