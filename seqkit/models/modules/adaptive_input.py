"""Adaptive input embeddings (Baevski & Auli, 2019) that share the adaptive softmax's weights.

The vocabulary (sorted by count) is split into the softmax's bands: tokens ``0..cutoff[0]`` are
embedded at dimension C by the rows of the softmax head, tokens of tail cluster i at dimension
``d_i = C / factor**(i+1)`` by the rows of that cluster's output matrix, then projected to C by the
transpose of the cluster's own projection. Rare words get small vectors, trained by both their
input and output occurrences; the untied 33k x 256 table of a word-level model disappears.

Shapes: N tokens, C model dimension, d_i a tail cluster's dimension.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def init_shared(softmax: nn.AdaptiveLogSoftmaxWithLoss) -> None:
    """Normal initialisation that gives every band's input vectors std C^-0.5 (as an ``nn.Embedding``
    of a Transformer here) and the output logits std about 1 on unit-variance features."""
    C = softmax.in_features
    nn.init.normal_(softmax.head.weight, std=C**-0.5)  # (cutoff[0] + clusters, C)
    for proj, out in softmax.tail:
        nn.init.normal_(proj.weight, std=C**-0.5)  # (d_i, C)
        nn.init.normal_(out.weight, std=out.in_features**-0.5)  # (cluster size, d_i)


class AdaptiveInput(nn.Module):
    """``forward(tokens)`` ``(...)`` -> ``(..., C)`` from the weights of ``softmax``.

    ``softmax`` is registered here as well as in the output layer: a fine-tuning run that drops the
    output layer (``pretraining_heads``) keeps the embeddings. Parameters are shared, so an
    optimizer (``model.parameters()``) and ``torch.save`` see each once."""

    def __init__(self, softmax: nn.AdaptiveLogSoftmaxWithLoss):
        super().__init__()
        self.softmax = softmax
        self.dim = softmax.in_features

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        flat = tokens.reshape(-1)  # (N,)
        head = self.softmax.head.weight  # (cutoff[0] + clusters, C)
        cut = self.softmax.cutoffs  # [cutoff[0], ..., V]
        out = head.new_zeros(flat.numel(), self.dim)  # (N, C)
        rows = flat < cut[0]
        out[rows] = F.embedding(flat[rows], head)
        for i, (proj, emb) in enumerate(self.softmax.tail):
            rows = (flat >= cut[i]) & (flat < cut[i + 1])
            if rows.any():
                # (n, d_i) @ (d_i, C): the transpose of the cluster's projection C -> d_i
                out[rows] = F.embedding(flat[rows] - cut[i], emb.weight) @ proj.weight
        return out.view(*tokens.shape, self.dim)
