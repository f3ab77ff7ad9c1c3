"""Transformer encoder (BERT-style embeddings) with a sentence-classification or a tagging head.

Shapes: B batch, S input length, C embed_dim, K labels.

Encoder: ``scale * token + position (+ segment)`` embeddings -> LayerNorm -> dropout -> L encoder
layers (post-norm, or pre-norm with a final LayerNorm) -> ``(B, S, C)``. ``scale`` is sqrt(C)
unless ``no_scale_embedding``. Segment (token-type) embeddings tell a pair's two sentences apart;
a single sentence (``segments=None``) gets type 0 everywhere, as BERT gives it.

Classifier head: the ``<s>`` position's output -> dense + tanh (BERT's pooler) -> dropout ->
linear K. Tagger head: each position's output -> dropout -> linear K.

Parameters are ``encoder.*`` and ``head.*`` so that an encoder pretrained elsewhere (masked LM)
loads into ``encoder`` and only the head starts from scratch.
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
from seqkit.models.base import EncoderClassifierModel
from seqkit.models.modules.attention import PRUNED_HEADS_HELP, remove_heads
from seqkit.models.modules.dropout import dropout
from seqkit.models.modules.document_masks import document_mask, use_flex
from seqkit.models.modules.kernels import padding_mask
from seqkit.models.modules.norm import layer_norm
from seqkit.models.modules.positions import LearnedPositions, SinusoidalPositions
from seqkit.models.modules.prefix import groups_by_prefix, insert_prefix, layer_prefixes, prefix_length, remove_prefix
from seqkit.models.modules.pretrained_embeddings import WordTable, embed_path_arg, freeze_embed_arg
from seqkit.models.modules.transformer_layers import ACTIVATIONS, EncoderLayer


@dataclass
class TransformerEncoderConfig:
    """Fields of the shared encoder; each model's config sets its name."""

    name: str = arg("", "registry name of the model")
    encoder_layers: int = arg(4, "number of encoder layers", ge=1)
    embed_dim: int = arg(256, "model (embedding) dimension C", gt=0)
    ffn_dim: int = arg(1024, "inner dimension of the feed-forward blocks", gt=0)
    attention_heads: int = arg(4, "attention heads (embed_dim must be divisible by it)", ge=1)
    dropout: float = arg(0.1, "dropout on embeddings, residual branches and in the head", ge=0, lt=1)
    attention_dropout: float = arg(0.1, "dropout on attention weights", ge=0, lt=1)
    activation_dropout: float = arg(0.0, "dropout after the feed-forward activation", ge=0, lt=1)
    activation: str = arg("gelu", "feed-forward activation: relu, gelu, gelu_tanh (tanh approximation, GPT-2's) or "
                                  "silu (Marian's swish)",
                          choices=tuple(ACTIVATIONS))
    normalize_before: bool = arg(False, "pre-norm (LayerNorm before each block, one after the last) instead of post-norm")
    learned_positions: bool = arg(True, "learned position embeddings instead of sinusoids")
    max_positions: int = arg(512, "longest input (tokens, <s> and </s> included)", gt=0)
    num_segments: int = arg(2, "segment (token-type) embeddings; 0: none (then segments must not be given)", ge=0)
    no_scale_embedding: bool = arg(False, "do not multiply token embeddings by sqrt(embed_dim)")
    embed_layer_norm: bool = arg(True, "LayerNorm on the summed embeddings (BERT)")
    embedding_dim: int = arg(0, "factorized token embeddings of size E, projected to embed_dim (ALBERT); "
                                "0: embed_dim, no projection", ge=0)
    project_embeddings: str = arg("tokens", "with embedding_dim E: tokens (each token vector projected to C, then "
                                            "C-wide positions and segments added and normalized) or sum (positions "
                                            "and segments E-wide, the sum normalized in E, then projected to C with "
                                            "a bias: HuggingFace's ALBERT and ELECTRA)", choices=("tokens", "sum"))
    share_layers: bool = arg(False, "one layer's parameters for all encoder_layers (ALBERT's cross-layer sharing)")
    embed_init_std: float = arg(0.0, "std of the token, learned position and segment embeddings at init (0: each "
                                     "table's dim**-0.5); BERT's 0.02 starts a tied masked-LM head near its bias", ge=0)
    position_offset: int = arg(0, "learned positions: table rows before the first position's (RoBERTa keeps 2, "
                                  "its padding index + 1); the table holds max_positions + this", ge=0)
    layer_norm_eps: float = arg(1e-5, "epsilon added to the variance in every LayerNorm (BERT's 1e-12)", gt=0)
    layer_norm_impl: str = arg("auto", "LayerNorm: auto (NVIDIA apex FusedLayerNorm when importable), torch or apex",
                               choices=("auto", "torch", "apex"))


