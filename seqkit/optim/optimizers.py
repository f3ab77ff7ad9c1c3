"""Adam, AdamW (torch, or NVIDIA apex's FusedAdam when importable) and SGD, built as
``OPTIMIZERS.build(cfg, params)``; ``params`` are parameters or param-group dicts (see
:mod:`seqkit.optim.groups`), whose own ``weight_decay`` wins over the config's."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterable, List

import torch

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import OPTIMIZERS

log = logging.getLogger("seqkit.optim")

IMPLS = ("auto", "apex", "fused", "foreach", "single")


@dataclass
class AdamConfig:
    name: str = arg("adam", "registry name")
    lr: float = arg(5e-4, "peak learning rate (schedulers scale it)", gt=0)
    betas: List[float] = arg(help="Adam beta1, beta2", factory=lambda: [0.9, 0.98], ge=0, lt=1)
    eps: float = arg(1e-8, "Adam epsilon", gt=0)
    weight_decay: float = arg(0.0, "L2 penalty added to the gradient (coupled, as in torch Adam)", ge=0)
    impl: str = arg("auto", "auto (torch fused on GPU: it skips non-finite steps without a host read; foreach on "
                            "CPU), apex (NVIDIA apex FusedAdam), fused, foreach or single (plain loop)", choices=IMPLS)


@dataclass
class AdamWConfig(AdamConfig):
    name: str = arg("adamw", "registry name")
    weight_decay: float = arg(0.01, "decoupled weight decay (Loshchilov & Hutter)", ge=0)


@dataclass
class SGDConfig:
    name: str = arg("sgd", "registry name")
    lr: float = arg(0.1, "peak learning rate (schedulers scale it)", gt=0)
    momentum: float = arg(0.0, "momentum factor", ge=0, lt=1)
    nesterov: bool = arg(False, "Nesterov momentum")
    weight_decay: float = arg(0.0, "L2 penalty", ge=0)



def apex_fused_adam() -> Any:
    """NVIDIA apex's FusedAdam class when apex is importable (it is optional, never a dependency)."""
    try:
        from apex.optimizers import FusedAdam
    except Exception:  # ImportError, or an apex built for another torch/CUDA
        return None
    return FusedAdam


def _first_tensor(params: List[Any]) -> Any:
    """The first parameter of a list of parameters or of param-group dicts (None if empty)."""
    for p in params:
        if isinstance(p, dict):
            if p["params"]:
                return p["params"][0]
        else:
            return p
    return None


def choose_impl(impl: str, params: List[Any]) -> str:
    """The implementation ``impl`` resolves to for these parameters (or param-group dicts)."""
    if impl not in IMPLS:
        raise SeqkitError(f"unknown optimizer.impl {impl!r}; valid: {', '.join(IMPLS)}")
    first = _first_tensor(params)
    on_gpu = first is not None and first.device.type == "cuda"
    if impl == "auto":
        # on a GPU torch's fused Adam, not apex's: it skips a non-finite step on the device (it
        # reads found_inf), so an update never waits for the host to look at the gradient norm
        return "fused" if on_gpu else "foreach"
    if impl == "apex" and apex_fused_adam() is None:
        raise SeqkitError("optimizer.impl=apex but NVIDIA apex is not importable (install it from its repository; "
                          "the PyPI package named apex is unrelated), or use optimizer.impl=fused")
    return impl


def _adam(cls: type, cfg: AdamConfig, params: Iterable[Any], decoupled: bool) -> torch.optim.Optimizer:
    params = list(params)
    impl = choose_impl(cfg.impl, params)
    log.info("optimizer %s: %s implementation", cfg.name, {"apex": "NVIDIA apex FusedAdam", "fused": "torch fused",
                                                            "foreach": "torch foreach", "single": "torch for-loop"}[impl])
    kw = dict(lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay)
    if impl == "apex":
        return apex_fused_adam()(params, adam_w_mode=decoupled, **kw)
    flags = {"fused": {"fused": True}, "foreach": {"foreach": True}, "single": {"foreach": False}}[impl]
    return cls(params, **kw, **flags)


@OPTIMIZERS.register("adam", AdamConfig)
def build_adam(cfg: AdamConfig, params: Iterable[Any]) -> torch.optim.Optimizer:
    return _adam(torch.optim.Adam, cfg, params, decoupled=False)


@OPTIMIZERS.register("adamw", AdamWConfig)
def build_adamw(cfg: AdamWConfig, params: Iterable[Any]) -> torch.optim.Optimizer:
    return _adam(torch.optim.AdamW, cfg, params, decoupled=True)


@OPTIMIZERS.register("sgd", SGDConfig)
def build_sgd(cfg: SGDConfig, params: Iterable[Any]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov,
                           weight_decay=cfg.weight_decay)
