"""XLNet (Yang et al., 2019): a permutation language model with two-stream self-attention over
Transformer-XL's relative positions (kind ``permutation_lm``, task ``permutation_lm``).

tokens -> embedding -> dropout -> L post-norm layers of relative attention and feed-forward, each
run on two streams with the same weights:

- the content stream ``h`` (starting at the token embeddings) at position i reads the content of
  the positions j up to and including i in the factorisation order: ``order(j) <= order(i)``;
- the query stream ``g`` (starting at one learned vector ``w``, the same at every position) at a
  predicted position i reads the content stream of the positions strictly before i in the order,
  ``order(j) < order(i)``, and through the relative positions where i is, but never i's own token.

The query stream's last layer at the N predicted positions (partial prediction: the last 1/K of
each order, :mod:`seqkit.data.permutation`) -> the token embedding's transpose + a bias -> ``(N, V)``
logits, scored by ``criterion=cross_entropy``. The query stream is computed at those N positions
only (XLNet's ``target_mapping``).

Relative positions: the attention of :class:`~seqkit.models.modules.relative_attention.RelativeAttention`
(Dai et al.'s ``(q + u) . k_j + (q + v) . W_R r_{i-j}``, its parameters and their names), over
signed distances: a bidirectional model reads keys on both sides.

Fine-tuning (:mod:`seqkit.models.pretrained`) reads the content stream alone, every real position
reading every other (no order, no query stream), and a sentence at its last token (``</s>``, where
XLNet puts ``<cls>``). Simplified against the paper: no segment memory (each block stands alone),
no relative segment encoding (a pair is one stream), post-norm only, and the context positions
of an order read each other in order (XLNet's code lets them all read each other).

Shapes: B batch, S length, P query slots (the most predicted positions of a row), N predicted
positions, C model dim, H heads, D = C / H, V vocabulary, L layers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from seqkit.core.config import arg
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.models.bert import log_unigram
from seqkit.models.modules.dropout import dropout
from seqkit.models.modules.norm import layer_norm
from seqkit.models.modules.positions import sinusoid_table
from seqkit.models.modules.prefix import groups_by_prefix, layer_prefixes
from seqkit.models.modules.relative_attention import RelativeAttention, relative_positions
from seqkit.models.modules.transformer_layers import ACTIVATIONS, FeedForward


@dataclass
class XLNetConfig:
    name: str = arg("xlnet", "registry name of the model family")
    layers: int = arg(4, "number of Transformer layers", ge=1)
    embed_dim: int = arg(256, "model (embedding) dimension C", gt=0)
    ffn_dim: int = arg(1024, "inner dimension of the feed-forward blocks", gt=0)
    attention_heads: int = arg(4, "attention heads (embed_dim must be divisible by it)", ge=1)
    dropout: float = arg(0.1, "dropout on embeddings, position sinusoids and residual branches", ge=0, lt=1)
    attention_dropout: float = arg(0.1, "dropout on attention weights", ge=0, lt=1)
    activation_dropout: float = arg(0.0, "dropout after the feed-forward activation", ge=0, lt=1)
    activation: str = arg("gelu", "feed-forward activation", choices=tuple(ACTIVATIONS))
    max_positions: int = arg(512, "longest input read (relative positions have no table: a bound on the "
                                  "(S, S) attention)", ge=3)
    unigram_bias_init: bool = arg(True, "start the output bias at the log unigram distribution of the "
                                        "dictionary's counts (else zeros)")
    layer_norm_eps: float = arg(1e-12, "epsilon added to the variance in every LayerNorm (XLNet's 1e-12)", gt=0)


@MODELS.preset("xlnet_mini")
def xlnet_mini() -> XLNetConfig:
    """bert_mini's size, for the WikiText-2 recipes: 4 layers, C 256, 4 heads, ffn 1024."""
    return XLNetConfig()


@MODELS.preset("xlnet_tiny")
def xlnet_tiny() -> XLNetConfig:
    """For tests and CPU smoke runs: 2 layers, C 32, 4 heads, ffn 64, max 64 positions."""
    return dataclasses.replace(xlnet_mini(), layers=2, embed_dim=32, ffn_dim=64, max_positions=64)