@dataclass
class TransformerClassifierConfig(TransformerEncoderConfig):
    name: str = arg("transformer_classifier", "registry name of the model")
    pruned_heads: Dict[str, List[int]] = arg(help=PRUNED_HEADS_HELP, factory=dict)
    embed_path: str = embed_path_arg()
    freeze_embed: bool = freeze_embed_arg()


@dataclass
class TransformerTaggerConfig(TransformerEncoderConfig):
    name: str = arg("transformer_tagger", "registry name of the model")
    pruned_heads: Dict[str, List[int]] = arg(help=PRUNED_HEADS_HELP, factory=dict)
    embed_path: str = embed_path_arg()
    freeze_embed: bool = freeze_embed_arg()


@MODELS.preset("transformer_classifier_small")
def transformer_classifier_small() -> TransformerClassifierConfig:
    """4 layers, d 256, ffn 1024, 4 heads, GELU, learned positions up to 512, dropout 0.1."""
    return TransformerClassifierConfig()


@MODELS.preset("transformer_classifier_tiny")
def transformer_classifier_tiny() -> TransformerClassifierConfig:
    """For tests and CPU smoke runs: 2 layers, d 32, ffn 64, 4 heads, up to 64 positions."""
    return dataclasses.replace(transformer_classifier_small(), encoder_layers=2, embed_dim=32, ffn_dim=64, attention_heads=4,
                               max_positions=64)


@MODELS.preset("transformer_tagger_small")
def transformer_tagger_small() -> TransformerTaggerConfig:
    """transformer_classifier_small's encoder with a per-position head."""
    return TransformerTaggerConfig()


@MODELS.preset("transformer_tagger_tiny")
def transformer_tagger_tiny() -> TransformerTaggerConfig:
    """For tests and CPU smoke runs: 2 layers, d 32, ffn 64, 4 heads, up to 64 positions."""
    return dataclasses.replace(transformer_tagger_small(), encoder_layers=2, embed_dim=32, ffn_dim=64, attention_heads=4,
                               max_positions=64)


