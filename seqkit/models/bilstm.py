"""Bidirectional LSTM sentence classifier and sequence tagger sharing one encoder.

Shapes: B batch, S input length, E embed_dim, H hidden_dim (per direction), D head_dim, K labels.

Encoder: embeddings (concatenated with extra per-position features ``(B, S, F)`` when given: a
pretrained body's vectors, Peters et al. 2018's use of ELMo) -> dropout -> bidirectional multi-layer
LSTM over packed sequences (padding never enters the recurrence) -> outputs ``(B, S, 2H)``, zeros
at padding.

Classifier head (ULMFiT's concat pooling, Howard & Ruder 2018): ``[forward state after the last
real token; backward state after the first token; max over time; mean over time]`` ``(B, 6H)``,
pads left out of max and mean -> dropout -> linear D -> ReLU -> dropout -> linear K.

Tagger head: each position's output -> dropout -> linear K, logits ``(B, S, K)``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.models.base import EncoderClassifierModel
from seqkit.models.modules.dropout import dropout
from seqkit.models.modules.pretrained_embeddings import WordTable, embed_path_arg, freeze_embed_arg


@dataclass
class BiLSTMLayersConfig:
    """The shared encoder's sizes (the BiLSTM models', and a pretrained model's task BiLSTM)."""

    embed_dim: int = arg(300, "embedding dimension E", gt=0)
    hidden_dim: int = arg(256, "LSTM hidden size H per direction", gt=0)
    num_layers: int = arg(2, "LSTM layers", ge=1)
    dropout: float = arg(0.4, "dropout on embeddings, between LSTM layers and in the head", ge=0, lt=1)


@dataclass
class BiLSTMEncoderConfig(BiLSTMLayersConfig):
    """Fields of the shared encoder; each model's config adds its name (and head fields)."""

    name: str = arg("", "registry name of the model")
    max_positions: int = arg(1024, "longest input (tokens, <s> and </s> included)", gt=0)
    embed_path: str = embed_path_arg()
    freeze_embed: bool = freeze_embed_arg()


@dataclass
class TaskBiLSTMConfig(BiLSTMLayersConfig):
    """``model.head=bilstm`` of pretrained_classifier / pretrained_tagger: a BiLSTM trained for the
    task over ``[its own token embeddings; the body's vectors]`` (Peters et al. 2018)."""

    head_dim: int = arg(256, "classifier: hidden layer D of the concat-pooling head", gt=0)


@dataclass
class BiLSTMClassifierConfig(BiLSTMEncoderConfig):
    name: str = arg("bilstm_classifier", "registry name of the model")
    head_dim: int = arg(256, "hidden layer D of the classification head", gt=0)


@dataclass
class BiLSTMTaggerConfig(BiLSTMEncoderConfig):
    name: str = arg("bilstm_tagger", "registry name of the model")


@MODELS.preset("bilstm_classifier_small")
def bilstm_classifier_small() -> BiLSTMClassifierConfig:
    """Embeddings 300, 2 bi-LSTM layers of 2x256, concat pooling, head 256, dropout 0.4."""
    return BiLSTMClassifierConfig()


@MODELS.preset("bilstm_classifier_tiny")
def bilstm_classifier_tiny() -> BiLSTMClassifierConfig:
    """For tests and CPU smoke runs: embeddings 16, 2 layers of 2x12, head 10."""
    return dataclasses.replace(bilstm_classifier_small(), embed_dim=16, hidden_dim=12, head_dim=10, max_positions=256)


@MODELS.preset("bilstm_tagger_small")
def bilstm_tagger_small() -> BiLSTMTaggerConfig:
    """Lample et al.'s tagger without the CRF: embeddings 300, 2 bi-LSTM layers of 2x256, dropout 0.4."""
    return BiLSTMTaggerConfig()


@MODELS.preset("bilstm_tagger_tiny")
def bilstm_tagger_tiny() -> BiLSTMTaggerConfig:
    """For tests and CPU smoke runs: embeddings 16, 2 layers of 2x12."""
    return dataclasses.replace(bilstm_tagger_small(), embed_dim=16, hidden_dim=12, max_positions=256)


