"""Sampling candidates: top-k / nucleus (top-p) restriction and one draw per hypothesis.

Each row of ``lprobs`` is one independent sample; the generator treats every sample as its own
beam-1 search, so a sample that ends leaves the batch at once. Draws use torch's global RNG
(the caller seeds it). Scores stay the model's log-probs (after temperature and penalties), not
the renormalized restricted distribution, as in fairseq. With both top-k and top-p the nucleus
is taken within the k best.
"""

from __future__ import annotations

import math
from typing import Tuple

import torch

NUCLEUS_FIRST_TRY = 64  # a nucleus usually fits in the 64 best tokens: topk(64) is far cheaper than a sort


def best_tokens(lprobs: torch.Tensor, topk: int, topp: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """The tokens a draw may pick, best first: log-probs and ids ``(R, k)``, dropped ones at -inf.

    ``topk`` <= 0 and ``topp`` <= 0 (or >= 1) mean no restriction of that kind.
    """
    V = lprobs.size(-1)
    k = topk if 0 < topk < V else V
    use_p = 0.0 < topp < 1.0
    if use_p and k > NUCLEUS_FIRST_TRY:
        vals, idx = lprobs.topk(NUCLEUS_FIRST_TRY, dim=-1)  # (R, 64)
        if not bool((vals.exp().sum(-1) >= topp).all()):  # some row's nucleus is wider: take all k
            vals, idx = lprobs.topk(k, dim=-1)
    else:
        vals, idx = lprobs.topk(k, dim=-1)  # (R, k), sorted
    if use_p:
        probs = vals.exp()
        mass_before = probs.cumsum(-1) - probs  # (R, k): probability of the strictly better tokens
        vals = vals.masked_fill(mass_before >= topp, -math.inf)  # the best token has 0 < p: it stays
    return vals, idx


def sample_step(lprobs: torch.Tensor, cum: torch.Tensor, topk: int, topp: float):
    """One token per row. ``lprobs`` ``(R, V)``, ``cum`` ``(R,)`` -> scores, tokens, beams ``(R, 1)``.

    Returned in the beam step's layout (units of width 1, one candidate each): cumulative score,
    token, and source beam (always 0).
    """
    if topk > 0 or 0.0 < topp < 1.0:
        vals, idx = best_tokens(lprobs, topk, topp)  # (R, k)
        tokens = idx.gather(1, torch.multinomial(vals.exp(), 1))  # (R, 1); exp(-inf) = 0: never drawn
    else:
        tokens = torch.multinomial(lprobs.exp(), 1)  # (R, 1)
    scores = cum.unsqueeze(1) + lprobs.gather(1, tokens)  # (R, 1)
    return scores, tokens, torch.zeros_like(tokens)
