"""Prompt tuning (Lester et al. 2021): k learned vectors read after the first token of every input,
the body frozen. Every pretrained body takes them (``transfer_features(..., prefix=)``, see
:mod:`seqkit.models.modules.prefix`).

The vectors start as the input vectors of k tokens drawn from the body's most frequent 5,000
(``init=vocab``): Lester et al. found random starts lag far behind on small models. With k = 0 the
model is exactly frozen features.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from seqkit.core.config import arg


@dataclass
class PromptConfig:
    length: int = arg(20, "k: learned vectors put after the first token of every input (0: frozen features)", ge=0)
    init: str = arg("vocab", "vocab: start from the input vectors of k tokens drawn from the 5,000 most frequent "
                             "(Lester et al.: random starts lag on small models); random: normal with the std of "
                             "those vectors", choices=("vocab", "random"))
    lr_scale: float = arg(30.0, "the vectors' learning rate = the run's rate x lr_scale (Lester et al. tune prompts "
                                "at rates near 0.3, far above what the head takes; the head keeps the run's rate)",
                          gt=0)


class SoftPrompt(nn.Module):
    """``vectors`` ``(k, C)``; ``forward(B)`` -> ``(B, k, C)``."""

    def __init__(self, length: int, dim: int):
        super().__init__()
        self.vectors = nn.Parameter(torch.zeros(length, dim))

    def forward(self, batch_size: int) -> torch.Tensor:
        return self.vectors.unsqueeze(0).expand(batch_size, -1, -1)

    @torch.no_grad()
    def init_from(self, body: nn.Module, first_id: int, vocab_size: int, how: str) -> None:
        """Copy the input vectors of ``length`` distinct tokens among ids ``[first_id, first_id +
        5000)`` (a dictionary lists its symbols by frequency), or draw random vectors of their std."""
        k = self.vectors.size(0)
        if k == 0:
            return
        top = min(vocab_size, first_id + 5000) - first_id
        ids = first_id + torch.randperm(top)[:k]
        if len(ids) < k:  # a vocabulary smaller than the prompt: some tokens twice
            ids = ids[torch.randint(len(ids), (k,))]
        device = self.vectors.device
        vectors = body.transfer_embed(ids.to(device)).float()  # (k, C)
        if how == "random":
            vectors = torch.randn_like(vectors) * vectors.std()
        self.vectors.copy_(vectors)