class BiLSTMEncoder(nn.Module):
    """``forward(src_tokens, src_lengths, extra)`` -> outputs ``(B, S, 2H)`` (zeros at pads) and the
    top layer's final states ``(B, 2H)``: forward after the last real token, backward after the
    first. ``extra`` ``(B, S, extra_dim)``: features read beside each token's embedding."""

    def __init__(self, cfg: BiLSTMLayersConfig, src_dict: Dictionary, max_positions: int, extra_dim: int = 0):
        super().__init__()
        self.cfg, self.pad, self.max_len, self.extra_dim = cfg, src_dict.pad(), max_positions, extra_dim
        self.embed = nn.Embedding(len(src_dict), cfg.embed_dim, padding_idx=self.pad)
        self.lstm = nn.LSTM(cfg.embed_dim + extra_dim, cfg.hidden_dim, cfg.num_layers, batch_first=True,
                            bidirectional=True, dropout=cfg.dropout if cfg.num_layers > 1 else 0.0)
        for p in self.parameters():
            nn.init.uniform_(p, -0.1, 0.1)
        with torch.no_grad():
            self.embed.weight[self.pad].zero_()

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                extra: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        cfg = self.cfg
        B, S = src_tokens.shape
        if S > self.max_len:
            raise SeqkitError(f"input of {S} tokens exceeds model.max_positions={self.max_len}")
        x = self.embed(src_tokens)  # (B, S, E)
        if self.extra_dim:
            x = torch.cat([x, extra.to(x.dtype)], dim=-1)  # (B, S, E + F)
        x = dropout(x, cfg.dropout, self.training)
        packed = pack_padded_sequence(x, src_lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, (h, _) = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=S)  # (B, S, 2H)
        final = h.view(cfg.num_layers, 2, B, cfg.hidden_dim)[-1]  # (2, B, H): top layer, both directions
        return out, torch.cat([final[0], final[1]], dim=1)  # (B, S, 2H), (B, 2H)


def concat_pool(out: torch.Tensor, final: torch.Tensor, src_tokens: torch.Tensor, pad: int) -> torch.Tensor:
    """ULMFiT's concat pooling: ``[final states; max over time; mean over time]`` ``(B, 6H)`` from
    the encoder's outputs ``(B, S, 2H)`` (zeros at pads) and final states ``(B, 2H)``."""
    real = src_tokens.ne(pad).unsqueeze(2)  # (B, S, 1)
    top = out.masked_fill(~real, -math.inf).max(dim=1).values  # (B, 2H)
    mean = out.sum(dim=1) / real.sum(dim=1).to(out.dtype)  # (B, 2H): pads hold zeros
    return torch.cat([final, top, mean], dim=1)  # (B, 6H)


class PoolingHead(nn.Module):
    """dropout -> linear D -> ReLU -> dropout -> linear K."""

    def __init__(self, in_dim: int, hidden_dim: int, num_labels: int, p: float):
        super().__init__()
        self.dense, self.out, self.p = nn.Linear(in_dim, hidden_dim), nn.Linear(hidden_dim, num_labels), p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.dense(dropout(x, self.p, self.training)))  # (B, D)
        return self.out(dropout(x, self.p, self.training))  # (B, K)


@MODELS.register("bilstm_classifier", BiLSTMClassifierConfig)
class BiLSTMClassifier(EncoderClassifierModel):
    """Bi-LSTM encoder + concat pooling -> logits ``(B, K)``."""

    kind = "classifier"

    def __init__(self, cfg: BiLSTMClassifierConfig, src_dict: Dictionary, num_labels: int):
        super().__init__()
        self.cfg = cfg
        self.encoder = BiLSTMEncoder(cfg, src_dict, cfg.max_positions)
        self.head = PoolingHead(6 * cfg.hidden_dim, cfg.head_dim, num_labels, cfg.dropout)

    def max_positions(self) -> Tuple[int, int]:
        return self.cfg.max_positions, 1 << 30

    def word_embeddings(self) -> Dict[str, WordTable]:
        return {"embed_path": WordTable(self.encoder.embed)}

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                segments: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``src_tokens`` ``(B, S)`` -> logits ``(B, K)``; ``segments`` is not used (the ``</s>``
        between a pair's sentences marks the boundary)."""
        out, final = self.encoder(src_tokens, src_lengths)  # (B, S, 2H), (B, 2H)
        return self.head(concat_pool(out, final, src_tokens, self.encoder.pad))  # (B, K)


@MODELS.register("bilstm_tagger", BiLSTMTaggerConfig)
class BiLSTMTagger(EncoderClassifierModel):
    """Bi-LSTM encoder -> one label's logits per position ``(B, S, K)``."""

    kind = "tagger"

    def __init__(self, cfg: BiLSTMTaggerConfig, src_dict: Dictionary, num_labels: int):
        super().__init__()
        self.cfg = cfg
        self.encoder = BiLSTMEncoder(cfg, src_dict, cfg.max_positions)
        self.head = nn.Linear(2 * cfg.hidden_dim, num_labels)

    def max_positions(self) -> Tuple[int, int]:
        return self.cfg.max_positions, 1 << 30

    def word_embeddings(self) -> Dict[str, WordTable]:
        return {"embed_path": WordTable(self.encoder.embed)}

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                segments: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``src_tokens`` ``(B, S)`` -> logits ``(B, S, K)`` (rows at pads are the head's bias)."""
        out, _ = self.encoder(src_tokens, src_lengths)  # (B, S, 2H)
        return self.head(dropout(out, self.cfg.dropout, self.training))  # (B, S, K)
