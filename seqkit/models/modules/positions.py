"""Position embeddings: fixed sinusoids (Vaswani et al.) or learned vectors."""

from __future__ import annotations

import math

import torch
from torch import nn


# sinusoid frequencies 10000^(-i / d), i < C/2: tensor2tensor's d = C/2 - 1 (fairseq's and seqkit's),
# the paper's d = C/2 (Vaswani et al.'s 10000^(2i/C); Marian's); both put the sines first, then the cosines
SINUSOIDS = ("tensor2tensor", "vaswani")


def sinusoid_table(rows: int, embed_dim: int, frequencies: str = "tensor2tensor") -> torch.Tensor:
    """``(rows, C)`` sinusoids of positions 0..rows-1."""
    half = embed_dim // 2
    if frequencies == "tensor2tensor":  # in float32, as fairseq computes it
        freq = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / max(half - 1, 1)))
        angles = torch.arange(rows, dtype=torch.float32)[:, None] * freq[None, :]  # (P, C/2)
    else:  # in float64, then rounded, as Marian computes it
        power = torch.pow(torch.tensor(10000.0, dtype=torch.float64), torch.arange(half, dtype=torch.float64) * 2 / embed_dim)
        angles = torch.arange(rows, dtype=torch.float64)[:, None] / power[None, :]  # (P, C/2)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1).float()
    if embed_dim % 2:
        table = torch.cat([table, torch.zeros(rows, 1)], dim=1)
    return table


class SinusoidalPositions(nn.Module):
    """``forward(T, offset)`` -> ``(T, C)`` sinusoids for positions offset..offset+T-1.

    ``first_row``: the table row of position 0 (fairseq's tables start after its padding index:
    position p reads the sinusoid of p + 2); ``frequencies``: one of :data:`SINUSOIDS`."""

    def __init__(self, num_positions: int, embed_dim: int, first_row: int = 0, frequencies: str = "tensor2tensor"):
        super().__init__()
        if frequencies not in SINUSOIDS:
            raise ValueError(f"sinusoid frequencies {frequencies!r}: one of {', '.join(SINUSOIDS)}")
        self.num_positions, self.first_row = num_positions, first_row
        # not a parameter and not saved: it is a pure function of the config
        self.register_buffer("table", sinusoid_table(num_positions + first_row, embed_dim, frequencies), persistent=False)

    def forward(self, length: int, offset: int = 0) -> torch.Tensor:
        start = self.first_row + offset
        return self.table[start : start + length]

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        """Vectors of any positions ``(...)`` -> ``(..., C)`` (one per row when decoding prompts)."""
        return self.table[positions + self.first_row]


class LearnedPositions(nn.Module):
    """``forward(T, offset)`` -> ``(T, C)`` learned position vectors.

    ``first_row``: the table row of position 0 (RoBERTa's tables start at 2, after its padding
    index); the table holds ``num_positions + first_row`` rows."""

    def __init__(self, num_positions: int, embed_dim: int, first_row: int = 0):
        super().__init__()
        self.num_positions, self.first_row = num_positions, first_row
        self.weight = nn.Parameter(torch.empty(num_positions + first_row, embed_dim))
        nn.init.normal_(self.weight, mean=0.0, std=embed_dim**-0.5)

    def forward(self, length: int, offset: int = 0) -> torch.Tensor:
        start = self.first_row + offset
        return self.weight[start : start + length]

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        """Vectors of any positions ``(...)`` -> ``(..., C)``."""
        return self.weight[positions + self.first_row]


def relative_buckets(relative: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's bucket of each key - query distance ``relative`` (an integer tensor): half the buckets
    (per direction when ``bidirectional``) hold one distance each, the rest grow logarithmically up to
    ``max_distance``; a causal decoder sees only the past, so its distances are folded to >= 0."""
    buckets = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative > 0).long() * num_buckets
        distance = relative.abs()
    else:
        distance = -torch.clamp(relative, max=0)
    exact = num_buckets // 2
    large = exact + (torch.log(distance.float() / exact) / math.log(max_distance / exact)
                     * (num_buckets - exact)).long()
    large = torch.clamp(large, max=num_buckets - 1)
    return buckets + torch.where(distance < exact, distance, large)


class RelativePositionBias(nn.Module):
    """T5's relative positions: one learned scalar per head and distance bucket, added to the
    attention scores of every layer of a stack. ``forward(T, S, offset)`` -> ``(1, H, T, S)`` for
    queries at positions offset..offset+T-1 over keys at 0..S-1."""

    def __init__(self, num_buckets: int, max_distance: int, heads: int, bidirectional: bool):
        super().__init__()
        self.num_buckets, self.max_distance, self.bidirectional = num_buckets, max_distance, bidirectional
        self.weight = nn.Parameter(torch.empty(num_buckets, heads))  # (buckets, H)
        nn.init.normal_(self.weight, std=heads**-0.5)

    def forward(self, queries: int, keys: int, offset: int = 0) -> torch.Tensor:
        q = torch.arange(offset, offset + queries, device=self.weight.device)[:, None]
        k = torch.arange(keys, device=self.weight.device)[None, :]
        buckets = relative_buckets(k - q, self.bidirectional, self.num_buckets, self.max_distance)  # (T, S)
        return self.weight[buckets].permute(2, 0, 1).unsqueeze(0)  # (1, H, T, S)
