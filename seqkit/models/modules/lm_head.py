"""The output layer of a language model: a full softmax (its weight optionally the input
embedding's) or an adaptive softmax (Grave et al., 2017) for large vocabularies.

The adaptive softmax is torch's ``nn.AdaptiveLogSoftmaxWithLoss``: the ``cutoff[0]`` most
frequent tokens (dictionaries are sorted by count) and one entry per tail cluster form the head;
tail cluster i holds tokens ``cutoff[i]..cutoff[i+1]`` at dimension ``C / factor**(i+1)``. Training
scores only the targets' clusters, so a 33k-word vocabulary costs about what ``cutoff[0]`` words do.

Shapes: N positions, C features, V vocabulary.
"""

from __future__ import annotations

from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import nn

from seqkit.core.errors import SeqkitError


def parse_cutoff(cutoff: Optional[List[int]], vocab_size: int) -> List[int]:
    """Checked cutoffs (increasing, inside the vocabulary); empty = full softmax."""
    cut = [int(c) for c in (cutoff or [])]
    if cut and (any(b <= a for a, b in zip(cut, cut[1:])) or cut[0] <= 0 or cut[-1] >= vocab_size):
        raise SeqkitError(f"model.adaptive_softmax_cutoff={cut}: cutoffs must increase and lie in (0, "
                          f"{vocab_size}) (the dictionary size)")
    return cut


class LMHead(nn.Module):
    """``logits(x)`` ``(..., C)`` -> ``(..., V)`` (log-probs when adaptive); ``target_log_probs(x,
    target)`` ``(N, C)``, ``(N,)`` -> ``(N,)`` without the full ``(N, V)`` when adaptive.

    ``tied``: the input embedding whose weight is also the output matrix (it stays the
    embedding's parameter: the head only reads it, so it is saved and converted once).
    ``output_bias``: a fixed bias buffer ``bias`` ``(V,)`` on the logits (zeros until a converter
    fills it)."""

    def __init__(self, dim: int, vocab_size: int, tied: Optional[nn.Embedding] = None,
                 cutoff: Optional[List[int]] = None, factor: float = 4.0, output_bias: bool = False):
        super().__init__()
        cut = parse_cutoff(cutoff, vocab_size)
        if cut and output_bias:
            raise SeqkitError("model.output_bias needs a full softmax: set model.adaptive_softmax_cutoff=[]")
        # a fixed bias ``(V,)`` added to the logits, saved and never trained: BART's final_logits_bias,
        # and -inf at the symbols an imported model's vocabulary lacks (seqkit's specials it never predicts)
        self.bias: Optional[torch.Tensor]
        self.register_buffer("bias", torch.zeros(vocab_size) if output_bias else None)
        self._tied = (tied,) if tied is not None else ()  # a tuple: not registered as a submodule
        self.adaptive = None
        self.weight = None
        if cut:
            if tied is not None:
                raise SeqkitError("an adaptive softmax cannot share the input embedding: set "
                                  "model.share_input_output_embed=false")
            self.adaptive = nn.AdaptiveLogSoftmaxWithLoss(dim, vocab_size, cut, div_value=factor)
        elif tied is None:
            self.weight = nn.Parameter(torch.empty(vocab_size, dim))
            nn.init.normal_(self.weight, mean=0.0, std=dim**-0.5)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        if self.adaptive is not None:
            return self.adaptive.log_prob(x.reshape(-1, x.size(-1))).view(*x.shape[:-1], -1)
        logits = F.linear(x, self._tied[0].weight if self._tied else self.weight)
        return logits if self.bias is None else logits + self.bias.to(logits.dtype)

    def target_log_probs(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if self.adaptive is None:
            logits = self.logits(x)
            lprobs = logits.log_softmax(-1, dtype=torch.promote_types(logits.dtype, torch.float32))
            return lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        return self.adaptive(x, target).output

    def scored(self, x: torch.Tensor, target: torch.Tensor, pad: int) -> torch.Tensor:
        """``x`` ``(B, T, C)``, ``target`` ``(B, T)`` -> each target's log-prob ``(B, T)``, 0 at ``pad``;
        only the scored positions go through the output layer."""
        keep = target.ne(pad)
        out = x.new_zeros(target.shape, dtype=torch.promote_types(x.dtype, torch.float32))
        out[keep] = self.target_log_probs(x[keep], target[keep]).to(out.dtype)
        return out
