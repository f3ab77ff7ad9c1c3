"""Dropout that is cheaper on CPU than ``F.dropout``.

On CPU ``F.dropout`` draws its mask with ``bernoulli_``, measured here at 17.6 ms for a
(4096, 256) activation on 2 threads, against 7.3 ms for a mask from ``rand_like`` (the same
distribution). Dropout runs ~17 times per Transformer training step, so this is worth ~10% of a
step. On other devices torch's fused kernel is used.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``."""
    if not training or p <= 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, True)
    keep = torch.rand_like(x) >= p  # (same shape as x) bool
    return x.mul(keep).mul_(1.0 / (1.0 - p))
