"""Transformer-XL's relative positional attention and its layer (Dai et al., 2019, section 3.3).

Each query position i reads keys j of the memory and the segment; its score splits in two terms:

    score(i, j) = (q_i + u) . k_j  +  (q_i + v) . W_R r_{i-j}

``u`` and ``v`` (H, D) are global biases learned per head; ``r_d`` is the sinusoid of distance d
(never an absolute position, so a segment reads a memory computed at any offset), projected per
layer by ``W_R``. The second term is computed for every (query, distance) pair ``(T, K)`` and moved
into (query, key) order by :func:`rel_shift`, Dai's "efficient computation" (appendix B).

Shapes: B batch, T segment length, M memory length, K = M + T keys, C model dim, H heads, D = C / H.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from seqkit.models.modules.dropout import dropout
from seqkit.models.modules.norm import layer_norm
from seqkit.models.modules.positions import sinusoid_table
from seqkit.models.modules.transformer_layers import FeedForward


def rel_shift(x: torch.Tensor) -> torch.Tensor:
    """``x`` ``(B, H, T, K)`` whose column c holds distance ``K - 1 - c`` -> ``(B, H, T, K)`` whose
    column j holds, for query i (the last T of the K positions), distance ``K - T + i - j``. Entries
    above that diagonal (j after i, masked by the caller) hold leftovers of other rows.

    A zero column in front, the (T, K + 1) view read as (K + 1, T), its first row dropped: row i
    then starts ``T - 1 - i`` columns further on, which is the shift each query needs."""
    B, H, T, K = x.shape
    padded = F.pad(x, (1, 0))  # (B, H, T, K + 1)
    return padded.view(B, H, K + 1, T)[:, :, 1:].reshape(B, H, T, K)


def relative_positions(K: int, embed_dim: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Sinusoids of the distances ``K - 1, ..., 1, 0`` ``(K, C)`` (Dai's ``pos_seq``, sines then cosines)."""
    return sinusoid_table(K, embed_dim, "vaswani").flip(0).to(device=device, dtype=dtype)


def causal_memory_mask(T: int, M: int, device: torch.device) -> torch.Tensor:
    """``(T, M + T)`` True where query i (position M + i) may read key j: j <= M + i."""
    return torch.ones(T, M + T, dtype=torch.bool, device=device).tril(M)


class RelativeAttention(nn.Module):
    """Multi-head self-attention over memory + segment with Dai et al.'s relative scores."""

    def __init__(self, embed_dim: int, heads: int, attention_dropout: float):
        super().__init__()
        if embed_dim % heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by heads {heads}")
        self.heads, self.head_dim = heads, embed_dim // heads
        self.qkv_proj = nn.Linear(embed_dim, 3 * embed_dim, bias=False)
        self.r_proj = nn.Linear(embed_dim, embed_dim, bias=False)  # W_R
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.u = nn.Parameter(torch.zeros(heads, self.head_dim))  # content bias
        self.v = nn.Parameter(torch.zeros(heads, self.head_dim))  # position bias
        self.attention_dropout = attention_dropout
        for lin in (self.qkv_proj, self.r_proj, self.out_proj):
            nn.init.xavier_uniform_(lin.weight)

    def scores(self, x: torch.Tensor, pos: torch.Tensor, T: int) -> torch.Tensor:
        """Unmasked, unscaled scores ``(B, H, T, K)`` of the last ``T`` positions of ``x`` ``(B, K, C)``
        over all K, with ``pos`` ``(K, C)`` the sinusoids of distances K-1..0."""
        B, K, _ = x.shape
        H, D = self.heads, self.head_dim
        q, k, _ = self.qkv_proj(x).view(B, K, 3, H, D).unbind(2)  # (B, K, H, D) each
        q = q[:, K - T :]  # (B, T, H, D)
        r = self.r_proj(pos).view(K, H, D)
        ac = torch.einsum("bthd,bkhd->bhtk", q + self.u, k)  # content: (B, H, T, K)
        bd = torch.einsum("bthd,khd->bhtk", q + self.v, r)  # position, by distance: (B, H, T, K)
        return ac + rel_shift(bd)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, T: int) -> torch.Tensor:
        """``x`` ``(B, K, C)``: memory then segment (normalized); ``pos`` ``(K, C)`` -> ``(B, T, C)``."""
        B, K, _ = x.shape
        scores = self.scores(x, pos, T) * self.head_dim**-0.5  # (B, H, T, K)
        scores = scores.float().masked_fill(~causal_memory_mask(T, K - T, x.device), float("-inf"))
        probs = dropout(torch.softmax(scores, dim=-1).to(x.dtype), self.attention_dropout, self.training)
        v = self.qkv_proj(x).view(B, K, 3, self.heads, self.head_dim)[:, :, 2]  # (B, K, H, D)
        out = torch.einsum("bhtk,bkhd->bthd", probs, v).reshape(B, T, -1)
        return self.out_proj(out)


class RelativeLayer(nn.Module):
    """Attention over [memory; segment] and a feed-forward block, each residual (pre- or post-norm)."""

    def __init__(self, embed_dim: int, heads: int, ffn_dim: int, dropout_p: float, attention_dropout: float,
                 activation_dropout: float, activation: str, normalize_before: bool, norm_eps: float = 1e-5):
        super().__init__()
        self.attn = RelativeAttention(embed_dim, heads, attention_dropout)
        self.ffn = FeedForward(embed_dim, ffn_dim, activation, activation_dropout)
        self.attn_norm = layer_norm(embed_dim, "torch", norm_eps)
        self.ffn_norm = layer_norm(embed_dim, "torch", norm_eps)
        self.dropout, self.normalize_before = dropout_p, normalize_before

    def forward(self, x: torch.Tensor, memory: Optional[torch.Tensor], pos: torch.Tensor) -> torch.Tensor:
        """``x`` ``(B, T, C)`` this layer's input; ``memory`` ``(B, M, C)`` this layer's input over
        the previous segments (detached), or None; ``pos`` ``(M + T, C)`` -> ``(B, T, C)``."""
        T = x.size(1)
        full = x if memory is None else torch.cat([memory, x], dim=1)  # (B, K, C)
        y = self.attn(self.attn_norm(full) if self.normalize_before else full, pos, T)
        x = x + dropout(y, self.dropout, self.training)
        if not self.normalize_before:
            x = self.attn_norm(x)
        h = self.ffn(self.ffn_norm(x) if self.normalize_before else x)
        x = x + dropout(h, self.dropout, self.training)
        return x if self.normalize_before else self.ffn_norm(x)
