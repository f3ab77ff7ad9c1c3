"""Multi-head attention over ``torch.nn.functional.scaled_dot_product_attention``.

Shapes: B batch, T query length, S key length, C model dim, H heads, D = C // H.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from seqkit.models.modules.document_masks import flex_attend, is_block_mask


class MultiheadAttention(nn.Module):
    """Self-attention (one fused q/k/v projection) or cross-attention (q and a fused k/v projection)."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, self_attention: bool = True,
                 head_dim: int = 0, bias: bool = True, scaled: bool = True):
        """``head_dim``: D (0: C // H; T5's d_kv may make H * D differ from C); ``bias``: biases on
        the projections (T5 has none); ``scaled``: scores divided by sqrt(D) (T5 folds that into its
        initialization)."""
        super().__init__()
        if not head_dim and embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, head_dim or embed_dim // num_heads
        inner = num_heads * self.head_dim  # H * D
        self.scale = self.head_dim**-0.5 if scaled else 1.0
        self.sdpa_scale = None if scaled else 1.0  # None: SDPA's own 1 / sqrt(D)
        self.dropout = dropout
        self.self_attention = self_attention
        if self_attention:
            self.qkv_proj = nn.Linear(embed_dim, 3 * inner, bias=bias)
        else:
            self.q_proj = nn.Linear(embed_dim, inner, bias=bias)
            self.kv_proj = nn.Linear(embed_dim, 2 * inner, bias=bias)
        self.out_proj = nn.Linear(inner, embed_dim, bias=bias)
        # (H,) or (B, H) multiplies each head's output (of each sentence) when set: the mask whose
        # gradient measures a head's importance (seqkit/analysis/prune.py); None in training and inference
        self.head_mask: Optional[torch.Tensor] = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.qkv_proj,) if self.self_attention else (self.q_proj, self.kv_proj):
            # xavier over each of q/k/v separately, as for three (C, C) matrices
            nn.init.xavier_uniform_(lin.weight, gain=2**-0.5)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)
        nn.init.xavier_uniform_(self.out_proj.weight)
        if self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)

    def prune_heads(self, heads: List[int]) -> None:
        """Remove heads (indices into the current ones) from the projections: their rows of the
        q/k/v projections and their columns of the output projection (Michel et al., 2019)."""
        if not heads:
            return
        drop = set(heads)
        if len(drop) >= self.num_heads or min(drop) < 0 or max(drop) >= self.num_heads:
            raise ValueError(f"cannot remove heads {sorted(drop)} of {self.num_heads}")
        H, D = self.num_heads, self.head_dim
        kept = torch.tensor([h for h in range(H) if h not in drop])
        # (H' * D,): the kept heads' rows of one of q, k or v
        cols = (kept[:, None] * D + torch.arange(D)).reshape(-1).to(self.out_proj.weight.device)
        if self.self_attention:
            self.qkv_proj = _rows(self.qkv_proj, torch.cat([cols + i * H * D for i in range(3)]))
        else:
            self.q_proj = _rows(self.q_proj, cols)
            self.kv_proj = _rows(self.kv_proj, torch.cat([cols, cols + H * D]))
        w = self.out_proj.weight
        out = nn.Linear(len(cols), self.embed_dim, bias=self.out_proj.bias is not None, device=w.device, dtype=w.dtype)
        with torch.no_grad():
            out.weight.copy_(self.out_proj.weight[:, cols])
            if out.bias is not None:
                out.bias.copy_(self.out_proj.bias)
        self.out_proj = out
        self.num_heads = len(kept)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, D)

    def project_kv(self, memory: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention keys and values of ``memory`` ``(B, S, C)`` -> 2 x ``(B, H, S, D)``."""
        B, S, _ = memory.shape
        k, v = self.kv_proj(memory).view(B, S, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        return k, v

    def attention_weights(self, x: torch.Tensor, keys: torch.Tensor, attn_mask: Optional[torch.Tensor]) -> torch.Tensor:
        """Cross-attention weights of queries ``x`` ``(B, T, C)`` over ``keys`` ``(B, H, S, D)``,
        averaged over heads -> ``(B, T, S)`` (for alignments: SDPA does not return its weights)."""
        q = self._heads(self.q_proj(x))  # (B, H, T, D)
        scores = torch.matmul(q, keys.transpose(-1, -2)) * self.scale  # (B, H, T, S)
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        return torch.softmax(scores.float(), dim=-1).mean(dim=1)

    def forward(
        self,
        x: torch.Tensor,
        memory: Optional[torch.Tensor] = None,
        attn_mask: Optional[torch.Tensor] = None,
        is_causal: bool = False,
        kv: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
        kv_order: Optional[torch.Tensor] = None,
        bias: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        """Attend from ``x`` ``(B, T, C)``.

        Self-attention: keys/values from ``x``; with ``kv`` (cached keys/values of earlier steps,
        each ``(B0, H, t, D)``) the new ones are appended to rows ``kv_order`` ``(B,)`` of them (all
        rows, B0 = B, when None). Cross-attention: keys/values from
        ``memory`` ``(B, S, C)`` or precomputed ``kv``. ``attn_mask`` is boolean, True = attend,
        broadcastable to ``(B, H, T, S)``; ``bias`` ``(1, H, T, S)`` is added to the scores (T5's
        relative positions; causal masking is then folded into it). Returns the output ``(B, T, C)``
        and the keys/values used.
        """
        B, T, C = x.shape
        if self.self_attention:
            # one view of the fused projection (3 views of B, H, T, D), not a chunk and three reshapes
            q, k, v = self.qkv_proj(x).view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
            if kv is not None:
                k, v = _append(kv[0], k, kv_order), _append(kv[1], v, kv_order)
        else:
            q = self._heads(self.q_proj(x))
            k, v = kv if kv is not None else self.project_kv(memory)
        if bias is not None:  # one float mask: the bias, -inf where the boolean mask says no
            if is_causal:
                bias = bias.masked_fill(torch.ones(T, k.size(2), dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            attn_mask = bias if attn_mask is None else bias.masked_fill(~attn_mask, float("-inf"))
            is_causal = False
        out = attend(q, k, v, attn_mask, self.dropout if self.training else 0.0, is_causal, self.sdpa_scale)  # (B, H, T, D)
        if self.head_mask is not None:  # (H,) or (B, H)
            rows = -1 if self.head_mask.dim() == 2 else 1
            out = out * self.head_mask.view(rows, self.num_heads, 1, 1).to(out.dtype)
        out = out.transpose(1, 2).reshape(B, T, -1)
        return self.out_proj(out), (k, v)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Optional[torch.Tensor], dropout_p: float,
           is_causal: bool, scale: Optional[float] = None) -> torch.Tensor:
    """``F.scaled_dot_product_attention``; under bf16 autocast on CPU with autograd recording, in fp32.

    torch's fused CPU attention has a slow bf16 backward: on the Multi30k recipe model (2 cores,
    AMD EPYC with AVX512-BF16) its 9 calls per update took 277 ms in bf16 against 46 ms in fp32,
    a quarter of a bf16 update; measured again with torch 2.13, 45 updates of 4,096 tokens ran at
    439 tokens/s with bf16 attention against 4,172-4,333 with this detour. The output is cast back
    to bf16 for the next Linear. A FlexAttention ``BlockMask`` (packed rows on CUDA, see
    :mod:`seqkit.models.modules.document_masks`) goes to ``flex_attention``, which takes no dropout."""
    if is_block_mask(attn_mask):
        return flex_attend(q, k, v, attn_mask, scale)
    if q.dtype == torch.bfloat16 and q.device.type == "cpu" and q.requires_grad and torch.is_grad_enabled():
        with torch.autocast("cpu", enabled=False):
            return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=attn_mask,
                                                  dropout_p=dropout_p, is_causal=is_causal, scale=scale).to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                          scale=scale)


PRUNED_HEADS_HELP = ("attention heads removed by seqkit-prune (written there; leave empty): attention module name "
                     "-> indices of its original heads")


def remove_heads(model: nn.Module, pruned: Dict[str, List[int]]) -> None:
    """Remove the heads ``pruned`` names from a freshly built ``model``: the model a pruned
    checkpoint describes, ready for its weights."""
    from seqkit.core.errors import SeqkitError

    for name, heads in pruned.items():
        try:
            module = model.get_submodule(name)
        except AttributeError:
            module = None
        if not isinstance(module, MultiheadAttention):
            raise SeqkitError(f"model.pruned_heads: {name!r} is not an attention module of this model")
        try:
            module.prune_heads(list(heads))
        except ValueError as e:
            raise SeqkitError(f"model.pruned_heads: {name}: {e}") from None


def _rows(lin: nn.Linear, rows: torch.Tensor) -> nn.Linear:
    """A copy of ``lin`` keeping only output ``rows``."""
    w = lin.weight
    new = nn.Linear(lin.in_features, len(rows), bias=lin.bias is not None, device=w.device, dtype=w.dtype)
    with torch.no_grad():
        new.weight.copy_(lin.weight[rows])
        if lin.bias is not None:
            new.bias.copy_(lin.bias[rows])
    return new


def _append(past: torch.Tensor, new: torch.Tensor, order: Optional[torch.Tensor]) -> torch.Tensor:
    """Rows ``order`` of ``past`` ``(B0, H, t, D)`` extended by ``new`` ``(B, H, T, D)`` -> ``(B, H, t+T, D)``.

    Beam search reorders the cache every step. ``index_select`` then ``cat`` measured faster than
    selecting straight into a slice of the extended tensor (3.8 against 6.1 us for a (5, 4, 15, 64)
    cache on one core: ``index_select`` into a strided ``out`` takes a slow path), in fewer ops.
    """
    return torch.cat([past if order is None else past.index_select(0, order), new], dim=2)


def uses_sdpa(model: nn.Module) -> bool:
    """Whether ``model`` holds an attention module that runs ``scaled_dot_product_attention``
    (seqkit's own, or torch's): only then do ``common.attention_kernels`` matter to it."""
    return any(isinstance(m, (MultiheadAttention, nn.MultiheadAttention)) for m in model.modules())
