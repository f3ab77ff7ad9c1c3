"""Layers shared by model families: attention, positions, transformer layers."""

from seqkit.models.modules.attention import MultiheadAttention  # noqa: F401
from seqkit.models.modules.positions import LearnedPositions, SinusoidalPositions  # noqa: F401
