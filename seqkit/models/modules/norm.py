"""LayerNorm from NVIDIA apex (FusedLayerNorm) when importable, else torch's.

apex is optional and never a dependency (the PyPI package named ``apex`` is unrelated). Both
modules hold the same ``weight``/``bias``, so checkpoints move freely between them.
"""

from __future__ import annotations

import functools
import logging

from torch import nn

from seqkit.errors import SeqkitError

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
    log.info("LayerNorm: %s", which)


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
