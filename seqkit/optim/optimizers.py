"""Adam, AdamW (torch, or NVIDIA apex's FusedAdam when importable), SGD and SparseAdam, built as
``OPTIMIZERS.build(cfg, params)``; ``params`` are parameters or param-group dicts (see
:mod:`seqkit.optim.groups`), whose own ``weight_decay`` wins over the config's.

A parameter with ``sparse_grad = True`` (set by a model whose table gets sparse gradients:
word2vec's) takes only sgd without momentum or decay, or sparse_adam, which takes nothing else:
a mismatch is one line here, not an error inside the first update."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Tuple

import torch

from seqkit.core import rowkernels
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


@dataclass
class PairSGDConfig:
    name: str = arg("pair_sgd", "registry name")
    lr: float = arg(0.025, "peak learning rate (schedulers scale it; gensim's and the C code's alpha)", gt=0)


@dataclass
class SparseAdamConfig:
    name: str = arg("sparse_adam", "registry name")
    lr: float = arg(1e-3, "peak learning rate (schedulers scale it)", gt=0)
    betas: List[float] = arg(help="Adam beta1, beta2", factory=lambda: [0.9, 0.999], ge=0, lt=1)
    eps: float = arg(1e-8, "Adam epsilon", gt=0)
    impl: str = arg("auto", "native (compiled row loops, seqkit.core.rowkernels: float32 tables on a CPU), torch "
                            "(row gathers and scatters), auto (native where it can run, else torch)",
                    choices=("auto", "native", "torch"))


def _params_of(params: List[Any]) -> List[Any]:
    """The tensors of a list of parameters or of param-group dicts."""
    return [t for p in params for t in (p["params"] if isinstance(p, dict) else [p])]


def check_sparse(name: str, params: List[Any], takes_sparse: bool, takes_dense: bool) -> None:
    """Refuse parameters whose gradients optimizer ``name`` cannot take (``sparse_grad``: sparse)."""
    sparse = [bool(getattr(t, "sparse_grad", False)) for t in _params_of(params)]
    if any(sparse) and not takes_sparse:
        raise SeqkitError(f"optimizer={name} cannot take the sparse gradients of this model's tables "
                          "(model.sparse=true): use optimizer=sgd (no momentum or weight_decay) or "
                          "optimizer=sparse_adam, or model.sparse=false")
    if not all(sparse) and not takes_dense:
        raise SeqkitError(f"optimizer={name} takes sparse gradients only (a word2vec model with model.sparse=true); "
                          "this model's are dense: use optimizer=adam")


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
    check_sparse(cfg.name, params, takes_sparse=False, takes_dense=True)
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
    params = list(params)
    check_sparse("sgd with momentum or weight_decay", params, not (cfg.momentum or cfg.weight_decay), True)
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov,
                           weight_decay=cfg.weight_decay)


class InForwardSGD(torch.optim.Optimizer):
    """SGD that the model applies itself while it scores a batch: word2vec's per-prediction update
    (the C code's and gensim's), each prediction's gradient applied to its rows before the next
    prediction is scored (``seqkit.core.rowkernels.pair_sgd``). The trainer hands the model each
    update's learning rate (``model.update_in_forward``) and runs no backward pass; :meth:`step`
    has nothing left to do."""

    in_forward = True

    def __init__(self, params: Iterable[Any], lr: float):
        super().__init__(params, {"lr": lr})

    def step(self, closure: Any = None) -> None:
        return None


@OPTIMIZERS.register("pair_sgd", PairSGDConfig)
def build_pair_sgd(cfg: PairSGDConfig, params: Iterable[Any]) -> torch.optim.Optimizer:
    """Per-prediction SGD inside the forward pass (:class:`InForwardSGD`): compiled loops only."""
    rowkernels.require("optimizer=pair_sgd", instead="optimizer=sgd or sparse_adam")
    return InForwardSGD(list(params), lr=cfg.lr)


build_pair_sgd.in_forward = InForwardSGD.in_forward  # what settings can read before the optimizer is built


class RowAdam(torch.optim.Optimizer):
    """Lazy Adam on sparse row gradients: the moments of the rows a step's gradient holds are
    updated, the other rows wait; the same arithmetic as ``torch.optim.SparseAdam`` (one step count
    per parameter for the bias corrections, eps added to the uncorrected root), written with row
    gathers and scatters instead of sparse-tensor algebra (faster on a CPU: word2vec's updates,
    tests/test_word2vec.py compares the two), a block of ``ROWS`` rows at a time. A dense gradient
    touches every row."""

    ROWS = 2048  # rows updated at once: their moments and update (2048 x D floats each) stay in cache

    def __init__(self, params: Iterable[Any], lr: float, betas: Tuple[float, float], eps: float,
                 impl: str = "torch"):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps))
        self.impl = impl  # auto, native or torch (SparseAdamConfig.impl)

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    grad = p.grad.coalesce()  # one row per index (a no-op when it is so already)
                    rows, g = grad.indices()[0], grad.values()  # (U,), (U, D)
                else:  # every row touched (checkpoint loading initializes the state with a zero step)
                    rows, g = torch.arange(p.size(0), device=p.device), p.grad
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t = float(state["step"])
                size = group["lr"] * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
                if self._native(p, state):
                    rowkernels.row_adam(p, state["exp_avg"], state["exp_avg_sq"], rows, g, beta1, beta2, group["eps"],
                                        size)
                    continue
                for a in range(0, rows.numel(), self.ROWS):  # a block's moments stay in cache through its update
                    self._update(p, state, rows[a:a + self.ROWS], g[a:a + self.ROWS], beta1, beta2, group["eps"], size)

    def _native(self, p: torch.Tensor, state: Dict[str, Any]) -> bool:
        """Whether this step runs the compiled loop (``impl``; native refuses what it cannot run)."""
        if self.impl == "torch":
            return False
        fits = rowkernels.fits(p, state["exp_avg"], state["exp_avg_sq"]) and p.is_contiguous() \
            and state["exp_avg"].is_contiguous() and state["exp_avg_sq"].is_contiguous()
        if self.impl == "native" and not fits:
            raise SeqkitError(f"optimizer.impl=native steps contiguous float32 tables on a CPU; this one is "
                              f"{p.dtype} on {p.device.type}: use optimizer.impl=auto")
        return fits and rowkernels.available()

    @staticmethod
    def _update(p: torch.Tensor, state: Dict[str, Any], rows: torch.Tensor, g: torch.Tensor, beta1: float,
                beta2: float, eps: float, size: float) -> None:
        """Adam on rows ``rows`` ``(U,)`` of ``p`` with their gradient ``g`` ``(U, D)``."""
        m = state["exp_avg"].index_select(0, rows).lerp_(g, 1 - beta1)  # (U, D)
        v = state["exp_avg_sq"].index_select(0, rows).mul_(beta2).addcmul_(g, g, value=1 - beta2)
        state["exp_avg"].index_copy_(0, rows, m)
        state["exp_avg_sq"].index_copy_(0, rows, v)
        p.index_add_(0, rows, m.div_(v.sqrt_().add_(eps)).mul_(-size))  # index_add_'s alpha= is 3x slower on a CPU


@OPTIMIZERS.register("sparse_adam", SparseAdamConfig)
def build_sparse_adam(cfg: SparseAdamConfig, params: Iterable[Any]) -> torch.optim.Optimizer:
    """Lazy Adam: moments updated on the rows a batch touched only (:class:`RowAdam`)."""
    params = list(params)
    check_sparse(cfg.name, params, takes_sparse=True, takes_dense=False)
    if cfg.impl == "native":
        rowkernels.require("optimizer.impl=native")
    return RowAdam(params, lr=cfg.lr, betas=(cfg.betas[0], cfg.betas[1]), eps=cfg.eps, impl=cfg.impl)
