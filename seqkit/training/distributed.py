"""Process-group set-up for ``torchrun`` (env:// rendezvous); a single process needs none."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

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
            from seqkit.core.errors import SeqkitError

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


def union_keys(sums: Dict[str, float], info: DistInfo) -> List[str]:
    """The sorted union of every rank's keys, so all ranks reduce the same list in the same order."""
    if info.world_size == 1:
        return sorted(sums)
    gathered: List[Any] = [None] * info.world_size
    dist.all_gather_object(gathered, sorted(sums))
    return sorted(set().union(*gathered))


def cleanup() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


# -- strategies: DDP (default) and FSDP ------------------------------------------------------------

STRATEGIES = ("ddp", "fsdp")


def wrap_model(model: torch.nn.Module, strategy: str, info: DistInfo) -> torch.nn.Module:
    """The module the training forward runs through: the model itself for one process, a
    DistributedDataParallel wrapper, or the model sharded in place by FSDP (``fully_shard`` on
    every layer of every ``nn.ModuleList``, then on the root)."""
    if strategy not in STRATEGIES:
        from seqkit.core.errors import SeqkitError

        raise SeqkitError(f"unknown distributed.strategy {strategy!r}; valid: {', '.join(STRATEGIES)}")
    if info.world_size == 1:
        return model
    if strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for module in list(model.modules()):
            if isinstance(module, torch.nn.ModuleList):
                for layer in module:
                    fully_shard(layer)
        fully_shard(model)
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model, device_ids=[info.device.index] if info.device.type == "cuda" else None)


class grad_sync:
    """Context: skip the gradient all-reduce (DDP ``no_sync``) or reduce-scatter (FSDP) for
    all but the last accumulated batch."""

    def __init__(self, model: torch.nn.Module, enabled: bool):
        self.model, self.enabled = model, enabled
        self.ctx = model.no_sync() if (not enabled and hasattr(model, "no_sync")) else None

    def __enter__(self) -> None:
        if self.ctx is not None:
            self.ctx.__enter__()
        elif hasattr(self.model, "set_requires_gradient_sync"):
            self.model.set_requires_gradient_sync(self.enabled)

    def __exit__(self, *exc: object) -> None:
        if self.ctx is not None:
            self.ctx.__exit__(*exc)


def _options(**kw: bool):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True, **kw)


def full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer):
    """Whole (unsharded) model and optimizer state, keyed by parameter names, on CPU. A collective
    under FSDP: every rank must call it. The same format for every strategy and world size."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    model_state = retie(model, get_model_state_dict(model, options=_options()))
    return model_state, get_optimizer_state_dict(model, optimizer, options=_options())


# the wrappers' own name segments, which state dict keys leave out (torch.compile, FSDP1, checkpointing)
_WRAPPER_NAMES = ("_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module")


def retie(model: torch.nn.Module, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """One tensor for each tied parameter (``share_all_embeddings``, a tied output matrix) in
    ``state``: the CPU copy of a GPU model's state gives every name its own copy, which would save
    a tied table twice (as a model trained on CPU does not) and count it twice."""
    top = getattr(model, "module", model) if type(model).__name__ == "DistributedDataParallel" else model
    names: Dict[int, List[str]] = {}
    for name, p in top.named_parameters(remove_duplicate=False):
        key = ".".join(part for part in name.split(".") if part not in _WRAPPER_NAMES)
        names.setdefault(id(p), []).append(key)
    for group in names.values():
        group = [n for n in group if n in state]
        for n in group[1:]:
            state[n] = state[group[0]]
    return state


def load_full_state(model: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer], model_state: dict,
                    optimizer_state: Optional[dict], strict: bool = True) -> None:
    """Inverse of ``full_state``; every rank reads the whole checkpoint and keeps its shard.
    ``strict=False``: ``model_state`` holds only some entries (a parameter-efficient run's)."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    set_model_state_dict(model, model_state, options=_options(strict=strict))
    if optimizer is not None and optimizer_state is not None:
        if not any(isinstance(v, torch.Tensor) for s in optimizer_state.get("state", {}).values() for v in s.values()):
            # a stateless optimizer (sgd without momentum, pair_sgd): its groups' settings are all
            # there is, and torch's loader, which places state tensors, fails on none
            for group, saved in zip(optimizer.param_groups, optimizer_state.get("param_groups", [])):
                group.update({k: v for k, v in saved.items() if k != "params"})
            return
        # not strict: a parameter that never stepped (a group gradual unfreezing has not reached
        # yet) has no state, as in a run never interrupted
        set_optimizer_state_dict(model, optimizer, optimizer_state, options=_options(strict=False))