class TransformerEncoder(nn.Module):
    """``forward(src_tokens, segments)`` -> outputs ``(B, S, C)`` (garbage at pads: mask them)."""

    def __init__(self, cfg: TransformerEncoderConfig, src_dict: Dictionary):
        super().__init__()
        C, self.pad, self.cfg = cfg.embed_dim, src_dict.pad(), cfg
        E = cfg.embedding_dim or C
        self.embed_tokens = nn.Embedding(len(src_dict), E, padding_idx=self.pad)
        nn.init.normal_(self.embed_tokens.weight, mean=0.0, std=cfg.embed_init_std or E**-0.5)
        with torch.no_grad():
            self.embed_tokens.weight[self.pad].zero_()
        # ALBERT: (V, E) + (E, C) << (V, C); "sum" projects after the embeddings' LayerNorm, with a bias
        self.sum_first = cfg.project_embeddings == "sum" and E != C
        self.embed_proj = nn.Linear(E, C, bias=self.sum_first) if E != C else None
        self.embed_scale = 1.0 if cfg.no_scale_embedding else math.sqrt(E)
        D = E if self.sum_first else C  # where positions and segments are added
        if cfg.learned_positions:
            self.embed_positions = LearnedPositions(cfg.max_positions, D, cfg.position_offset)
        else:
            self.embed_positions = SinusoidalPositions(cfg.max_positions, D)
        if cfg.learned_positions and cfg.embed_init_std:
            nn.init.normal_(self.embed_positions.weight, mean=0.0, std=cfg.embed_init_std)
        self.embed_segments = nn.Embedding(cfg.num_segments, D) if cfg.num_segments else None
        if self.embed_segments is not None:
            nn.init.normal_(self.embed_segments.weight, mean=0.0, std=cfg.embed_init_std or D**-0.5)
        eps = cfg.layer_norm_eps
        self.embed_norm = layer_norm(D, cfg.layer_norm_impl, eps) if cfg.embed_layer_norm else nn.Identity()
        self.layers = nn.ModuleList(
            EncoderLayer(C, cfg.attention_heads, cfg.ffn_dim, cfg.dropout, cfg.attention_dropout,
                         cfg.activation_dropout, cfg.activation, cfg.normalize_before, cfg.layer_norm_impl, eps)
            for _ in range(1 if cfg.share_layers else cfg.encoder_layers))
        # pre-norm stacks end with a LayerNorm; post-norm layers already end normalized
        self.final_norm = layer_norm(C, cfg.layer_norm_impl, eps) if cfg.normalize_before else nn.Identity()

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token vectors before positions are added: ``(..., )`` ids -> ``(..., C)`` (``(..., E)``
        with ``project_embeddings=sum``)."""
        x = self.embed_scale * self.embed_tokens(tokens)  # (..., E)
        return self.embed_proj(x) if self.embed_proj is not None and not self.sum_first else x

    def forward(self, src_tokens: torch.Tensor, segments: Optional[torch.Tensor] = None,
                prefix: Optional[torch.Tensor] = None, documents: Optional[torch.Tensor] = None,
                positions: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``prefix`` ``(B, k, C)``: learned vectors read after the first token (prompt tuning);
        the output keeps the input's positions only. ``segments`` are token types (a pair's A and B).
        Packed rows (:class:`seqkit.data.packing.PackedBlockDataset`): ``documents`` ``(B, S)``, each
        token's block in its row (-1 at padding), and ``positions`` ``(B, S)``, its position in that
        block; a token then attends to its own block only."""
        cfg = self.cfg
        k = prefix_length(prefix)
        S = src_tokens.size(1) + k
        if documents is not None and k:
            raise SeqkitError("packed rows (dataset.pack) take no learned prefix")
        if documents is None and S > cfg.max_positions:  # a packed row's positions restart per block
            raise SeqkitError(f"input of {S} tokens exceeds model.max_positions={cfg.max_positions}")
        pos = self.embed_positions(S) if positions is None else self.embed_positions.at(positions)  # (S|B, S, C)
        x = insert_prefix(self.embed(src_tokens), prefix) + pos  # (B, S, C)
        if self.embed_segments is not None:
            if segments is None or self.embed_segments.num_embeddings == 1:  # one type (RoBERTa): a pair reads as one
                x = x + self.embed_segments.weight[0]
            else:
                x = x + self.embed_segments(insert_prefix(segments, segments.new_zeros(segments.size(0), k)))
        elif segments is not None:
            raise SeqkitError("this model has no segment embeddings (model.num_segments=0) but got segments")
        x = dropout(self.embed_norm(x), cfg.dropout, self.training)
        if self.sum_first:
            x = self.embed_proj(x)  # (B, S, E) -> (B, S, C)
        keep = insert_prefix(src_tokens.ne(self.pad), src_tokens.new_ones(src_tokens.size(0), k, dtype=torch.bool))
        mask = padding_mask(keep)  # (B, 1, 1, S) or None
        if documents is not None:  # (B, 1, S, S) or a FlexAttention BlockMask on CUDA
            mask = document_mask(documents, documents, False, use_flex(documents.device,
                                                                       cfg.attention_dropout if self.training else 0.0))
        for i in range(cfg.encoder_layers):  # with share_layers, the one layer cfg.encoder_layers times
            x = self.layers[0 if cfg.share_layers else i](x, mask)
        return remove_prefix(self.final_norm(x), k)  # (B, S - k, C)