@MODELS.preset("xlnet_base")
def xlnet_base() -> XLNetConfig:
    """XLNet-Base's shape (without its memory): 12 layers, C 768, 12 heads, ffn 3072."""
    return dataclasses.replace(xlnet_mini(), layers=12, embed_dim=768, ffn_dim=3072, attention_heads=12)


# -- masks and positions -----------------------------------------------------------------------------
def two_stream_masks(rank: torch.Tensor, real: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``rank`` ``(B, S)`` each position's place in its factorisation order, ``real`` ``(B, S)`` bool
    (not padding) -> ``(content, query)``, each ``(B, S, S)`` bool, ``[b, i, j]`` True where position
    i may read position j: content ``order(j) <= order(i)`` (itself included), query ``order(j) <
    order(i)`` (never its own token); padding is read by no one."""
    key, query = rank[:, None, :], rank[:, :, None]  # (B, 1, S) order(j), (B, S, 1) order(i)
    keep = real[:, None, :]  # (B, 1, S)
    return (key <= query) & keep, (key < query) & keep


def query_slots(target_positions: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``target_positions`` ``(B, S)`` bool -> ``(positions, valid)`` ``(B, P)``: each row's predicted
    positions in increasing order, then filler slots (position 0, ``valid`` False) up to P, the most
    of any row. ``valid`` picks them back in the row-major order of ``target_positions``."""
    count = target_positions.sum(dim=1)  # (B,)
    P = int(count.max()) if count.numel() else 0
    first = torch.argsort((~target_positions).to(torch.int8), dim=1, stable=True)  # predicted first, in order
    positions = first[:, :P]  # (B, P)
    valid = torch.arange(P, device=count.device)[None, :] < count[:, None]  # (B, P)
    return positions.masked_fill(~valid, 0), valid


def signed_distances(S: int, embed_dim: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Sinusoids of the distances ``S - 1, ..., 0, ..., -(S - 1)`` ``(2S - 1, C)``: Transformer-XL's
    (:func:`relative_positions`), then the negative ones (sines change sign, cosines do not)."""
    ahead = sinusoid_table(S, embed_dim, "vaswani")[1:]  # distances 1..S-1
    behind = torch.cat([-ahead[:, : embed_dim // 2], ahead[:, embed_dim // 2 :]], dim=1)  # -1..-(S-1)
    return torch.cat([relative_positions(S, embed_dim, device, dtype), behind.to(device=device, dtype=dtype)])


# -- layers ------------------------------------------------------------------------------------------
class TwoStreamAttention(RelativeAttention):
    """Relative attention whose queries come from either stream, keys and values from the content
    stream, over signed distances; Transformer-XL's parameters (``qkv_proj``, ``r_proj``,
    ``out_proj``, ``u``, ``v``), shared by both streams."""

    def read(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, r: torch.Tensor, at: torch.Tensor,
             mask: torch.Tensor) -> torch.Tensor:
        """``q`` ``(B, P, H, D)`` queries at positions ``at`` ``(B, P)``; ``k``, ``v`` ``(B, S, H, D)``;
        ``r`` ``(2S - 1, H, D)`` the projected distances S-1..-(S-1); ``mask`` ``(B, P, S)`` -> ``(B, P, C)``."""
        B, P, H, D = q.shape
        S = k.size(1)
        ac = torch.einsum("bphd,bshd->bhps", q + self.u, k)  # content: (B, H, P, S)
        by_distance = torch.einsum("bphd,khd->bhpk", q + self.v, r)  # (B, H, P, 2S - 1), column c: distance S-1-c
        column = (S - 1 - at)[:, None, :, None] + torch.arange(S, device=q.device)  # (B, 1, P, S): distance at - j
        bd = by_distance.gather(-1, column.expand(B, H, P, S))  # (B, H, P, S)
        scores = ((ac + bd) * D**-0.5).float().masked_fill(~mask[:, None], float("-inf"))
        probs = dropout(torch.softmax(scores, dim=-1).to(q.dtype), self.attention_dropout, self.training)
        return self.out_proj(torch.einsum("bhps,bshd->bphd", probs, v).reshape(B, P, H * D))

    def forward(self, h: torch.Tensor, g: Optional[torch.Tensor], at: Optional[torch.Tensor], pos: torch.Tensor,
                content_mask: torch.Tensor,
                query_mask: Optional[torch.Tensor]) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """``h`` ``(B, S, C)``, ``g`` ``(B, P, C)`` at positions ``at`` ``(B, P)`` (or None: the content
        stream alone), ``pos`` ``(2S - 1, C)`` -> each stream's attention output."""
        B, S, _ = h.shape
        H, D = self.heads, self.head_dim
        q, k, v = self.qkv_proj(h).view(B, S, 3, H, D).unbind(2)  # (B, S, H, D) each
        r = self.r_proj(pos).view(-1, H, D)  # (2S - 1, H, D)
        everywhere = torch.arange(S, device=h.device).expand(B, S)
        h_out = self.read(q, k, v, r, everywhere, content_mask)
        if g is None:
            return h_out, None
        q_g = self.qkv_proj(g).view(B, g.size(1), 3, H, D)[:, :, 0]  # (B, P, H, D): the query stream's queries
        return h_out, self.read(q_g, k, v, r, at, query_mask)


class XLNetLayer(nn.Module):
    """Two-stream attention, then residual + LayerNorm, feed-forward, residual + LayerNorm (post-norm),
    each applied to both streams with the same weights."""

    def __init__(self, cfg: XLNetConfig):
        super().__init__()
        C = cfg.embed_dim
        self.attn = TwoStreamAttention(C, cfg.attention_heads, cfg.attention_dropout)
        self.ffn = FeedForward(C, cfg.ffn_dim, cfg.activation, cfg.activation_dropout)
        self.attn_norm = layer_norm(C, "torch", cfg.layer_norm_eps)
        self.ffn_norm = layer_norm(C, "torch", cfg.layer_norm_eps)
        self.dropout = cfg.dropout

    def _after_attention(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = self.attn_norm(x + dropout(y, self.dropout, self.training))
        return self.ffn_norm(x + dropout(self.ffn(x), self.dropout, self.training))

    def forward(self, h: torch.Tensor, g: Optional[torch.Tensor], at: Optional[torch.Tensor], pos: torch.Tensor,
                content_mask: torch.Tensor,
                query_mask: Optional[torch.Tensor]) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        y_h, y_g = self.attn(h, g, at, pos, content_mask, query_mask)
        return self._after_attention(h, y_h), (None if g is None else self._after_attention(g, y_g))


class QueryStreamHead(nn.Module):
    """What pretraining alone uses (fine-tuning drops it): the query stream's start ``w`` ``(C,)`` and
    the output layer, the token embedding's transpose + a bias ``(V,)``."""

    def __init__(self, embed: nn.Embedding, bias_init: Optional[torch.Tensor]):
        super().__init__()
        C, V = embed.embedding_dim, embed.num_embeddings
        self.start = nn.Parameter(torch.randn(C) * 0.02)
        self._embed = (embed,)  # a tuple: the embedding stays the model's parameter
        self.bias = nn.Parameter(torch.zeros(V) if bias_init is None else bias_init.detach().clone().reshape(V))

    def forward(self, g: torch.Tensor) -> torch.Tensor:
        return F.linear(g, self._embed[0].weight, self.bias)


@MODELS.register("xlnet", XLNetConfig)
class XLNet(nn.Module):
    """Embedding, two-stream layers, the query-stream head; see the module docstring."""

    kind = "permutation_lm"

    def __init__(self, cfg: XLNetConfig, dictionary: Dictionary):
        super().__init__()
        self.cfg = cfg
        self.pad = dictionary.pad()
        self.embed = nn.Embedding(len(dictionary), cfg.embed_dim, padding_idx=self.pad)
        nn.init.normal_(self.embed.weight, mean=0.0, std=0.02)  # XLNet's initializer range
        with torch.no_grad():
            self.embed.weight[self.pad].zero_()
        self.layers = nn.ModuleList(XLNetLayer(cfg) for _ in range(cfg.layers))
        self.query_head = QueryStreamHead(self.embed, log_unigram(dictionary) if cfg.unigram_bias_init else None)

    @classmethod
    def build(cls, cfg: XLNetConfig, dictionary: Dictionary) -> "XLNet":
        return cls(cfg, dictionary)

    def max_positions(self) -> Tuple[int, int]:
        return self.cfg.max_positions, 1 << 30

    def packing_refusal(self) -> Optional[str]:
        """Why this model cannot train on packed rows (``dataset.pack``)."""
        return "xlnet's relative two-stream attention takes no document masks; train on one block a row"

    def streams(self, src_tokens: torch.Tensor, rank: Optional[torch.Tensor] = None,
                at: Optional[torch.Tensor] = None,
                prefix: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Both streams' last layer: the content stream ``(B, S, C)`` (``(B, k + S, C)`` after a
        ``prefix`` ``(B, k, C)`` of prompt vectors) and, with the order ``rank`` ``(B, S)``, the query
        stream ``(B, P, C)`` at positions ``at`` ``(B, P)``. Without ``rank`` every real position
        reads every other (fine-tuning)."""
        x = self.embed(src_tokens)  # (B, S, C)
        real = src_tokens.ne(self.pad)  # (B, S)
        if prefix is not None:
            x = torch.cat([prefix.to(x.dtype), x], dim=1)
            real = torch.cat([real.new_ones(prefix.shape[:2]), real], dim=1)
        B, S, C = x.shape
        pos = dropout(signed_distances(S, C, x.device, x.dtype), self.cfg.dropout, self.training)  # (2S - 1, C)
        h, g, query_mask = dropout(x, self.cfg.dropout, self.training), None, None
        if rank is None:
            content_mask = real[:, None, :].expand(B, S, S)  # (B, S, S): every real key
        else:
            content_mask, query_all = two_stream_masks(rank, real)  # (B, S, S) each
            query_mask = query_all.gather(1, at[:, :, None].expand(-1, -1, S))  # (B, P, S)
            # a filler slot (position 0, first in every order) reads nothing: let it read every real
            # key, so that no softmax row is empty (its NaN would reach the gradients through 0 x NaN)
            query_mask = query_mask | (~query_mask.any(-1, keepdim=True) & real[:, None, :])
            g = dropout(self.query_head.start.to(x.dtype).expand(B, at.size(1), C), self.cfg.dropout, self.training)
        for layer in self.layers:
            h, g = layer(h, g, at, pos, content_mask, query_mask)
        return h, g

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor, perm_rank: torch.Tensor,
                target_positions: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, V)`` of the predicted positions ``target_positions`` ``(B, S)``, in row-major
        order, from the query stream under the factorisation order ``perm_rank`` ``(B, S)``."""
        at, valid = query_slots(target_positions)  # (B, P) each
        _, g = self.streams(src_tokens, perm_rank, at)
        return self.query_head(g[valid])  # (N, V)

    # -- transfer (seqkit.models.pretrained) ----------------------------------------------------
    transfer_pooling = "last"  # the final </s>, where XLNet reads <cls>
    pretraining_heads = ("query_head",)

    @property
    def transfer_dim(self) -> int:
        return self.cfg.embed_dim

    def transfer_features(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                          segments: Optional[torch.Tensor] = None,
                          prefix: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The content stream ``(B, S, C)``, every position reading every other; a pair is one stream."""
        h, _ = self.streams(src_tokens, prefix=prefix)
        return h if prefix is None else h[:, prefix.size(1) :]

    def transfer_embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed(tokens)

    def transfer_groups(self) -> List[List[str]]:
        """The embedding, then each layer."""
        return groups_by_prefix(self, [["embed"]] + layer_prefixes("layers", len(self.layers)))

    def adapt_refusal(self, cfg: Any) -> Optional[str]:
        """Why ``model.adapt`` (of :mod:`seqkit.models.pretrained`) cannot adapt this body, or None."""
        if cfg.adapt == "adapter" and cfg.adapter.placement == "houlsby":
            return ("model.adapter.placement=houlsby puts an adapter after each self-attention, and the xlnet "
                    "body's relative attention takes none: use model.adapter.placement=pfeiffer (after each "
                    "feed-forward block)")
        return None
