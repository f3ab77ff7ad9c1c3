"""Prepacked Linear weights for seqkit's own search engine on CPU (``packed_weights=true``, fp32).

``F.linear`` hands its weight to the GEMM in PyTorch's plain layout, and the GEMM repacks it into
its blocked layout on every call. A decoder step multiplies a few rows (batch x beam) by every
weight of the decoder and by the output projection, so that repacking is most of the work: on 2
cores (AMD EPYC with AVX-512), the Multi30k model's output projection ``(5, 256) x (256, 8008)`` takes
486 us through ``F.linear`` and 122 us from weights packed once by oneDNN; ``(5, 1024) x (1024,
256)`` 78 against 32 us; and at batch 64 (320 rows) 9.2 against 6.4 ms. Only the smallest layers
(256 x 256: 15 against 23 us at 5 rows) are left alone: below ``MIN_NUMEL`` weights the call
overhead of oneDNN's op is larger than what packing saves.

The packed copy sits beside the plain weight (which stays the module's parameter, so code that
reads ``.weight`` still works). Results equal ``F.linear``'s up to float rounding (another
summation order: ~1e-5), so a rare near-tie in beam search can go the other way.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch
from torch import nn

log = logging.getLogger("seqkit.generate")
MIN_NUMEL = 1 << 17  # pack Linear layers with at least this many weights (256 x 512 and up)


def packing_available() -> bool:
    """True when this torch build has oneDNN's prepacked linear ops (x86 and aarch64 CPU builds)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class PackedLinear(nn.Module):
    """An ``nn.Linear`` for inference only, computing from a oneDNN-prepacked copy of its weight."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias  # shared: state_dict and .weight unchanged
        self._bias = None if linear.bias is None else linear.bias.detach()  # the same storage, no autograd
        with torch.no_grad():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach())  # opaque layout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``(..., in_features)`` -> ``(..., out_features)``; no autograd."""
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.packed, self._bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def pack_linear_weights(model: nn.Module, min_numel: Optional[int] = None) -> int:
    """Swap every fp32 CPU ``nn.Linear`` of ``model`` with at least ``min_numel`` weights for a
    :class:`PackedLinear`, in place (a tied output projection is untied into a Linear sharing the
    embedding's weight first, by models with ``untie_output``). Returns how many were swapped; 0
    where this torch has no oneDNN. ``min_numel`` defaults to :data:`MIN_NUMEL`."""
    if not packing_available():
        log.debug("packed_weights: this torch has no oneDNN linear ops; using F.linear")
        return 0
    min_numel = MIN_NUMEL if min_numel is None else min_numel
    untie = getattr(model, "untie_output", None)
    if untie is not None:
        untie()
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            w = getattr(child, "weight", None)
            if (type(child) is nn.Linear and w.dtype == torch.float32 and w.device.type == "cpu"
                    and w.numel() >= min_numel):
                setattr(parent, name, PackedLinear(child))
                swapped += 1
    log.debug("packed_weights: %d Linear layers prepacked for oneDNN", swapped)
    return swapped
