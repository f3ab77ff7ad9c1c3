"""LayerNorm from NVIDIA apex (FusedLayerNorm) when importable, else torch's.

apex is optional and never a dependency (the PyPI package named ``apex`` is unrelated). Both
modules hold the same ``weight``/``bias``, so checkpoints move freely between them.
"""

from __future__ import annotations

import functools
import logging

import torch
from torch import nn

from seqkit.core.errors import SeqkitError

log = logging.getLogger("seqkit.models")
IMPLS = ("auto", "torch", "apex")


def apex_fused_layer_norm() -> type | None:
    try:
        from apex.normalization import FusedLayerNorm
    except Exception:  # ImportError, or an apex built for another torch/CUDA
        return None
    return FusedLayerNorm


@functools.lru_cache(maxsize=None)
def _announce(which: str) -> None:
    log.debug("LayerNorm: %s", which)  # which implementation: for whoever debugs a speed, not every run


def layer_norm(dim: int, impl: str = "auto", eps: float = 1e-5) -> nn.Module:
    """A LayerNorm over the last ``dim`` features, by ``impl`` (auto: apex when importable), with
    ``eps`` added to the variance (torch's default 1e-5; BERT's 1e-12)."""
    if impl not in IMPLS:
        raise SeqkitError(f"unknown layer_norm_impl {impl!r}; valid: {', '.join(IMPLS)}")
    fused = apex_fused_layer_norm() if impl in ("auto", "apex") else None
    if impl == "apex" and fused is None:
        raise SeqkitError("layer_norm_impl=apex but NVIDIA apex is not importable; use auto or torch")
    if fused is not None:
        _announce("NVIDIA apex FusedLayerNorm")
        return fused(dim, eps=eps)
    _announce("torch")
    return nn.LayerNorm(dim, eps=eps)


class RMSNorm(nn.Module):
    """Root-mean-square norm (Zhang & Sennrich 2019; T5's LayerNorm): ``x / rms(x) * weight``, no
    mean subtracted and no bias; the mean square is taken in float32, as T5 takes it."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)  # (..., 1)
        return self.weight * (x * torch.rsqrt(variance + self.eps)).to(self.weight.dtype)


def norm(dim: int, impl: str = "auto", eps: float = 1e-5, rms: bool = False) -> nn.Module:
    """:class:`RMSNorm` (``rms``) or :func:`layer_norm`."""
    return RMSNorm(dim, eps) if rms else layer_norm(dim, impl, eps)
