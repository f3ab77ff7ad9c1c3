"""Transformer encoder and decoder layers, pre-norm or post-norm.

Shapes: B batch, T target length, S source length, C model dim.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from seqkit.models.modules.attention import MultiheadAttention
from seqkit.models.modules.dropout import dropout
from seqkit.models.modules.norm import norm

KV = Tuple[torch.Tensor, torch.Tensor]
# feed-forward activations by config name; gelu_tanh is GPT-2's and BERT-TF's tanh approximation
# (HuggingFace's gelu_new / gelu_pytorch_tanh); silu is Marian's "swish"
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": functools.partial(F.gelu, approximate="tanh"), "silu": F.silu}


@dataclass(frozen=True)
class LayerVariant:
    """What T5 changes in a layer; the defaults are Vaswani et al.'s."""

    rms_norm: bool = False  # RMS norms without bias instead of LayerNorm
    bias: bool = True  # biases on the attention and feed-forward projections
    scaled: bool = True  # attention scores divided by sqrt(head_dim)
    head_dim: int = 0  # D; 0: embed_dim // heads
    gated: bool = False  # feed-forward act(x W0) * (x W1), W0 and W1 stacked in fc1 (T5 v1.1's gated GELU)


class FeedForward(nn.Module):
    """Linear -> activation -> dropout -> linear (gated: fc1 holds both halves ``(2F, C)``; the
    activation of the first times the second)."""

    def __init__(self, embed_dim: int, ffn_dim: int, activation: str, activation_dropout: float, bias: bool = True,
                 gated: bool = False):
        super().__init__()
        self.gated = gated
        self.fc1 = nn.Linear(embed_dim, 2 * ffn_dim if gated else ffn_dim, bias=bias)
        self.fc2 = nn.Linear(ffn_dim, embed_dim, bias=bias)
        self.activation = ACTIVATIONS[activation]
        self.activation_dropout = activation_dropout
        for lin in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(lin.weight)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            gate, linear = self.fc1(x).chunk(2, dim=-1)  # 2 x (..., F)
            h = self.activation(gate) * linear
        else:
            h = self.activation(self.fc1(x))
        return self.fc2(dropout(h, self.activation_dropout, self.training))


class _Residual(nn.Module):
    """``x + dropout(f(norm(x)))`` (pre-norm) or ``norm(x + dropout(f(x)))`` (post-norm)."""

    def __init__(self, embed_dim: int, dropout: float, normalize_before: bool, norm_impl: str = "auto",
                 norm_eps: float = 1e-5, rms: bool = False):
        super().__init__()
        self.norm = norm(embed_dim, norm_impl, norm_eps, rms)
        self.dropout, self.normalize_before = dropout, normalize_before

    def pre(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) if self.normalize_before else x

    def post(self, residual: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = residual + dropout(y, self.dropout, self.training)
        return x if self.normalize_before else self.norm(x)


class EncoderLayer(nn.Module):
    def __init__(self, embed_dim: int, heads: int, ffn_dim: int, dropout: float, attention_dropout: float,
                 activation_dropout: float, activation: str, normalize_before: bool, norm_impl: str = "auto",
                 norm_eps: float = 1e-5, variant: LayerVariant = LayerVariant()):
        super().__init__()
        v = variant
        self.self_attn = MultiheadAttention(embed_dim, heads, attention_dropout, True, v.head_dim, v.bias, v.scaled)
        self.ffn = FeedForward(embed_dim, ffn_dim, activation, activation_dropout, v.bias, v.gated)
        self.attn_res = _Residual(embed_dim, dropout, normalize_before, norm_impl, norm_eps, v.rms_norm)
        self.ffn_res = _Residual(embed_dim, dropout, normalize_before, norm_impl, norm_eps, v.rms_norm)

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor],
                bias: Optional[torch.Tensor] = None, is_causal: bool = False) -> torch.Tensor:
        """``x`` ``(B, S, C)``; ``attn_mask`` ``(B, 1, 1, S)`` True at real tokens (None: no padding);
        ``bias`` ``(1, H, S, S)`` added to the attention scores (relative positions); ``is_causal``:
        each position attends to itself and those before it (a decoder-only stack)."""
        return self.forward_kv(x, attn_mask, is_causal, bias=bias)[0]

    def forward_kv(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None, is_causal: bool = False,
                   kv: Optional[KV] = None, kv_order: Optional[torch.Tensor] = None,
                   bias: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, KV]:
        """The layer as a decoder-only stack uses it: causal self-attention over ``x`` ``(B, T, C)``
        (``is_causal``), or one step ``(B, 1, C)`` after cached keys/values ``kv`` (rows
        ``kv_order``, ``attn_mask`` ``(B, 1, 1, t + 1)``); returns the output and the keys/values."""
        y, new_kv = self.self_attn(self.attn_res.pre(x), attn_mask=attn_mask, is_causal=is_causal, kv=kv,
                                   kv_order=kv_order, bias=bias)
        x = self.attn_res.post(x, y)
        return self.ffn_res.post(x, self.ffn(self.ffn_res.pre(x))), new_kv


