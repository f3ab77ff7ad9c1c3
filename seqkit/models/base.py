"""The interface every encoder-decoder model offers the trainer and the generator.

The trainer calls ``forward``; the generator calls ``encode`` once, then ``decode_step`` once per
output position with a cache the model owns, reordering encoder output and cache as beams are
re-ranked and finished sentences leave the batch. Shapes: B batch (times beam in generation),
S source length, T target length, C model dim, V target vocabulary.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
from torch import nn

from seqkit.errors import SeqkitError

EncoderOut = Dict[str, torch.Tensor]  # every tensor has the batch on dim 0
Cache = Dict[str, torch.Tensor]  # every tensor has the batch on dim 0
# cache entries whose name starts with STATIC hold per-sentence values (e.g. cross-attention keys),
# equal across a sentence's beams: re-ranking beams never needs to move them
STATIC = "static:"


class EncoderDecoderModel(nn.Module):
    """Base class: subclasses implement ``encode``, ``decode`` and ``decode_step``."""

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor, prev_output_tokens: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits ``(B, T, V)`` for ``prev_output_tokens`` ``(B, T)``."""
        enc = self.encode(src_tokens, src_lengths)
        return self.decode(prev_output_tokens, enc)

    def encode(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> EncoderOut:
        """``src_tokens`` ``(B, S)`` right-padded -> encoder output (batch on dim 0)."""
        raise TypeError(f"{type(self).__name__} must implement encode")

    def decode(self, prev_output_tokens: torch.Tensor, enc: EncoderOut) -> torch.Tensor:
        """Full (non-incremental) decoder pass -> logits ``(B, T, V)``."""
        raise TypeError(f"{type(self).__name__} must implement decode")

    def init_cache(self, enc: EncoderOut, max_len: int) -> Cache:
        """An empty decoding cache for ``enc``'s batch and up to ``max_len`` steps."""
        return {}

    def decode_step(self, tokens: torch.Tensor, enc: EncoderOut, cache: Cache, step: int) -> torch.Tensor:
        """Incremental step: ``tokens`` ``(B, 1)`` is the input at position ``step`` -> logits ``(B, V)``.

        Must equal ``decode(prefix, enc)[:, step]`` for the prefix fed so far; updates ``cache``.
        """
        raise TypeError(f"{type(self).__name__} must implement decode_step")

    def decode_step_attention(
        self, tokens: torch.Tensor, enc: EncoderOut, cache: Cache, step: int, layer: Optional[int] = None
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``decode_step`` that also returns this step's attention over the source ``(B, S)``: each
        row sums to one over the sentence's non-pad source positions (alignments, heatmaps).

        ``layer`` picks one decoder layer where several attend (None: the model's default, e.g. the
        Transformer's last layer averaged over heads). Models without source attention raise.
        """
        raise SeqkitError(f"model {type(self).__name__} exposes no attention over the source "
                          "(print_alignment and attention plots need one that does)")

    @staticmethod
    def reorder(state: Dict[str, torch.Tensor], new_order: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Select batch rows ``new_order`` of every tensor (beam re-ranking, finished sentences leaving)."""
        return {k: v.index_select(0, new_order) for k, v in state.items()}

    def reorder_cache(self, cache: Cache, new_order: torch.Tensor, sentences_moved: bool) -> Cache:
        """Reorder the cache; ``STATIC`` entries only when ``sentences_moved`` (rows left the batch),
        not when beams of the same sentences were merely re-ranked."""
        return {k: v if (not sentences_moved and k.startswith(STATIC)) else v.index_select(0, new_order)
                for k, v in cache.items()}

    def max_positions(self) -> Tuple[int, int]:
        """Longest source and target (in tokens, eos included) the model accepts."""
        return (1 << 30, 1 << 30)
