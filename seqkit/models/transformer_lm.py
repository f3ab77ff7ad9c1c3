"""GPT-style decoder-only Transformer language model (Radford et al., 2018, 2019) with presets.

tokens -> embedding (x sqrt(C) with ``scale_embedding``) + positions (learned or sinusoidal) ->
dropout -> L layers of causal self-attention and feed-forward (pre-norm by default, then a final
LayerNorm) -> output layer: the input embedding's transpose (tied, GPT's choice), its own matrix,
or an adaptive softmax (:mod:`seqkit.models.modules.lm_head`), optionally with adaptive input
embeddings that share its weights (:mod:`seqkit.models.modules.adaptive_input`).

A prefix LM (``task.prefix_length``, T5's objective): each row's first positions
(``src_bidirectional``) read one another, the rest read causally; the explicit mask this takes
replaces SDPA's ``is_causal`` (:func:`seqkit.models.modules.kernels.prefix_lm_mask`). Generation
reads the whole prompt so (``prefix_lm``) and then continues causally from the KV cache: a
continuation position reads the prefix's keys and values as the full forward does.

Shapes: B batch, T length, C embed_dim, V vocabulary, H heads, D = C / H, t cached positions.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch
from torch import nn

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.models.base import Cache, LanguageModel
from seqkit.models.modules.adaptive_input import AdaptiveInput, init_shared
from seqkit.models.modules.attention import PRUNED_HEADS_HELP, remove_heads
from seqkit.models.modules.document_masks import document_mask, use_flex
from seqkit.models.modules.dropout import dropout
from seqkit.models.modules.kernels import padding_mask, prefix_lm_mask
from seqkit.models.modules.lm_head import LMHead
from seqkit.models.modules.norm import layer_norm
from seqkit.models.modules.positions import LearnedPositions, SinusoidalPositions
from seqkit.models.modules.prefix import groups_by_prefix, insert_prefix, layer_prefixes, prefix_length, remove_prefix
from seqkit.models.modules.pretrained_embeddings import WordTable, embed_path_arg, freeze_embed_arg
from seqkit.models.modules.transformer_layers import ACTIVATIONS, EncoderLayer


@dataclass
class TransformerLMConfig:
    name: str = arg("transformer_lm", "registry name of the model family")
    layers: int = arg(12, "number of Transformer layers", ge=1)
    embed_dim: int = arg(768, "model (embedding) dimension C", gt=0)
    ffn_dim: int = arg(3072, "inner dimension of the feed-forward blocks", gt=0)
    attention_heads: int = arg(12, "attention heads (embed_dim must be divisible by it)", ge=1)
    dropout: float = arg(0.1, "dropout on embeddings and residual branches", ge=0, lt=1)
    attention_dropout: float = arg(0.1, "dropout on attention weights", ge=0, lt=1)
    activation_dropout: float = arg(0.0, "dropout after the feed-forward activation", ge=0, lt=1)
    activation: str = arg("gelu", "feed-forward activation: relu, gelu, gelu_tanh (tanh approximation, GPT-2's) or "
                                  "silu (Marian's swish)",
                          choices=tuple(ACTIVATIONS))
    normalize_before: bool = arg(True, "pre-norm (LayerNorm before each block, one after the last), as GPT-2")
    learned_positions: bool = arg(True, "learned position embeddings instead of sinusoids")
    max_positions: int = arg(1024, "longest input in tokens (training blocks, prompt plus generated tokens)", gt=0)
    scale_embedding: bool = arg(False, "multiply token embeddings by sqrt(embed_dim) (Vaswani et al.; GPT does not)")
    share_input_output_embed: bool = arg(True, "the output layer is the input embedding's transpose")
    adaptive_softmax_cutoff: List[int] = arg(help="adaptive softmax cluster boundaries, e.g. [2000,10000] (empty: "
                                                  "full softmax; needs share_input_output_embed=false)", factory=list)
    adaptive_softmax_factor: float = arg(4.0, "each adaptive softmax tail cluster's dimension is the previous one's / this",
                                         gt=1)
    adaptive_input: bool = arg(False, "embed tokens in the adaptive softmax's bands with its weights (Baevski & Auli, "
                                      "2019): needs adaptive_softmax_cutoff and share_input_output_embed=false")
    output_bias: bool = arg(False, "a fixed (not trained) bias on the output logits: -inf at the symbols an imported "
                                   "model's vocabulary lacks (seqkit's specials it never predicts)")
    layer_norm_eps: float = arg(1e-5, "epsilon added to the variance in every LayerNorm", gt=0)
    layer_norm_impl: str = arg("auto", "LayerNorm: auto (NVIDIA apex FusedLayerNorm when importable), torch or apex",
                               choices=("auto", "torch", "apex"))
    pruned_heads: Dict[str, List[int]] = arg(help=PRUNED_HEADS_HELP, factory=dict)
    embed_path: str = embed_path_arg()
    freeze_embed: bool = freeze_embed_arg()


@MODELS.preset("gpt2_small")
def gpt2_small() -> TransformerLMConfig:
    """GPT-2 small: 12 layers, C 768, 12 heads, ffn 3072, 1024 positions (124M with a 50k vocabulary)."""
    return TransformerLMConfig()


@MODELS.preset("gpt2_medium")
def gpt2_medium() -> TransformerLMConfig:
    """GPT-2 medium: 24 layers, C 1024, 16 heads, ffn 4096."""
    return dataclasses.replace(gpt2_small(), layers=24, embed_dim=1024, ffn_dim=4096, attention_heads=16)


@MODELS.preset("gpt_mini")
def gpt_mini() -> TransformerLMConfig:
    """For small corpora on a CPU (WikiText-2): 4 layers, C 256, 4 heads, ffn 1024, 512 positions, dropout 0.2."""
    return dataclasses.replace(gpt2_small(), layers=4, embed_dim=256, ffn_dim=1024, attention_heads=4,
                               max_positions=512, dropout=0.2, attention_dropout=0.1)


@MODELS.preset("gpt_tiny")
def gpt_tiny() -> TransformerLMConfig:
    """For tests and CPU smoke runs: 2 layers, C 64, 4 heads, ffn 128, 256 positions."""
    return dataclasses.replace(gpt2_small(), layers=2, embed_dim=64, ffn_dim=128, attention_heads=4, max_positions=256)


@MODELS.register("transformer_lm", TransformerLMConfig)
class TransformerLM(LanguageModel):
    """Decoder-only Transformer; ``build(cfg, dictionary)`` is the registry builder."""

    # True when it trained as a prefix LM (set by the language-modeling task, task.prefix_length > 0):
    # prefill then reads a prompt bidirectionally. Its presence marks a model that takes the mask.
    prefix_lm = False

    def __init__(self, cfg: TransformerLMConfig, dictionary: Dictionary):
        super().__init__()
        self.cfg = cfg
        C, V = cfg.embed_dim, len(dictionary)
        self.pad = dictionary.pad()
        if cfg.adaptive_input:
            if not cfg.adaptive_softmax_cutoff or cfg.share_input_output_embed:
                raise SeqkitError("model.adaptive_input=true shares the adaptive softmax's weights: set "
                                  "model.adaptive_softmax_cutoff (e.g. [2000,10000]) and "
                                  "model.share_input_output_embed=false")
            head = LMHead(C, V, None, cfg.adaptive_softmax_cutoff, cfg.adaptive_softmax_factor)  # first: it embeds
            init_shared(head.adaptive)
            self.embed = AdaptiveInput(head.adaptive)
        else:
            self.embed = nn.Embedding(V, C, padding_idx=self.pad)
            nn.init.normal_(self.embed.weight, mean=0.0, std=C**-0.5)
            with torch.no_grad():
                self.embed.weight[self.pad].zero_()
            head = None  # built after the layers, as before adaptive input (same random init for a seed)
        self.embed_scale = math.sqrt(C) if cfg.scale_embedding else 1.0
        self.positions = (LearnedPositions if cfg.learned_positions else SinusoidalPositions)(cfg.max_positions, C)
        self.layers = nn.ModuleList(
            EncoderLayer(C, cfg.attention_heads, cfg.ffn_dim, cfg.dropout, cfg.attention_dropout,
                         cfg.activation_dropout, cfg.activation, cfg.normalize_before, cfg.layer_norm_impl,
                         cfg.layer_norm_eps)
            for _ in range(cfg.layers))
        self.final_norm = layer_norm(C, cfg.layer_norm_impl, cfg.layer_norm_eps) if cfg.normalize_before else nn.Identity()
        self.head = head if head is not None else LMHead(C, V, self.embed if cfg.share_input_output_embed else None,
                                                         cfg.adaptive_softmax_cutoff, cfg.adaptive_softmax_factor,
                                                         cfg.output_bias)
        remove_heads(self, cfg.pruned_heads)

    @classmethod
    def build(cls, cfg: TransformerLMConfig, dictionary: Dictionary) -> "TransformerLM":
        return cls(cfg, dictionary)

    def max_positions(self) -> Tuple[int, int]:
        return self.cfg.max_positions, self.cfg.max_positions

    def word_embeddings(self) -> Dict[str, WordTable]:
        if self.cfg.adaptive_input:
            raise SeqkitError("model.embed_path: with model.adaptive_input=true the adaptive softmax's bands embed "
                              "the tokens, no one table of embed_dim columns; drop embed_path or adaptive_input")
        return {"embed_path": WordTable(self.embed, tied_output=self.cfg.share_input_output_embed)}

    def features(self, src_tokens: torch.Tensor, prefix: Optional[torch.Tensor] = None,
                 segments: Optional[torch.Tensor] = None, positions: Optional[torch.Tensor] = None,
                 bidirectional: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(B, T)`` -> last layer's normalized output ``(B, T, C)``; position t sees tokens 0..t only
        (and ``prefix`` ``(B, k, C)``, learned vectors read after the first token). Packed rows
        (:class:`seqkit.data.packing.PackedBlockDataset`): ``segments`` ``(B, T)``, each token's block
        in its row (-1 at padding), and ``positions`` ``(B, T)``, its position in that block; a token
        then sees the tokens of its own block up to itself only. A prefix LM's rows: ``bidirectional``
        ``(B,)``, each row's first positions that read one another (the rest read causally)."""
        k = prefix_length(prefix)
        T = src_tokens.size(1) + k
        if segments is not None and k:
            raise SeqkitError("packed rows (dataset.pack) take no learned prefix")
        if bidirectional is not None and (k or segments is not None):
            raise SeqkitError("a prefix LM's rows take neither learned prompt vectors nor packing (dataset.pack)")
        if segments is None and T > self.cfg.max_positions:  # a packed row's positions restart per block
            raise SeqkitError(f"input of {T} tokens exceeds model.max_positions={self.cfg.max_positions}")
        pos = self.positions(T) if positions is None else self.positions.at(positions)  # (T, C) or (B, T, C)
        x = insert_prefix(self.embed_scale * self.embed(src_tokens), prefix) + pos  # (B, T, C)
        x = dropout(x, self.cfg.dropout, self.training)
        # right padding needs no mask: causal attention keeps every real position off the pads after it
        mask = None
        if segments is not None:  # (B, 1, T, T) or a FlexAttention BlockMask on CUDA
            flex = use_flex(segments.device, self.cfg.attention_dropout if self.training else 0.0)
            mask = document_mask(segments, segments, True, flex)
        elif bidirectional is not None:  # (B, 1, T, T): bidirectional over each row's prefix, causal after it
            mask = prefix_lm_mask(bidirectional, T)
        for layer in self.layers:  # (called as modules: seqkit-probe's hooks read each layer's output)
            x = layer(x, mask, is_causal=mask is None)  # (T = 1 alike; a test of T breaks torch.compile's graph)
        return remove_prefix(self.final_norm(x), k)

    def packing_refusal(self) -> Optional[str]:
        """Why this model cannot train on packed rows (``dataset.pack``), or None: it can."""
        return None

    # -- transfer (seqkit.models.pretrained) ----------------------------------------------------
    transfer_pooling = "last"  # the final </s> has read the whole sentence
    pretraining_heads = ("head",)

    @property
    def transfer_dim(self) -> int:
        return self.cfg.embed_dim

    def transfer_features(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                          segments: Optional[torch.Tensor] = None, prefix: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.features(src_tokens, prefix)  # (B, S, C); a pair is read as one stream

    def transfer_embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed_scale * self.embed(tokens)

    def transfer_groups(self) -> List[List[str]]:
        """Embeddings and positions, then each layer, the final norm with the last."""
        prefixes = [["embed", "positions"]] + layer_prefixes("layers", len(self.layers))
        prefixes[-1].append("final_norm")
        return groups_by_prefix(self, prefixes)

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor, target: Optional[torch.Tensor] = None,
                src_segments: Optional[torch.Tensor] = None,
                src_positions: Optional[torch.Tensor] = None,
                src_bidirectional: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits ``(B, T, V)``; packed rows add ``src_segments`` and ``src_positions``, a prefix LM's
        rows ``src_bidirectional`` ``(B,)`` (see :meth:`features`)."""
        x = self.features(src_tokens, segments=src_segments, positions=src_positions,
                          bidirectional=src_bidirectional)  # (B, T, C)
        if target is None:
            return self.head.logits(x)  # (B, T, V)
        return self.head.scored(x, target, self.pad)  # (B, T) log-probs of the targets, 0 at pads

    # -- generation ---------------------------------------------------------------------------
    def prefill(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> Tuple[torch.Tensor, Cache]:
        B, P = src_tokens.shape
        if P > self.cfg.max_positions:
            raise SeqkitError(f"a prompt of {P} tokens exceeds model.max_positions={self.cfg.max_positions}")
        x = self.embed_scale * self.embed(src_tokens) + self.positions(P)  # (B, P, C)
        keep = torch.arange(P, device=x.device)[None, :] < src_lengths[:, None]  # (B, P) real prompt tokens
        # a prefix LM reads the whole prompt both ways (its pads masked off), as it read a block's prefix
        mask = padding_mask(keep) if self.prefix_lm else None
        state: Cache = {}
        for i, layer in enumerate(self.layers):
            x, (state[f"{i}.k"], state[f"{i}.v"]) = layer.forward_kv(
                x, attn_mask=mask, is_causal=P > 1 and not self.prefix_lm)  # (B, H, P, D)
        last = self.final_norm(x)[torch.arange(B, device=x.device), src_lengths - 1]  # (B, C)
        state["keep"] = keep
        return self.head.logits(last), state

    def step(self, tokens: torch.Tensor, state: Cache, positions: torch.Tensor) -> torch.Tensor:
        order = state.pop("order", None)  # (B,) row of the cached keys/values each row continues
        keep = torch.cat([state["keep"], state["keep"].new_ones(tokens.size(0), 1)], dim=1)  # (B, t + 1)
        state["keep"] = keep
        mask = padding_mask(keep)  # (B, 1, 1, t + 1) or None
        x = self.embed_scale * self.embed(tokens) + self.positions.at(positions)[:, None]  # (B, 1, C)
        for i, layer in enumerate(self.layers):
            x, (state[f"{i}.k"], state[f"{i}.v"]) = layer.forward_kv(
                x, attn_mask=mask, kv=(state[f"{i}.k"], state[f"{i}.v"]), kv_order=order)
        return self.head.logits(self.final_norm(x[:, 0]))  # (B, V)

    def reorder_cache(self, cache: Cache, new_order: torch.Tensor, sentences_moved: bool) -> Cache:
        """Keys/values are reordered lazily (the next step selects rows ``order`` while it extends
        them); the small per-row tensors at once."""
        cache = dict(cache)
        pending = cache.get("order")
        cache["order"] = new_order if pending is None else pending.index_select(0, new_order)
        for k in ("keep", "lengths"):
            cache[k] = cache[k].index_select(0, new_order)
        return cache
