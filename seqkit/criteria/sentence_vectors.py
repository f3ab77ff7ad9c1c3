"""The sentence-vector objectives (tasks ``skip_thought`` and ``quick_thought``).

``skip_thought`` (Kiros et al., 2015): the summed cross-entropy of the previous and the next
sentence's tokens under the two teacher-forced decoders; ``sample_size`` = the scored tokens of
both, so the logged loss is per neighbour token (``prev_loss`` and ``next_loss``: each side's own).

``quick_thought`` (Logeswaran & Lee, 2018): for sentence r of a batch of contiguous sentences,
a softmax over the batch's other sentences c of the scores ``f(s_r) . g(s_c)`` (a sentence is
never its own candidate); the loss is ``-sum log p(c | r)`` over r's true neighbours c (the
previous and the next sentence of its document that are in the batch). ``sample_size`` = those
(sentence, neighbour) pairs; ``accuracy`` (the task's metric) is the share of sentences with a
neighbour in the batch whose best-scored candidate is one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Tuple

import torch
import torch.nn.functional as F

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import CRITERIA


@dataclass
class SkipThoughtLossConfig:
    name: str = arg("skip_thought", "registry name")


@dataclass
class QuickThoughtLossConfig:
    name: str = arg("quick_thought", "registry name")


def _check_task(task: Any, name: str) -> None:
    if getattr(task, "model_kind", None) != name:
        raise SeqkitError(f"criterion {name} trains task {name}, not task {task.cfg.name}; use "
                          f"criterion={getattr(task, 'model_kind', 'cross_entropy')}")


def skip_thought_terms(logits: torch.Tensor, target: torch.Tensor, pad: int) -> torch.Tensor:
    """Summed NLL of the previous and the next sentence ``(2,)`` from logits ``(B, 2, T, V)`` and
    targets ``(B, 2, T)`` (``pad`` unscored)."""
    B, _, T, V = logits.shape
    nll = F.cross_entropy(logits.float().reshape(-1, V), target.reshape(-1), ignore_index=pad, reduction="none")
    return nll.view(B, 2, T).sum(dim=(0, 2))  # (2,)


def quick_thought_terms(f: torch.Tensor, g: torch.Tensor, target: torch.Tensor
                        ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``f``, ``g`` ``(B, D)``, ``target`` ``(B, B)`` bool -> (summed NLL of the targets, sentences
    whose best candidate is a target, sentences with a target)."""
    scores = f.float() @ g.float().t()  # (B, B)
    eye = torch.eye(scores.size(0), dtype=torch.bool, device=scores.device)
    # finite, not -inf: a batch of one sentence has no candidate, and its row must stay finite
    scores = scores.masked_fill(eye, torch.finfo(scores.dtype).min)
    lprobs = scores.log_softmax(dim=1)  # (B, B)
    nll = -(lprobs * target).sum()
    rows = target.any(dim=1)  # (B,)
    best = target.gather(1, scores.argmax(dim=1, keepdim=True)).squeeze(1)  # (B,)
    return nll, (best & rows).sum(), rows.sum()


@CRITERIA.register("skip_thought", SkipThoughtLossConfig)
class SkipThoughtCriterion:
    def __init__(self, cfg: SkipThoughtLossConfig, task: Any):
        _check_task(task, "skip_thought")
        self.cfg, self.pad = cfg, task.dictionary.pad()

    def __call__(self, model: Any, sample: Dict[str, Any]) -> Tuple[torch.Tensor, int, Dict[str, Any]]:
        logits = model(**sample["net_input"])  # (B, 2, T, V)
        terms = skip_thought_terms(logits, sample["target"], self.pad)  # (2,)
        loss = terms.sum()
        n = sample["ntokens"]
        counts = sample["target"].ne(self.pad).sum(dim=(0, 2))  # (2,) scored tokens of each side
        logs = {"loss": loss.detach(), "nll_loss": loss.detach(), "prev_nll": terms[0].detach(),
                "next_nll": terms[1].detach(), "prev_tokens": counts[0], "next_tokens": counts[1], "ntokens": n,
                "nsentences": sample["nsentences"], "sample_size": n}
        return loss, n, logs


@CRITERIA.register("quick_thought", QuickThoughtLossConfig)
class QuickThoughtCriterion:
    def __init__(self, cfg: QuickThoughtLossConfig, task: Any):
        _check_task(task, "quick_thought")
        self.cfg = cfg

    def __call__(self, model: Any, sample: Dict[str, Any]) -> Tuple[torch.Tensor, int, Dict[str, Any]]:
        out = model(**sample["net_input"])
        nll, correct, rows = quick_thought_terms(out["f"], out["g"], sample["target"])
        n = sample["sample_size"]
        logs = {"loss": nll.detach(), "correct": correct, "rows": rows, "ntokens": sample["ntokens"],
                "nsentences": sample["nsentences"], "sample_size": n}
        return nll, n, logs