class EncoderTransfer:
    """The fine-tuning reading (:mod:`seqkit.models.pretrained`) of a pretraining model whose
    ``encoder`` is a :class:`TransformerEncoder` (BERT and its family, ELECTRA's discriminator)."""

    transfer_pooling = "first"  # [CLS], i.e. <s>

    @property
    def transfer_dim(self) -> int:
        return self.encoder.cfg.embed_dim

    def transfer_features(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                          segments: Optional[torch.Tensor] = None, prefix: Optional[torch.Tensor] = None) -> torch.Tensor:
        # a model pretrained without segment embeddings (RoBERTa) reads a pair as one stream
        segments = segments if self.encoder.embed_segments is not None else None
        return self.encoder(src_tokens, segments, prefix)  # (B, S, C)

    def transfer_embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.encoder.embed(tokens)

    def transfer_groups(self) -> List[List[str]]:
        """Embeddings, then each layer (ALBERT: its one shared layer), the final norm with the last."""
        n = len(self.encoder.layers)
        prefixes = [["encoder.embed_"]] + layer_prefixes("encoder.layers", n)
        prefixes[-1].append("encoder.final_norm")
        return groups_by_prefix(self, prefixes)


def _linear(n_in: int, n_out: int) -> nn.Linear:
    lin = nn.Linear(n_in, n_out)
    nn.init.xavier_uniform_(lin.weight)
    nn.init.zeros_(lin.bias)
    return lin


class PoolerHead(nn.Module):
    """``<s>``'s output ``(B, C)`` -> dense + tanh -> dropout -> linear K."""

    def __init__(self, dim: int, num_labels: int, p: float):
        super().__init__()
        self.dense, self.out, self.p = _linear(dim, dim), _linear(dim, num_labels), p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(dropout(torch.tanh(self.dense(x)), self.p, self.training))


class TokenHead(nn.Module):
    """Each position's output ``(B, S, C)`` -> dropout -> linear K."""

    def __init__(self, dim: int, num_labels: int, p: float):
        super().__init__()
        self.out, self.p = _linear(dim, num_labels), p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(dropout(x, self.p, self.training))


@MODELS.register("transformer_classifier", TransformerClassifierConfig)
class TransformerClassifier(EncoderClassifierModel):
    """Transformer encoder, pooled at ``<s>`` -> logits ``(B, K)``."""

    kind = "classifier"

    def __init__(self, cfg: TransformerClassifierConfig, src_dict: Dictionary, num_labels: int):
        super().__init__()
        self.cfg = cfg
        self.encoder = TransformerEncoder(cfg, src_dict)
        self.head = PoolerHead(cfg.embed_dim, num_labels, cfg.dropout)
        remove_heads(self, cfg.pruned_heads)

    def max_positions(self) -> Tuple[int, int]:
        return self.cfg.max_positions, 1 << 30

    def word_embeddings(self) -> Dict[str, WordTable]:
        return {"embed_path": WordTable(self.encoder.embed_tokens, "embedding_dim")}  # E; embedding_dim=D projects

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                segments: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.head(self.encoder(src_tokens, segments)[:, 0])  # (B, K)


@MODELS.register("transformer_tagger", TransformerTaggerConfig)
class TransformerTagger(EncoderClassifierModel):
    """Transformer encoder -> one label's logits per position ``(B, S, K)``."""

    kind = "tagger"

    def __init__(self, cfg: TransformerTaggerConfig, src_dict: Dictionary, num_labels: int):
        super().__init__()
        self.cfg = cfg
        self.encoder = TransformerEncoder(cfg, src_dict)
        self.head = TokenHead(cfg.embed_dim, num_labels, cfg.dropout)
        remove_heads(self, cfg.pruned_heads)

    def max_positions(self) -> Tuple[int, int]:
        return self.cfg.max_positions, 1 << 30

    def word_embeddings(self) -> Dict[str, WordTable]:
        return {"embed_path": WordTable(self.encoder.embed_tokens, "embedding_dim")}  # E; embedding_dim=D projects

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                segments: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.head(self.encoder(src_tokens, segments))  # (B, S, K)
