"""BERT-family masked language models: BERT, RoBERTa, ALBERT, SpanBERT (kind ``masked_lm``).

Encoder: :class:`seqkit.models.transformer_encoder.TransformerEncoder` (token + learned position +
segment embeddings, LayerNorm, post-norm layers; ALBERT's factorized embeddings ``embedding_dim``
and cross-layer sharing ``share_layers`` are fields of it). Its parameters are ``encoder.*``, the
names the classification and tagging models use, so a pretrained encoder loads into them.

Heads, on the encoder's output ``(B, S, C)``:
- masked LM: the N masked positions ``(N, C)`` -> dense C->E + the activation (GELU) + LayerNorm -> the token
  embedding's transpose (E x V, tied) + a bias -> ``(N, V)``; only masked positions are projected;
- sentence (``sentence_head``, NSP or SOP): ``<s>``'s output -> dense + tanh -> linear 2;
- span boundary (``span_boundary_head``, SpanBERT's SBO): the outputs just left and right of a
  masked span and the position's offset in it ``[h_l; h_r; p_k]`` -> 2 x (linear, GELU, LayerNorm)
  -> the masked-LM head's projection -> ``(N, V)``.

``forward`` returns a dict: ``mlm`` ``(N, V)`` (``(B, S, V)`` without ``masked_tokens``: every
position, as the cloze demo asks), ``sentence`` ``(B, 2)`` and ``sbo`` ``(N, V)`` when the heads exist.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from seqkit.core.config import arg
from seqkit.data.dictionary import Dictionary
from seqkit.models.modules.norm import layer_norm
from seqkit.models.modules.transformer_layers import ACTIVATIONS
from seqkit.models.transformer_encoder import (EncoderTransfer, PoolerHead, TransformerEncoder,
                                               TransformerEncoderConfig)
from seqkit.core.registry import MODELS


@dataclass
class BertConfig(TransformerEncoderConfig):
    name: str = arg("bert", "registry name of the model")
    sentence_head: bool = arg(False, "a 2-way head on <s> for next-sentence (BERT) or sentence-order (ALBERT) "
                                     "prediction (task.sentence_pairs=nsp|sop)")
    span_boundary_head: bool = arg(False, "SpanBERT's span-boundary objective (task.mask_unit=span)")
    max_span_positions: int = arg(32, "span-boundary head: offsets inside a span beyond this share the last vector",
                                  ge=1)
    unigram_bias_init: bool = arg(True, "start the masked-LM output bias at the log unigram distribution of the "
                                        "dictionary's counts (else zeros)")


def _bert(layers: int, dim: int, heads: int, **kw) -> BertConfig:
    """BERT's shape: ffn 4 x dim, GELU, post-norm, learned positions up to 512, unscaled embeddings."""
    return BertConfig(encoder_layers=layers, embed_dim=dim, ffn_dim=4 * dim, attention_heads=heads, dropout=0.1,
                      attention_dropout=0.1, activation="gelu", normalize_before=False, learned_positions=True,
                      max_positions=512, no_scale_embedding=True, **kw)


# BERT (Devlin et al. 2019; tiny/mini/small as in Turc et al. 2019): NSP head
@MODELS.preset("bert_tiny")
def bert_tiny() -> BertConfig:
    """2 layers, C 128, 2 heads (4.4M parameters besides the embeddings' V x 128)."""
    return _bert(2, 128, 2, sentence_head=True)


@MODELS.preset("bert_mini")
def bert_mini() -> BertConfig:
    """4 layers, C 256, 4 heads."""
    return _bert(4, 256, 4, sentence_head=True)


@MODELS.preset("bert_small")
def bert_small() -> BertConfig:
    """4 layers, C 512, 8 heads."""
    return _bert(4, 512, 8, sentence_head=True)


@MODELS.preset("bert_base")
def bert_base() -> BertConfig:
    """12 layers, C 768, 12 heads (110M with a 30k vocabulary)."""
    return _bert(12, 768, 12, sentence_head=True)


@MODELS.preset("bert_large")
def bert_large() -> BertConfig:
    """24 layers, C 1024, 16 heads (340M)."""
    return _bert(24, 1024, 16, sentence_head=True)


