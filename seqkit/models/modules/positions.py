"""Position embeddings: fixed sinusoids (Vaswani et al.) or learned vectors."""

from __future__ import annotations

import math

import torch
from torch import nn


class SinusoidalPositions(nn.Module):
    """``forward(T, offset)`` -> ``(T, C)`` sinusoids for positions offset..offset+T-1."""

    def __init__(self, num_positions: int, embed_dim: int):
        super().__init__()
        self.num_positions = num_positions
        half = embed_dim // 2
        freq = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / max(half - 1, 1)))
        angles = torch.arange(num_positions, dtype=torch.float32)[:, None] * freq[None, :]  # (P, C/2)
        table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
        if embed_dim % 2:
            table = torch.cat([table, torch.zeros(num_positions, 1)], dim=1)
        # not a parameter and not saved: it is a pure function of the config
        self.register_buffer("table", table, persistent=False)

    def forward(self, length: int, offset: int = 0) -> torch.Tensor:
        return self.table[offset : offset + length]

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        """Vectors of any positions ``(...)`` -> ``(..., C)`` (one per row when decoding prompts)."""
        return self.table[positions]


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
