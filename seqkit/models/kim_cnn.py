"""Convolutional sentence classifier (Kim, 2014): CNN-rand (embeddings learned from scratch), or with
``model.embed_path=VECTORS`` CNN-non-static (pretrained vectors, fine-tuned) and, adding
``model.freeze_embed=true``, CNN-static (kept fixed): :mod:`seqkit.models.modules.pretrained_embeddings`.

Shapes: B batch, S input length, E embed_dim, F filters per width, W number of widths, K labels.

embeddings -> for each width k: wide 1-D convolution (k - 1 zero vectors on each side, as in Kim's
code) -> ReLU -> max over time -> concatenated ``(B, W*F)`` -> dropout -> linear to K.

Wide convolutions give every sentence, however short, at least one window; the windows that
overlap no real token are masked with -inf before the max. A window running past the sentence's
end reads zero vectors whether they come from the convolution's own padding or from the batch's
pad tokens (whose embeddings are zeroed), so padding never changes a sentence's result.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.models.base import EncoderClassifierModel
from seqkit.models.modules.dropout import dropout
from seqkit.models.modules.pretrained_embeddings import WordTable, embed_path_arg, freeze_embed_arg


@dataclass
class KimCNNConfig:
    name: str = arg("kim_cnn", "registry name of the model family")
    embed_dim: int = arg(300, "embedding dimension E", gt=0)
    kernel_sizes: List[int] = arg(help="convolution widths (tokens), one bank of filters each",
                                  factory=lambda: [3, 4, 5], ge=1)
    num_filters: int = arg(100, "filters F per width", gt=0)
    dropout: float = arg(0.5, "dropout on the pooled features", ge=0, lt=1)
    embed_dropout: float = arg(0.0, "dropout on the embeddings (Kim: none)", ge=0, lt=1)
    max_positions: int = arg(1024, "longest input (tokens, <s> and </s> included)", gt=0)
    embed_path: str = embed_path_arg()
    freeze_embed: bool = freeze_embed_arg()


@MODELS.preset("kim_cnn_rand")
def kim_cnn_rand() -> KimCNNConfig:
    """Kim's CNN-rand: embeddings 300, widths 3, 4, 5 with 100 filters each, dropout 0.5."""
    return KimCNNConfig()


@MODELS.preset("kim_cnn_tiny")
def kim_cnn_tiny() -> KimCNNConfig:
    """For tests and CPU smoke runs: embeddings 16, widths 2 and 3 with 6 filters each."""
    return dataclasses.replace(kim_cnn_rand(), embed_dim=16, kernel_sizes=[2, 3], num_filters=6, max_positions=256)


@MODELS.register("kim_cnn", KimCNNConfig)
class KimCNNClassifier(EncoderClassifierModel):
    """Convolutions of several widths, max-pooled over time -> logits ``(B, K)``."""

    kind = "classifier"

    def __init__(self, cfg: KimCNNConfig, src_dict: Dictionary, num_labels: int):
        super().__init__()
        if not cfg.kernel_sizes:
            raise SeqkitError("model.kernel_sizes is empty: give at least one convolution width")
        self.cfg, self.pad = cfg, src_dict.pad()
        self.embed = nn.Embedding(len(src_dict), cfg.embed_dim, padding_idx=self.pad)
        nn.init.uniform_(self.embed.weight, -0.25, 0.25)  # Kim's range for words without pre-trained vectors
        with torch.no_grad():
            self.embed.weight[self.pad].zero_()
        self.convs = nn.ModuleList(nn.Conv1d(cfg.embed_dim, cfg.num_filters, k, padding=k - 1)
                                   for k in cfg.kernel_sizes)
        self.head = nn.Linear(len(cfg.kernel_sizes) * cfg.num_filters, num_labels)

    def max_positions(self) -> Tuple[int, int]:
        return self.cfg.max_positions, 1 << 30

    def word_embeddings(self) -> Dict[str, WordTable]:
        return {"embed_path": WordTable(self.embed)}

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                segments: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``src_tokens`` ``(B, S)`` -> logits ``(B, K)``; ``segments`` is not used."""
        cfg = self.cfg
        S = src_tokens.size(1)
        if S > cfg.max_positions:
            raise SeqkitError(f"input of {S} tokens exceeds model.max_positions={cfg.max_positions}")
        real = src_tokens.ne(self.pad)  # (B, S)
        lengths = real.sum(dim=1, keepdim=True)  # (B, 1)
        x = self.embed(src_tokens) * real.unsqueeze(2).to(self.embed.weight.dtype)  # (B, S, E), zeros at pads
        x = dropout(x, cfg.embed_dropout, self.training).transpose(1, 2)  # (B, E, S)
        pooled = []
        for k, conv in zip(cfg.kernel_sizes, self.convs):
            h = F.relu(conv(x))  # (B, F, S + k - 1): window t covers input positions t-k+1 .. t
            # window t overlaps a real token iff t <= length + k - 2
            t = torch.arange(S + k - 1, device=x.device)
            h = h.masked_fill((t.unsqueeze(0) > lengths + k - 2).unsqueeze(1), -math.inf)
            pooled.append(h.max(dim=2).values)  # (B, F)
        feats = torch.cat(pooled, dim=1)  # (B, W*F)
        return self.head(dropout(feats, cfg.dropout, self.training))  # (B, K)