# RoBERTa (Liu et al. 2019): BERT's shapes, no NSP (with the task's dynamic masking, full sentences)
@MODELS.preset("roberta_mini")
def roberta_mini() -> BertConfig:
    """bert_mini without the sentence head."""
    return dataclasses.replace(bert_mini(), sentence_head=False)


@MODELS.preset("roberta_small")
def roberta_small() -> BertConfig:
    """bert_small without the sentence head."""
    return dataclasses.replace(bert_small(), sentence_head=False)


@MODELS.preset("roberta_base")
def roberta_base() -> BertConfig:
    """bert_base without the sentence head."""
    return dataclasses.replace(bert_base(), sentence_head=False)


@MODELS.preset("roberta_large")
def roberta_large() -> BertConfig:
    """bert_large without the sentence head."""
    return dataclasses.replace(bert_large(), sentence_head=False)


# ALBERT (Lan et al. 2020): factorized embeddings E = 128, one layer shared by all, SOP head
@MODELS.preset("albert_mini")
def albert_mini() -> BertConfig:
    """4 shared layers, C 256, E 128."""
    return _bert(4, 256, 4, sentence_head=True, embedding_dim=128, share_layers=True)


@MODELS.preset("albert_base")
def albert_base() -> BertConfig:
    """12 shared layers, C 768, E 128 (12M parameters with a 30k vocabulary, against BERT-base's 110M)."""
    return _bert(12, 768, 12, sentence_head=True, embedding_dim=128, share_layers=True)


@MODELS.preset("albert_large")
def albert_large() -> BertConfig:
    """24 shared layers, C 1024, E 128."""
    return _bert(24, 1024, 16, sentence_head=True, embedding_dim=128, share_layers=True)


# SpanBERT (Joshi et al. 2020): span masking, the span-boundary objective, no NSP
@MODELS.preset("spanbert_mini")
def spanbert_mini() -> BertConfig:
    """bert_mini with the span-boundary head instead of NSP."""
    return dataclasses.replace(bert_mini(), sentence_head=False, span_boundary_head=True)


@MODELS.preset("spanbert_base")
def spanbert_base() -> BertConfig:
    """bert_base with the span-boundary head instead of NSP."""
    return dataclasses.replace(bert_base(), sentence_head=False, span_boundary_head=True)


# XLM (Lample & Conneau 2019): the segment table holds one row per language (task xlm), no sentence head;
# shaped to initialise a Transformer translation model of the same dimensions (model.init_from)
@MODELS.preset("xlm_tiny")
def xlm_tiny() -> BertConfig:
    """For tests: 2 layers, C 32, 4 heads, 2 languages, up to 64 positions."""
    return dataclasses.replace(_bert(2, 32, 4, num_segments=2), max_positions=64)


@MODELS.preset("xlm_small")
def xlm_small() -> BertConfig:
    """3 layers, C 256, ffn 1024, 4 heads, 2 languages, up to 256 positions: transformer_small's encoder."""
    return dataclasses.replace(_bert(3, 256, 4, num_segments=2), max_positions=256)


def log_unigram(dictionary: Dictionary) -> torch.Tensor:
    """``(V,)`` log-probabilities of the dictionary's add-one smoothed counts (the training split's)."""
    counts = torch.tensor(dictionary.counts, dtype=torch.float64) + 1.0
    return (counts / counts.sum()).log().float()


class MaskedLMHead(nn.Module):
    """``(..., C)`` -> dense C->E + GELU + LayerNorm -> tied E x V output + bias -> ``(..., V)``.

    ``bias_init`` ``(V,)``: the bias' start (:func:`log_unigram`: the loss starts near the unigram
    baseline rather than at log V, and the first updates go to context, not to word frequencies,
    which Adam's steps of ~lr per update would take thousands of updates to put into a bias)."""

    def __init__(self, dim: int, embed: nn.Embedding, norm_impl: str, bias_init: Optional[torch.Tensor] = None,
                 activation: str = "gelu", norm_eps: float = 1e-5):
        super().__init__()
        E = embed.embedding_dim
        self.dense = nn.Linear(dim, E)
        self.activation = ACTIVATIONS[activation]
        self.norm = layer_norm(E, norm_impl, norm_eps)
        self._embed = (embed,)  # a tuple: the embedding stays the encoder's parameter
        V = embed.num_embeddings
        self.bias = nn.Parameter(torch.zeros(V) if bias_init is None else bias_init.detach().clone().reshape(V))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.norm(self.activation(self.dense(x))), self._embed[0].weight, self.bias)


