"""Dropout that is cheaper on CPU than ``F.dropout``.

On CPU ``F.dropout`` draws its mask with ``bernoulli_``, one float per element. Here the mask
comes from random 16-bit integers, four per 64-bit draw: for a (4096, 256) activation on 2
threads, 13.1 ms for ``F.dropout``, 8.1 ms for a ``rand_like`` mask, 2.5 ms for this one.
Dropout runs ~17 times per Transformer training step. The drop probability is ``p`` rounded to a
multiple of 1/65536, and the scale is the exact inverse of the resulting keep probability, so
the expected output still equals the input. On other devices torch's fused kernel is used, and
under ``torch.compile`` too (dynamo cannot trace ``random_``; Inductor draws its own masks).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_LEVELS = 1 << 16


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> tuple[torch.Tensor, float]:
    """A boolean mask of ``shape``, each element False with probability ``round(p * 65536) / 65536``,
    and the scale ``1 / P(True)`` for the kept elements."""
    drop = round(p * _LEVELS)
    n = shape.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(2**63), None)
    r = words.view(torch.int16)[:n].view(shape)  # uniform over [-32768, 32767]
    return r >= drop - _LEVELS // 2, _LEVELS / (_LEVELS - drop)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``."""
    if not training or p <= 0.0:
        return x
    if x.device.type != "cpu" or torch.compiler.is_compiling() or p >= 1.0 or round(p * _LEVELS) >= _LEVELS:
        return F.dropout(x, p, True)
    keep, scale = keep_mask(x.shape, p, x.device)
    return x.mul(keep).mul_(scale)
