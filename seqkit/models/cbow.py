"""Deep Averaging Network (Iyyer et al., 2015): a sentence classifier that averages its words.

Shapes: B batch, S input length, E embed_dim, D hidden_dim, K labels.

embeddings -> word dropout (training only: each token is left out of the average with probability
``word_dropout``, never all of a sentence's tokens) -> mean over the kept non-pad tokens ->
``num_layers`` x (dropout -> linear -> activation) -> dropout -> linear to K.

The average runs over every non-pad token, ``<s>`` and ``</s>`` included: they are the same in every
sentence, so they act as a learned offset, and a pair's middle ``</s>`` is one more token.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch
from torch import nn

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.models.base import EncoderClassifierModel
from seqkit.models.modules.dropout import dropout
from seqkit.models.modules.pretrained_embeddings import WordTable, embed_path_arg, freeze_embed_arg


@dataclass
class CBOWConfig:
    name: str = arg("cbow", "registry name of the model family")
    embed_dim: int = arg(300, "embedding dimension E", gt=0)
    num_layers: int = arg(2, "feed-forward layers between the average and the output (0: linear model)", ge=0)
    hidden_dim: int = arg(300, "width D of the feed-forward layers", gt=0)
    activation: str = arg("relu", "activation of the feed-forward layers", choices=("relu", "tanh"))
    dropout: float = arg(0.3, "dropout before every feed-forward layer and before the output", ge=0, lt=1)
    word_dropout: float = arg(0.3, "training only: probability of leaving a token out of the average", ge=0, lt=1)
    max_positions: int = arg(1024, "longest input (tokens, <s> and </s> included)", gt=0)
    embed_path: str = embed_path_arg()
    freeze_embed: bool = freeze_embed_arg()


@MODELS.preset("dan_small")
def dan_small() -> CBOWConfig:
    """Iyyer et al.'s DAN for SST from scratch: embeddings 300, 2 ReLU layers of 300, word dropout 0.3."""
    return CBOWConfig()


@MODELS.preset("cbow_tiny")
def cbow_tiny() -> CBOWConfig:
    """For tests and CPU smoke runs: embeddings 16, 2 layers of 12."""
    return dataclasses.replace(dan_small(), embed_dim=16, hidden_dim=12, max_positions=256)


def word_dropout_mask(real: torch.Tensor, p: float) -> torch.Tensor:
    """Keep each True of ``real`` ``(B, S)`` with probability ``1 - p``; a row left with none keeps
    one of its tokens, drawn uniformly (every row needs at least one real token)."""
    r = torch.rand(real.shape, device=real.device).masked_fill_(~real, -1.0)  # (B, S), -1 at pads
    keep = r >= p
    # an emptied row: every real r < p, so its argmax is a uniformly drawn real token
    empty = ~keep.any(dim=1, keepdim=True)  # (B, 1)
    rescue = torch.zeros_like(keep).scatter_(1, r.argmax(dim=1, keepdim=True), True)
    return keep | (rescue & empty)


@MODELS.register("cbow", CBOWConfig)
class CBOWClassifier(EncoderClassifierModel):
    """Averaged embeddings -> feed-forward layers -> logits ``(B, K)``."""

    kind = "classifier"

    def __init__(self, cfg: CBOWConfig, src_dict: Dictionary, num_labels: int):
        super().__init__()
        self.cfg, self.pad = cfg, src_dict.pad()
        self.embed = nn.Embedding(len(src_dict), cfg.embed_dim, padding_idx=self.pad)
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        with torch.no_grad():
            self.embed.weight[self.pad].zero_()
        dims = [cfg.embed_dim] + [cfg.hidden_dim] * cfg.num_layers
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.head = nn.Linear(dims[-1], num_labels)
        self.activation = torch.relu if cfg.activation == "relu" else torch.tanh

    def max_positions(self) -> Tuple[int, int]:
        return self.cfg.max_positions, 1 << 30

    def word_embeddings(self) -> Dict[str, WordTable]:
        return {"embed_path": WordTable(self.embed)}

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                segments: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``src_tokens`` ``(B, S)`` -> logits ``(B, K)``; ``segments`` is not used (a bag of words has no order)."""
        cfg = self.cfg
        if src_tokens.size(1) > cfg.max_positions:
            raise SeqkitError(f"input of {src_tokens.size(1)} tokens exceeds model.max_positions={cfg.max_positions}")
        keep = src_tokens.ne(self.pad)  # (B, S)
        if self.training and cfg.word_dropout > 0:
            keep = word_dropout_mask(keep, cfg.word_dropout)
        w = keep.unsqueeze(2).to(self.embed.weight.dtype)  # (B, S, 1)
        x = (self.embed(src_tokens) * w).sum(dim=1) / w.sum(dim=1).clamp(min=1)  # (B, E)
        for layer in self.layers:
            x = self.activation(layer(dropout(x, cfg.dropout, self.training)))  # (B, D)
        return self.head(dropout(x, cfg.dropout, self.training))  # (B, K)
