"""Transformer encoder-decoder (Vaswani et al., 2017) with named presets.

Shapes: B batch, S source length, T target length, C embed_dim, V vocabulary, L layers.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.models.base import STATIC, Cache, EncoderDecoderModel, EncoderOut
from seqkit.models.modules.attention import PRUNED_HEADS_HELP, remove_heads
from seqkit.models.modules.document_masks import document_mask, use_flex
from seqkit.models.modules.dropout import dropout
from seqkit.models.modules.kernels import padding_mask
from seqkit.models.modules.norm import norm
from seqkit.models.modules.positions import SINUSOIDS, LearnedPositions, RelativePositionBias, SinusoidalPositions
from seqkit.models.modules.prefix import groups_by_prefix, insert_prefix, layer_prefixes, prefix_length
from seqkit.models.modules.pretrained_embeddings import WordTable, embed_path_arg, freeze_embed_arg
from seqkit.models.modules.transformer_layers import ACTIVATIONS, DecoderLayer, EncoderLayer, LayerVariant


@dataclass
class TransformerConfig:
    name: str = arg("transformer", "registry name of the model family")
    encoder_layers: int = arg(6, "number of encoder layers", ge=1)
    decoder_layers: int = arg(6, "number of decoder layers", ge=1)
    embed_dim: int = arg(512, "model (embedding) dimension C", gt=0)
    ffn_dim: int = arg(2048, "inner dimension of the feed-forward blocks", gt=0)
    attention_heads: int = arg(8, "attention heads (embed_dim must be divisible by it)", ge=1)
    dropout: float = arg(0.1, "dropout on embeddings and residual branches", ge=0, lt=1)
    attention_dropout: float = arg(0.0, "dropout on attention weights", ge=0, lt=1)
    activation_dropout: float = arg(0.0, "dropout after the feed-forward activation", ge=0, lt=1)
    activation: str = arg("relu", "feed-forward activation: relu, gelu, gelu_tanh (tanh approximation, GPT-2's) or "
                                  "silu (Marian's swish)",
                          choices=tuple(ACTIVATIONS))
    normalize_before: bool = arg(False, "pre-norm (LayerNorm before each block) instead of post-norm")
    learned_positions: bool = arg(False, "learned position embeddings instead of sinusoids")
    sinusoids: str = arg("tensor2tensor", "sinusoid frequencies 10000^(-i/d): tensor2tensor (d = C/2 - 1; fairseq's) or "
                                          "vaswani (d = C/2; Marian's)", choices=SINUSOIDS)
    position_offset: int = arg(0, "table rows before position 0's (BART's learned tables and fairseq's sinusoids "
                                  "start at row 2, after the padding index)", ge=0)
    embed_layer_norm: bool = arg(False, "a LayerNorm over embeddings + positions in the encoder and decoder (BART's "
                                        "layernorm_embedding)")
    max_source_positions: int = arg(1024, "longest source (tokens, eos included)", gt=0)
    max_target_positions: int = arg(1024, "longest target (tokens, eos included)", gt=0)
    share_all_embeddings: bool = arg(False, "one embedding matrix for source and target, and the output with "
                                            "share_decoder_input_output_embed (needs a joined dictionary)")
    share_decoder_input_output_embed: bool = arg(True, "tie the decoder's input embedding and output projection")
    no_scale_embedding: bool = arg(False, "do not multiply embeddings by sqrt(embed_dim)")
    output_bias: bool = arg(False, "a fixed (not trained) bias on the output logits (BART's and Marian's "
                                   "final_logits_bias; -inf at the symbols an imported vocabulary lacks)")
    decoder_start: str = arg("bos", "the token the decoder reads first: bos (seqkit's), eos (fairseq's and BART's) or "
                                    "pad (Marian's and T5's); tasks and search start targets with <s>, the model "
                                    "reads this in its place", choices=("bos", "eos", "pad"))
    layer_norm_eps: float = arg(1e-5, "epsilon added to the variance in every LayerNorm", gt=0)
    rms_norm: bool = arg(False, "RMS norms without bias instead of LayerNorm (T5's)")
    bias: bool = arg(True, "biases on the attention and feed-forward projections (T5 has none)")
    scale_attention: bool = arg(True, "divide attention scores by sqrt(head_dim) (T5 folds it into its weights)")
    head_dim: int = arg(0, "dimension of each attention head (0: embed_dim / attention_heads; T5's d_kv)", ge=0)
    gated_ffn: bool = arg(False, "gated feed-forward: act(x W0) * (x W1) (T5 v1.1's gated GELU)")
    relative_buckets: int = arg(0, "T5's relative positions instead of position embeddings: this many distance "
                                   "buckets of a learned per-head bias on the attention scores (0: none)", ge=0)
    relative_max_distance: int = arg(128, "relative positions: the distance the last bucket starts at", gt=1)
    scale_output: bool = arg(False, "multiply the decoder's output by embed_dim^-0.5 before the output projection "
                                    "(T5 with tied embeddings)")
    layer_norm_impl: str = arg("auto", "LayerNorm: auto (NVIDIA apex FusedLayerNorm when importable), torch or apex",
                               choices=("auto", "torch", "apex"))
    pruned_heads: Dict[str, List[int]] = arg(help=PRUNED_HEADS_HELP, factory=dict)
    encoder_embed_path: str = embed_path_arg("encoder_embed_path")
    decoder_embed_path: str = embed_path_arg("decoder_embed_path")
    freeze_embed: bool = freeze_embed_arg()
    num_langs: int = arg(0, "language embeddings (MASS, XLM-initialised translation): a learned vector per language added "
                            "to token + position embeddings; a batch may name each sentence's language (src_langs, "
                            "tgt_langs), else the encoder adds row 0 and the decoder row 1 (translation: source, "
                            "target); 0: none", ge=0)
    init_from: str = arg("", "a pretraining checkpoint (task xlm, mass or denoising) whose weights start a fresh training "
                             "run (seqkit/models/init_from.py: the key map); read once by seqkit-train; empty: random")


@MODELS.preset("transformer_base")
def transformer_base() -> TransformerConfig:
    """Vaswani et al. base: 6+6 layers, d 512, ffn 2048, 8 heads."""
    return TransformerConfig()


@MODELS.preset("transformer_big")
def transformer_big() -> TransformerConfig:
    """Vaswani et al. big: d 1024, ffn 4096, 16 heads, dropout 0.3."""
    return dataclasses.replace(transformer_base(), embed_dim=1024, ffn_dim=4096, attention_heads=16, dropout=0.3)


@MODELS.preset("transformer_small")
def transformer_small() -> TransformerConfig:
    """Small-data preset (Multi30k, IWSLT): 3+3 layers, d 256, ffn 1024, 4 heads, dropout 0.3."""
    return dataclasses.replace(
        transformer_base(), encoder_layers=3, decoder_layers=3, embed_dim=256, ffn_dim=1024, attention_heads=4,
        dropout=0.3,
    )


@MODELS.preset("transformer_tiny")
def transformer_tiny() -> TransformerConfig:
    """For tests and CPU smoke runs: 2+2 layers, d 64, ffn 128, 4 heads."""
    return dataclasses.replace(
        transformer_base(), encoder_layers=2, decoder_layers=2, embed_dim=64, ffn_dim=128, attention_heads=4,
        max_source_positions=256, max_target_positions=256,
    )


def _embedding(num: int, dim: int, pad: Optional[int]) -> nn.Embedding:
    emb = nn.Embedding(num, dim, padding_idx=pad)
    nn.init.normal_(emb.weight, mean=0.0, std=dim**-0.5)
    if pad is not None:
        with torch.no_grad():
            emb.weight[pad].zero_()
    return emb


@MODELS.register("transformer", TransformerConfig)
class TransformerModel(EncoderDecoderModel):
    """Encoder-decoder Transformer; ``build(cfg, src_dict, tgt_dict)`` is the registry builder."""

    # seqkit's search installs a flat decoder step on inference copies (seqkit/generation/transformer_step.py)
    step_plan: Optional[Callable[[torch.Tensor, Cache, int], torch.Tensor]] = None
    # keywords ``forward`` takes beyond ``net_input`` (criteria pass them only to models listing them)
    forward_options = ("features_only", "src_padded")

    def __init__(self, cfg: TransformerConfig, src_dict: Dictionary, tgt_dict: Dictionary):
        super().__init__()
        self.cfg = cfg
        C, pad = cfg.embed_dim, src_dict.pad()
        self.pad, self.bos, self.eos = pad, tgt_dict.bos(), tgt_dict.eos()
        self.start = {"eos": self.eos, "pad": tgt_dict.pad(), "bos": tgt_dict.bos()}[cfg.decoder_start]
        if cfg.share_all_embeddings and src_dict != tgt_dict:
            raise SeqkitError("model.share_all_embeddings=true needs a joined dictionary (seqkit-preprocess joined_dictionary=true)")
        self.src_embed = _embedding(len(src_dict), C, pad)
        self.tgt_embed = self.src_embed if cfg.share_all_embeddings else _embedding(len(tgt_dict), C, pad)
        self.embed_scale = 1.0 if cfg.no_scale_embedding else math.sqrt(C)
        self.src_pos: Optional[nn.Module]
        self.tgt_pos: Optional[nn.Module]
        self.src_rel = self.tgt_rel = None
        if cfg.relative_buckets:  # no position embeddings: a bias on each stack's attention scores
            self.src_pos = self.tgt_pos = None
            self.src_rel = RelativePositionBias(cfg.relative_buckets, cfg.relative_max_distance, cfg.attention_heads, True)
            self.tgt_rel = RelativePositionBias(cfg.relative_buckets, cfg.relative_max_distance, cfg.attention_heads, False)
        elif cfg.learned_positions:
            self.src_pos = LearnedPositions(cfg.max_source_positions, C, cfg.position_offset)
            self.tgt_pos = LearnedPositions(cfg.max_target_positions, C, cfg.position_offset)
        else:
            self.src_pos = SinusoidalPositions(cfg.max_source_positions, C, cfg.position_offset, cfg.sinusoids)
            self.tgt_pos = SinusoidalPositions(cfg.max_target_positions, C, cfg.position_offset, cfg.sinusoids)
        impl, eps, rms = cfg.layer_norm_impl, cfg.layer_norm_eps, cfg.rms_norm
        self.src_embed_norm = norm(C, impl, eps, rms) if cfg.embed_layer_norm else nn.Identity()
        self.tgt_embed_norm = norm(C, impl, eps, rms) if cfg.embed_layer_norm else nn.Identity()
        self.lang_embed = _embedding(cfg.num_langs, C, None) if cfg.num_langs else None  # (num_langs, C)
        variant = LayerVariant(rms_norm=rms, bias=cfg.bias, scaled=cfg.scale_attention, head_dim=cfg.head_dim,
                               gated=cfg.gated_ffn)
        layer_args = (C, cfg.attention_heads, cfg.ffn_dim, cfg.dropout, cfg.attention_dropout,
                      cfg.activation_dropout, cfg.activation, cfg.normalize_before, impl, eps, variant)
        self.encoder_layers = nn.ModuleList(EncoderLayer(*layer_args) for _ in range(cfg.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(*layer_args) for _ in range(cfg.decoder_layers))
        # pre-norm stacks end with a LayerNorm; post-norm layers already end normalized
        self.encoder_norm = norm(C, impl, eps, rms) if cfg.normalize_before else nn.Identity()
        self.decoder_norm = norm(C, impl, eps, rms) if cfg.normalize_before else nn.Identity()
        if cfg.share_decoder_input_output_embed:
            self.output_proj = None
        else:
            self.output_proj = nn.Linear(C, len(tgt_dict), bias=False)
            nn.init.normal_(self.output_proj.weight, mean=0.0, std=C**-0.5)
        # a fixed bias ``(V,)`` on the logits, saved and never trained (set by the HuggingFace importer)
        self.output_bias: Optional[torch.Tensor]
        self.register_buffer("output_bias", torch.zeros(len(tgt_dict)) if cfg.output_bias else None)
        remove_heads(self, cfg.pruned_heads)

    @classmethod
    def build(cls, cfg: TransformerConfig, src_dict: Dictionary, tgt_dict: Dictionary) -> "TransformerModel":
        return cls(cfg, src_dict, tgt_dict)

    def max_positions(self) -> Tuple[int, int]:
        return self.cfg.max_source_positions, self.cfg.max_target_positions

    def word_embeddings(self) -> Dict[str, WordTable]:
        tied = self.cfg.share_decoder_input_output_embed
        return {"encoder_embed_path": WordTable(self.src_embed, tied_output=tied and self.cfg.share_all_embeddings),
                "decoder_embed_path": WordTable(self.tgt_embed, target=True, tied_output=tied)}

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor, prev_output_tokens: torch.Tensor,
                features_only: bool = False, src_padded: Optional[bool] = None,
                src_segments: Optional[torch.Tensor] = None, src_positions: Optional[torch.Tensor] = None,
                tgt_segments: Optional[torch.Tensor] = None, tgt_positions: Optional[torch.Tensor] = None,
                src_langs: Optional[torch.Tensor] = None, tgt_langs: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Teacher-forced logits ``(B, T, V)``, or with ``features_only`` the decoder's features
        ``(B, T, C)`` that :meth:`output_layer` turns into them (a loss can then project only the
        rows it scores). ``src_padded`` False (collation's host flag): no source row has padding,
        so attention runs without a mask and nothing asks the device. Packed rows
        (:mod:`seqkit.data.packing`) add each token's sentence in its row, ``src_segments`` ``(B, S)``
        and ``tgt_segments`` ``(B, T)`` (-1 at padding), and its position in that sentence.
        ``src_langs`` / ``tgt_langs`` ``(B,)``: each row's language (``model.num_langs``; MASS)."""
        enc = self.encode(src_tokens, src_lengths, padded=src_padded, segments=src_segments, positions=src_positions,
                          langs=src_langs)
        x = self.decoder_features(prev_output_tokens, enc, src_padded, tgt_segments, tgt_positions,
                                  tgt_langs)  # (B, T, C)
        return x if features_only else self._project(x)

    # -- encoder ---------------------------------------------------------------------------
    def encode(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
               prefix: Optional[torch.Tensor] = None, padded: Optional[bool] = None,
               segments: Optional[torch.Tensor] = None, positions: Optional[torch.Tensor] = None,
               langs: Optional[torch.Tensor] = None) -> EncoderOut:
        """``prefix`` ``(B, k, C)``: learned vectors read after the first token (prompt tuning); they
        stay in the encoder's output for the decoder to attend to. ``padded``: see :meth:`forward`.
        Packed rows: ``segments`` and ``positions`` ``(B, S)`` (see :meth:`forward`)."""
        k = prefix_length(prefix)
        B, S = src_tokens.size(0), src_tokens.size(1) + k
        if segments is None and S > self.cfg.max_source_positions:  # a packed row's positions restart per sentence
            raise SeqkitError(f"source of {S} tokens exceeds model.max_source_positions={self.cfg.max_source_positions}")
        x = insert_prefix(self.embed_scale * self.src_embed(src_tokens), prefix)  # (B, S, C)
        if self.src_pos is not None:
            x = x + (self.src_pos(S) if positions is None else self.src_pos.at(positions))
        x = self._add_lang(x, langs, 0)
        x = dropout(self.src_embed_norm(x), self.cfg.dropout, self.training)
        keep = insert_prefix(src_tokens.ne(self.pad), src_tokens.new_ones(B, k, dtype=torch.bool))  # (B, S)
        # (B, 1, 1, S) or None; packed rows: (B, 1, S, S) or a BlockMask
        mask = padding_mask(keep, padded) if segments is None else self._document_mask(segments, segments, False)
        bias = self.src_rel(S, S) if self.src_rel is not None else None  # (1, H, S, S)
        for layer in self.encoder_layers:
            x = layer(x, mask, bias)
        out = {"out": self.encoder_norm(x), "keep": keep}
        if segments is not None:
            out["segments"] = segments  # (B, S)
        return out

    def _document_mask(self, q_segments: torch.Tensor, k_segments: torch.Tensor, causal: bool) -> Any:
        """Packed rows' attention mask, made once per stack and forward (a FlexAttention block mask
        on CUDA, see :mod:`seqkit.models.modules.document_masks`)."""
        flex = use_flex(q_segments.device, self.cfg.attention_dropout if self.training else 0.0)
        return document_mask(q_segments, k_segments, causal, flex)

    def packing_refusal(self) -> Optional[str]:
        """Why this model cannot train on packed rows (``dataset.pack``), or None."""
        if self.src_rel is not None:
            return "T5's relative positions (model.relative_buckets) take no packed rows"
        return None

    # -- decoder ---------------------------------------------------------------------------
    def _memory_mask(self, enc: EncoderOut, padded: Optional[bool] = None) -> Optional[torch.Tensor]:
        return padding_mask(enc["keep"], padded)  # (B, 1, 1, S) or None

    def _output(self, x: torch.Tensor) -> torch.Tensor:
        """The last decoder layer's output ``(..., C)`` -> logits ``(..., V)``."""
        return self._project(self.decoder_norm(x))

    def output_layer(self, features: torch.Tensor) -> torch.Tensor:
        """Decoder features ``(..., C)`` (``forward(..., features_only=True)``) -> logits ``(..., V)``."""
        return self._project(features)

    def output_projection(self) -> Optional[Tuple[torch.Tensor, Optional[torch.Tensor], float]]:
        """What :meth:`output_layer` computes, for a loss that fuses it: ``(weight (V, C), bias
        (V,) or None, scale)`` with logits = (scale * x) @ weight.T + bias; None when the projection
        is no plain linear map (replaced by a LoRA or int8 module)."""
        if self.output_proj is None:
            weight = self.tgt_embed.weight
        elif type(self.output_proj) is nn.Linear and self.output_proj.bias is None:
            weight = self.output_proj.weight
        else:
            return None
        return weight, self.output_bias, self.cfg.embed_dim**-0.5 if self.cfg.scale_output else 1.0

    def _project(self, x: torch.Tensor) -> torch.Tensor:
        if self.cfg.scale_output:
            x = x * self.cfg.embed_dim**-0.5
        if self.output_proj is None:  # tied to the target embeddings
            logits = F.linear(x, self.tgt_embed.weight)  # (..., V)
        else:
            logits = self.output_proj(x)  # (..., V)
        return logits if self.output_bias is None else logits + self.output_bias.to(logits.dtype)

    def untie_output(self) -> None:
        """For inference-time rewrites (``quantize=int8``): a tied output projection becomes an
        ``nn.Linear`` sharing the embedding's weight, so module swaps reach it."""
        if self.output_proj is None:
            V, C = self.tgt_embed.weight.shape
            self.output_proj = nn.Linear(C, V, bias=False)
            self.output_proj.weight = self.tgt_embed.weight

    def _add_lang(self, x: torch.Tensor, langs: Optional[torch.Tensor], default: int) -> torch.Tensor:
        """``x`` ``(B, T, C)`` plus each row's language vector (``langs`` ``(B,)``, else row ``default``)."""
        if self.lang_embed is None:
            if langs is not None:
                raise SeqkitError("this model has no language embeddings (model.num_langs=0) but got languages")
            return x
        if langs is None:
            return x + self.lang_embed.weight[min(default, self.lang_embed.num_embeddings - 1)]
        return x + self.lang_embed(langs)[:, None]  # (B, 1, C)

    def _embed_target(self, tokens: torch.Tensor, offset: int, positions: Optional[torch.Tensor] = None,
                      langs: Optional[torch.Tensor] = None) -> torch.Tensor:
        if offset == 0 and self.start != self.bos and positions is not None:  # each packed sentence's <s>
            tokens = tokens.masked_fill(positions.eq(0) & tokens.eq(self.bos), self.start)
        elif offset == 0 and self.start != self.bos:  # targets start with <s>; this model reads its own start token
            tokens = torch.cat([tokens.new_full((tokens.size(0), 1), self.start), tokens[:, 1:]], dim=1)
        x = self.embed_scale * self.tgt_embed(tokens)
        if self.tgt_pos is not None:
            x = x + (self.tgt_pos(tokens.size(1), offset) if positions is None else self.tgt_pos.at(positions))
        x = self._add_lang(x, langs, 1)
        return dropout(self.tgt_embed_norm(x), self.cfg.dropout, self.training)

    def decoder_features(self, prev_output_tokens: torch.Tensor, enc: EncoderOut,
                         padded: Optional[bool] = None, segments: Optional[torch.Tensor] = None,
                         positions: Optional[torch.Tensor] = None, langs: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The last decoder layer's normalized output ``(B, T, C)``; ``padded``: see :meth:`forward`.
        Packed rows: ``segments`` and ``positions`` ``(B, T)``; ``enc`` then holds the source's."""
        T = prev_output_tokens.size(1)
        if segments is None and T > self.cfg.max_target_positions:
            raise SeqkitError(f"target of {T} tokens exceeds model.max_target_positions={self.cfg.max_target_positions}")
        x = self._embed_target(prev_output_tokens, 0, positions, langs)  # (B, T, C)
        if segments is None:
            mask, self_mask = self._memory_mask(enc, padded), None
        else:  # causal within each sentence; each reads its own source sentence
            mask = self._document_mask(segments, enc["segments"], False)  # (B, 1, T, S) or a BlockMask
            self_mask = self._document_mask(segments, segments, True)  # (B, 1, T, T) or a BlockMask
        bias = self.tgt_rel(T, T) if self.tgt_rel is not None else None  # (1, H, T, T)
        for layer in self.decoder_layers:
            x, _, _ = layer(x, mask, memory=enc["out"], self_bias=bias, self_mask=self_mask)
        return self.decoder_norm(x)

    def decode(self, prev_output_tokens: torch.Tensor, enc: EncoderOut, segments: Optional[torch.Tensor] = None,
               positions: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self._project(self.decoder_features(prev_output_tokens, enc, None, segments, positions))  # (B, T, V)

    # -- transfer (seqkit.models.pretrained): BART's classification reading -------------------------
    transfer_pooling = "last"  # the decoder's final position, having read the whole input
    pretraining_heads = ("output_proj",)

    @property
    def transfer_dim(self) -> int:
        return self.cfg.embed_dim

    def transfer_features(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                          segments: Optional[torch.Tensor] = None, prefix: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The same tokens go into the encoder (after ``prefix``'s vectors, if any) and, shifted
        right behind ``</s>``, into the decoder (Lewis et al. 2020, section 3.1): decoder outputs ``(B, S, C)``."""
        prev = torch.cat([src_tokens.new_full((src_tokens.size(0), 1), self.eos), src_tokens[:, :-1]], dim=1)
        prev = prev.masked_fill(src_tokens.eq(self.pad), self.pad)
        return self.decoder_features(prev, self.encode(src_tokens, src_lengths, prefix))

    def transfer_embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed_scale * self.src_embed(tokens)

    def transfer_groups(self) -> List[List[str]]:
        """Embeddings and positions, each encoder layer (the encoder's norm with the last), each
        decoder layer (the decoder's norm with the last)."""
        enc = layer_prefixes("encoder_layers", len(self.encoder_layers))
        dec = layer_prefixes("decoder_layers", len(self.decoder_layers))
        enc[-1].append("encoder_norm")
        dec[-1].append("decoder_norm")
        return groups_by_prefix(self, [["src_embed", "tgt_embed", "src_pos", "tgt_pos", "src_rel", "tgt_rel", "src_embed_norm",
                                  "tgt_embed_norm", "lang_embed"]]
                                + enc + dec)

    def init_cache(self, enc: EncoderOut, max_len: int) -> Cache:
        """Cross-attention keys/values and the source mask once per sentence (``static:``), the
        sentence (static row) of each decoder row (``rows``); self-attention keys/values grow per step."""
        keep = enc["keep"]
        cache: Cache = {f"{STATIC}keep": keep, "rows": torch.arange(keep.size(0), device=keep.device)}
        for i, layer in enumerate(self.decoder_layers):
            cache[f"{STATIC}{i}.ck"], cache[f"{STATIC}{i}.cv"] = layer.cross_attn.project_kv(enc["out"])  # (B, H, S, D)
        return cache

    def reorder_cache(self, cache: Cache, new_order: torch.Tensor, sentences_moved: bool) -> Cache:
        """Self-attention keys/values are reordered lazily: the next ``decode_step`` selects rows
        ``order`` while it extends them. Static entries keep one row per sentence as long as each
        sentence's rows are consecutive and equally many (beam search); otherwise one per row."""
        cache = dict(cache)
        pending = cache.get("order")
        cache["order"] = new_order if pending is None else pending.index_select(0, new_order)
        if sentences_moved:
            rows = cache["rows"].index_select(0, new_order)  # (B',) static row of each new row
            runs, counts = torch.unique_consecutive(rows, return_counts=True)
            g = int(counts[0])
            if bool((counts == g).all()):  # runs of g rows share one static row
                pick = runs
                cache["rows"] = torch.arange(runs.numel(), device=rows.device).repeat_interleave(g)
            else:
                pick, cache["rows"] = rows, torch.arange(rows.numel(), device=rows.device)
            for k in cache:
                if k.startswith(STATIC):
                    cache[k] = cache[k].index_select(0, pick)
        # else: beams were re-ranked within their sentences, so each row's static row is unchanged
        return cache

    def decode_step(self, tokens: torch.Tensor, enc: EncoderOut, cache: Cache, step: int) -> torch.Tensor:
        return self._decode_step(tokens, cache, step, None)[0]

    def decode_step_attention(self, tokens: torch.Tensor, enc: EncoderOut, cache: Cache, step: int,
                              layer: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Logits ``(B, V)`` and the cross-attention of decoder layer ``layer`` (None: the last),
        averaged over heads ``(B, S)``."""
        L = len(self.decoder_layers)
        index = L - 1 if layer is None else layer
        if not -L <= index < L:
            raise SeqkitError(f"generation.alignment_layer={layer}: the model has {L} decoder layers")
        return self._decode_step(tokens, cache, step, index % L)

    def _decode_step(self, tokens: torch.Tensor, cache: Cache, step: int, attn_layer: Optional[int]):
        # enc is not read: init_cache put all this needs (cross keys/values, source mask) in the cache
        if self.step_plan is not None and attn_layer is None and not self.training:
            return self.step_plan(tokens, cache, step), None  # the same arithmetic without nn.Module calls
        B = tokens.size(0)
        keep = cache[f"{STATIC}keep"]  # (G, S): G divides B, rows come in groups of B // G per sentence
        if B % keep.size(0):
            raise SeqkitError(f"decode_step got {B} rows for a cache of {keep.size(0)} sentences")
        mask = padding_mask(keep)  # (G, 1, 1, S) or None
        order = cache.pop("order", None)  # (B,) row of the cached keys/values each row continues
        x = self._embed_target(tokens, step)  # (B, 1, C)
        bias = self.tgt_rel(1, step + 1, step) if self.tgt_rel is not None else None  # (1, H, 1, step + 1)
        attn = None
        for i, layer in enumerate(self.decoder_layers):
            self_kv = (cache[f"{i}.k"], cache[f"{i}.v"]) if step > 0 else None
            cross_kv = (cache[f"{STATIC}{i}.ck"], cache[f"{STATIC}{i}.cv"])
            x, (k, v), weights = layer(x, mask, cross_kv, self_kv, order, need_weights=i == attn_layer, self_bias=bias)
            cache[f"{i}.k"], cache[f"{i}.v"] = k, v  # (B, H, step + 1, D)
            if weights is not None:
                attn = weights[:, 0]  # (B, S)
        return self._output(x[:, 0]), attn  # (B, V)