class SpanBoundaryHead(nn.Module):
    """``h_left``, ``h_right`` ``(N, C)`` and ``offset`` ``(N,)`` -> ``(N, C)`` (SpanBERT's f(.))."""

    def __init__(self, dim: int, max_positions: int, norm_impl: str):
        super().__init__()
        self.positions = nn.Embedding(max_positions, dim)
        nn.init.normal_(self.positions.weight, mean=0.0, std=dim**-0.5)
        self.fc1, self.fc2 = nn.Linear(3 * dim, dim), nn.Linear(dim, dim)
        self.norm1, self.norm2 = layer_norm(dim, norm_impl), layer_norm(dim, norm_impl)

    def forward(self, left: torch.Tensor, right: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
        p = self.positions(offset.clamp(max=self.positions.num_embeddings - 1))
        h = self.norm1(F.gelu(self.fc1(torch.cat([left, right, p], dim=-1))))
        return self.norm2(F.gelu(self.fc2(h)))


@MODELS.register("bert", BertConfig)
class BertModel(EncoderTransfer, nn.Module):
    """Encoder + masked-LM head (+ sentence head, + span-boundary head); see the module docstring."""

    kind = "masked_lm"

    def __init__(self, cfg: BertConfig, dictionary: Dictionary):
        super().__init__()
        self.cfg = cfg
        self.encoder = TransformerEncoder(cfg, dictionary)
        self.mlm_head = MaskedLMHead(cfg.embed_dim, self.encoder.embed_tokens, cfg.layer_norm_impl,
                                     log_unigram(dictionary) if cfg.unigram_bias_init else None, cfg.activation,
                                     cfg.layer_norm_eps)
        self.sentence_head = PoolerHead(cfg.embed_dim, 2, cfg.dropout) if cfg.sentence_head else None
        self.span_head = (SpanBoundaryHead(cfg.embed_dim, cfg.max_span_positions, cfg.layer_norm_impl)
                          if cfg.span_boundary_head else None)
        self.has_sentence_head, self.has_span_head = cfg.sentence_head, cfg.span_boundary_head

    @classmethod
    def build(cls, cfg: BertConfig, dictionary: Dictionary) -> "BertModel":
        return cls(cfg, dictionary)

    def max_positions(self) -> Tuple[int, int]:
        return self.cfg.max_positions, 1 << 30

    def packing_refusal(self) -> Optional[str]:
        """Why this model cannot train on packed rows (``dataset.pack``), or None."""
        if self.sentence_head is not None or self.span_head is not None:
            return "the sentence (NSP/SOP) and span-boundary heads read one sample a row"
        return None

    pretraining_heads = ("mlm_head", "sentence_head", "span_head")  # fine-tuning drops them (EncoderTransfer)

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor, segments: Optional[torch.Tensor] = None,
                masked_tokens: Optional[torch.Tensor] = None, sbo_left: Optional[torch.Tensor] = None,
                sbo_right: Optional[torch.Tensor] = None, sbo_offset: Optional[torch.Tensor] = None,
                src_segments: Optional[torch.Tensor] = None,
                src_positions: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
        """Packed rows add ``src_segments`` (each token's block in its row, -1 at padding) and
        ``src_positions`` ``(B, S)`` (see :meth:`TransformerEncoder.forward`)."""
        h = self.encoder(src_tokens, segments, documents=src_segments, positions=src_positions)  # (B, S, C)
        out = {"mlm": self.mlm_head(h if masked_tokens is None else h[masked_tokens])}  # (N, V) or (B, S, V)
        if self.sentence_head is not None:
            out["sentence"] = self.sentence_head(h[:, 0])  # (B, 2)
        if self.span_head is not None and sbo_left is not None:
            flat = h.reshape(-1, h.size(-1))  # (B * S, C)
            out["sbo"] = self.mlm_head(self.span_head(flat[sbo_left], flat[sbo_right], sbo_offset))  # (N, V)
        return out
