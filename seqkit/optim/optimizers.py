"""Adam, AdamW and SGD from torch, built as ``OPTIMIZERS.build(cfg, params)``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, List

import torch

from seqkit.dataclass_utils import arg
from seqkit.registry import OPTIMIZERS


@dataclass
class AdamConfig:
    name: str = arg("adam", "registry name")
    lr: float = arg(5e-4, "peak learning rate (schedulers scale it)")
    betas: List[float] = arg(help="Adam beta1, beta2", factory=lambda: [0.9, 0.98])
    eps: float = arg(1e-8, "Adam epsilon")
    weight_decay: float = arg(0.0, "L2 penalty added to the gradient (coupled, as in torch Adam)")
    impl: str = arg("foreach", "torch implementation: foreach, fused, or single (plain for-loop)")


@dataclass
class AdamWConfig(AdamConfig):
    name: str = arg("adamw", "registry name")
    weight_decay: float = arg(0.01, "decoupled weight decay (Loshchilov & Hutter)")


@dataclass
class SGDConfig:
    name: str = arg("sgd", "registry name")
    lr: float = arg(0.1, "peak learning rate (schedulers scale it)")
    momentum: float = arg(0.0, "momentum factor")
    nesterov: bool = arg(False, "Nesterov momentum")
    weight_decay: float = arg(0.0, "L2 penalty")


def _impl_kwargs(impl: str) -> dict:
    if impl == "fused":
        return {"fused": True}
    if impl == "foreach":
        return {"foreach": True}
    if impl == "single":
        return {"foreach": False}
    from seqkit.errors import SeqkitError

    raise SeqkitError(f"unknown optimizer.impl {impl!r}; valid: foreach, fused, single")


@OPTIMIZERS.register("adam", AdamConfig)
def build_adam(cfg: AdamConfig, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay,
                            **_impl_kwargs(cfg.impl))


@OPTIMIZERS.register("adamw", AdamWConfig)
def build_adamw(cfg: AdamWConfig, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay,
                             **_impl_kwargs(cfg.impl))


@OPTIMIZERS.register("sgd", SGDConfig)
def build_sgd(cfg: SGDConfig, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov,
                           weight_decay=cfg.weight_decay)
