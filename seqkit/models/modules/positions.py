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
