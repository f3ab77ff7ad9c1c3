"""Bottleneck adapters: a small residual MLP after a sublayer of every Transformer layer, trained
while the body stays frozen.

- ``houlsby`` (Houlsby et al. 2019): after self-attention and after the feed-forward block;
- ``pfeiffer`` (Pfeiffer et al. 2021): after the feed-forward block only.

An adapter maps the sublayer's output ``y`` ``(..., C)`` to ``y + up(act(down(y)))`` with a
bottleneck of ``C / reduction_factor`` and sits before the residual connection and its layer norm,
as in Houlsby et al. ``up`` starts at zero, so at step 0 the adapted body computes exactly what the
body did. The adapter hangs on the sublayer it follows (``ffn.adapter``, applied by a forward
hook): the body's code and its weights' names stay as they were.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.models.modules.attention import MultiheadAttention
from seqkit.models.modules.transformer_layers import FeedForward


@dataclass
class AdapterConfig:
    placement: str = arg("houlsby", "houlsby: after each layer's self-attention and feed-forward block; pfeiffer: "
                                    "after the feed-forward block only", choices=("houlsby", "pfeiffer"))
    reduction_factor: int = arg(16, "bottleneck size = the body's hidden size / reduction_factor", ge=1)
    activation: str = arg("relu", "activation inside the bottleneck", choices=("relu", "gelu"))


class Bottleneck(nn.Module):
    """``y (..., C) -> y + up(act(down(y)))``, through ``(..., C / reduction_factor)``."""

    def __init__(self, dim: int, bottleneck: int, activation: str):
        super().__init__()
        self.down = nn.Linear(dim, bottleneck)
        self.up = nn.Linear(bottleneck, dim)
        nn.init.normal_(self.down.weight, std=1e-2)
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.weight)  # the identity at start
        nn.init.zeros_(self.up.bias)
        self.act = F.gelu if activation == "gelu" else F.relu

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return y + self.up(self.act(self.down(y)))


def _after_ffn(module: nn.Module, inputs: Tuple[Any, ...], output: torch.Tensor) -> torch.Tensor:
    return module.adapter(output)


def _after_attention(module: nn.Module, inputs: Tuple[Any, ...], output: Tuple[torch.Tensor, Any]) -> Tuple[torch.Tensor, Any]:
    y, kv = output  # (B, T, C) and the keys/values, which stay as they are
    return module.adapter(y), kv


def adapter_sites(body: nn.Module, placement: str) -> List[Tuple[str, nn.Module]]:
    """The sublayers that get an adapter: every FeedForward, and (houlsby) every self-attention."""
    sites = []
    for name, m in body.named_modules():
        if isinstance(m, FeedForward) or (placement == "houlsby" and isinstance(m, MultiheadAttention)
                                          and m.self_attention):
            sites.append((name, m))
    return sites


def add_adapters(body: nn.Module, cfg: AdapterConfig) -> List[str]:
    """Hang a :class:`Bottleneck` after each site of ``body``; returns the sites' names."""
    sites = adapter_sites(body, cfg.placement)
    if not sites:
        raise SeqkitError(f"model.adapt=adapter needs Transformer layers, and the {type(body).__name__} body has none; "
                          "choose model.adapt=full, frozen, bitfit, prompt or ulmfit")
    for _, m in sites:
        dim = m.fc2.out_features if isinstance(m, FeedForward) else m.embed_dim
        if cfg.reduction_factor > dim:
            raise SeqkitError(f"model.adapter.reduction_factor={cfg.reduction_factor} is out of range: at most the "
                              f"hidden size {dim} (a bottleneck of at least one unit)")
        m.adapter = Bottleneck(dim, dim // cfg.reduction_factor, cfg.activation).to(next(m.parameters()).device)
        m.register_forward_hook(_after_ffn if isinstance(m, FeedForward) else _after_attention)
    return [name for name, _ in sites]