class DecoderLayer(nn.Module):
    def __init__(self, embed_dim: int, heads: int, ffn_dim: int, dropout: float, attention_dropout: float,
                 activation_dropout: float, activation: str, normalize_before: bool, norm_impl: str = "auto",
                 norm_eps: float = 1e-5, variant: LayerVariant = LayerVariant()):
        super().__init__()
        v = variant
        self.self_attn = MultiheadAttention(embed_dim, heads, attention_dropout, True, v.head_dim, v.bias, v.scaled)
        self.cross_attn = MultiheadAttention(embed_dim, heads, attention_dropout, False, v.head_dim, v.bias, v.scaled)
        self.ffn = FeedForward(embed_dim, ffn_dim, activation, activation_dropout, v.bias, v.gated)
        self.self_res = _Residual(embed_dim, dropout, normalize_before, norm_impl, norm_eps, v.rms_norm)
        self.cross_res = _Residual(embed_dim, dropout, normalize_before, norm_impl, norm_eps, v.rms_norm)
        self.ffn_res = _Residual(embed_dim, dropout, normalize_before, norm_impl, norm_eps, v.rms_norm)

    def forward(
        self,
        x: torch.Tensor,
        memory_mask: Optional[torch.Tensor],
        cross_kv: Optional[KV] = None,
        self_kv: Optional[KV] = None,
        self_kv_order: Optional[torch.Tensor] = None,
        memory: Optional[torch.Tensor] = None,
        need_weights: bool = False,
        self_bias: Optional[torch.Tensor] = None,
        self_mask: Optional[Any] = None,
    ) -> Tuple[torch.Tensor, KV, Optional[torch.Tensor]]:
        """``x`` ``(B, T, C)``. Training: ``self_kv`` None and causal attention over ``x``.
        Incremental: ``x`` is one step ``(B, 1, C)`` and ``self_kv`` the cached keys/values (of rows
        ``self_kv_order`` ``(B,)``, see :class:`MultiheadAttention`), returned extended by this step.

        ``cross_kv`` ``(G, H, S, D)`` may hold one row per group of ``B // G`` consecutive rows (the
        beams of one sentence, T = 1): each group then attends as ``B // G`` query positions. Without
        ``cross_kv`` they are projected from ``memory`` ``(B, S, C)`` here, inside this layer's forward
        (where FSDP has the layer's weights gathered). With ``need_weights`` the cross-attention
        weights averaged over heads ``(B, T, S)`` come third (else None). ``self_bias`` ``(1, H, T, t)``
        is added to the self-attention scores (relative positions). ``self_mask`` ``(B, 1, T, T)`` or a
        FlexAttention ``BlockMask``: the self-attention's mask in place of the causal one (packed
        rows: causal within each sentence, see :mod:`seqkit.models.modules.document_masks`)."""
        if cross_kv is None:
            cross_kv = self.cross_attn.project_kv(memory)
        # causal whatever T (one position attends to itself either way): a test of T would be a
        # symbolic bool under torch.compile's dynamic shapes, which SDPA cannot take
        y, new_kv = self.self_attn(self.self_res.pre(x), attn_mask=self_mask,
                                   is_causal=self_kv is None and self_mask is None, kv=self_kv,
                                   kv_order=self_kv_order, bias=self_bias)
        x = self.self_res.post(x, y)
        B, T, C = x.shape
        G = cross_kv[0].size(0)
        # (G, B // G, C) when grouped: a group's keys/values are read once, not once per beam
        query = self.cross_res.pre(x).reshape(G, -1, C)
        y, _ = self.cross_attn(query, attn_mask=memory_mask, kv=cross_kv)
        weights = None
        if need_weights:
            weights = self.cross_attn.attention_weights(query, cross_kv[0], memory_mask).view(B, T, -1)  # (B, T, S)
        x = self.cross_res.post(x, y.view(B, T, C))
        return self.ffn_res.post(x, self.ffn(self.ffn_res.pre(x))), new_kv, weights
