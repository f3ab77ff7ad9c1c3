"""What a pretrained body needs to take learned input vectors (prompt tuning, :mod:`seqkit.adapt.prompt`)
and to name its layer groups (ULMFiT, :mod:`seqkit.adapt.ulmfit`).

A prompt of k vectors goes right after the first position (``<s>``, BERT's ``[CLS]``) of every
row, so a sentence read at position 0 is still read there: ``(B, S, C)`` -> ``(B, 1 + k + S - 1, C)``.
The body runs on the longer rows and hands back only the sentence's positions.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import torch
from torch import nn


def insert_prefix(x: torch.Tensor, prefix: Optional[torch.Tensor]) -> torch.Tensor:
    """``x`` ``(B, S, ...)`` with ``prefix`` ``(B, k, ...)`` after its first position -> ``(B, S + k, ...)``."""
    if prefix is None or prefix.size(1) == 0:
        return x
    return torch.cat([x[:, :1], prefix.to(x.dtype), x[:, 1:]], dim=1)


def remove_prefix(x: torch.Tensor, k: int, dim: int = 1) -> torch.Tensor:
    """Inverse of :func:`insert_prefix` along ``dim``: drop the k positions after the first."""
    if k == 0:
        return x
    first, rest = x.narrow(dim, 0, 1), x.narrow(dim, 1 + k, x.size(dim) - 1 - k)
    return torch.cat([first, rest], dim=dim)


def prefix_length(prefix: Optional[torch.Tensor]) -> int:
    return 0 if prefix is None else prefix.size(1)


def groups_by_prefix(module: nn.Module, prefixes: Sequence[Sequence[str]]) -> List[List[str]]:
    """Parameter names of ``module`` in groups, bottom to top: a name joins the first group one of
    whose prefixes it starts with (``"layers.1"`` matches ``layers.1.ffn...`` but not ``layers.10``);
    a name no group claims joins the top group."""
    groups: List[List[str]] = [[] for _ in prefixes]
    for name, _ in module.named_parameters():
        for i, group in enumerate(prefixes):
            if any(name == p or name.startswith(p + ".") or (p.endswith("_") and name.startswith(p)) for p in group):
                groups[i].append(name)
                break
        else:
            groups[-1].append(name)
    return [g for g in groups if g]


def layer_prefixes(stack: str, n: int) -> List[List[str]]:
    """``[[f"{stack}.0"], ..., [f"{stack}.{n-1}"]]``."""
    return [[f"{stack}.{i}"] for i in range(n)]
