"""Cross-entropy, plain and label-smoothed (Szegedy et al., 2016), for every task.

A criterion is built as ``Criterion(cfg, task)``. It calls ``model(**sample["net_input"])`` and
scores the logits ``(..., V)`` against ``sample["target"]`` ``(...)``, skipping targets equal to
``task.ignore_index`` (translation: padding; classification/tagging: unlabelled positions). Where
the task counts metrics (``task.count_metrics(logits, sample)``: accuracy, F1, ...), the counts go
into the logging output, to be summed and turned into metrics by the task's ``reduce_metrics``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Tuple

import torch

from seqkit.dataclass_utils import arg
from seqkit.registry import CRITERIA


@dataclass
class CrossEntropyConfig:
    name: str = arg("cross_entropy", "registry name")


@dataclass
class AdaptiveLossConfig:
    name: str = arg("adaptive_loss", "registry name")


@dataclass
class LabelSmoothedCrossEntropyConfig:
    name: str = arg("label_smoothed_cross_entropy", "registry name")
    label_smoothing: float = arg(0.1, "epsilon: probability mass spread uniformly over the other tokens",
                                 ge=0, lt=1)


class SmoothedNLL(torch.autograd.Function):
    """Label-smoothed NLL of logits with a hand-written backward.

    Per position: loss = -sum_v q_v log p_v with q_target = 1 - eps and q_v = eps_i = eps / (V - 1)
    elsewhere (fairseq's (1 - eps - eps_i) * nll + eps_i * sum_v(-log p_v)), so d loss / d logits
    = p - q. Autograd's version builds that from log_softmax, gather and sum backward passes,
    each a (N, V) pass plus a zero-filled scatter; this one is one exp and two in-place ops.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, keep: torch.Tensor, eps: float):
        # logits (N, V) any float dtype; target (N,) long; keep (N,) float 1/0
        # half-precision logits (autocast) are normalized in fp32, read as they are (no fp32 copy first)
        dtype = torch.float32 if logits.element_size() < 4 else logits.dtype
        lprobs = logits.log_softmax(dim=-1, dtype=dtype)  # (N, V)
        nll = -lprobs.gather(1, target[:, None]).squeeze(1) * keep  # (N,)
        eps_i = eps / (lprobs.size(-1) - 1)
        loss = (1.0 - eps - eps_i) * nll + eps_i * (-lprobs.sum(dim=-1) * keep) if eps > 0 else nll.clone()
        ctx.save_for_backward(lprobs, target, keep)
        ctx.eps, ctx.eps_i, ctx.dtype = eps, eps_i, logits.dtype
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, grad_nll: torch.Tensor):
        lprobs, target, keep = ctx.saved_tensors
        grad = lprobs.exp_()  # p (N, V)
        if ctx.eps_i:
            grad.sub_(ctx.eps_i)
        rows = torch.arange(grad.size(0), device=grad.device)
        grad[rows, target] -= 1.0 - ctx.eps - ctx.eps_i
        grad.mul_((grad_loss * keep)[:, None])
        return grad.to(ctx.dtype), None, None, None


def smoothed_nll(model: Any, sample: Dict[str, Any], ignore_index: int,
                 eps: float) -> Tuple[torch.Tensor, torch.Tensor, int, torch.Tensor]:
    """Summed (label-smoothed) loss and NLL over the scored targets, their count, and the logits."""
    logits = model(**sample["net_input"])  # (B, T, V) translation/tagging, (B, K) classification
    target = sample["target"].reshape(-1)  # (N,)
    keep = target.ne(ignore_index)
    # all positions go through the log-softmax: batches are sorted by target length so padding is
    # rare, and boolean-indexing the (B, T, V) logits would cost a scatter of the same size in backward
    safe = target if ignore_index >= 0 else target.clamp(min=0)  # gather needs a valid index everywhere
    loss, nll = SmoothedNLL.apply(logits.reshape(-1, logits.size(-1)), safe, keep.float(), eps)
    return loss.sum(), nll.sum(), int(keep.sum()), logits


def _logging(task: Any, loss: torch.Tensor, nll: torch.Tensor, sample: Dict[str, Any], ntokens: int,
             logits: torch.Tensor) -> Dict[str, float]:
    out = {
        "loss": float(loss.detach()),
        "nll_loss": float(nll.detach()),
        "ntokens": int(sample.get("ntokens", ntokens)),  # throughput; equals sample_size for translation
        "nsentences": int(sample["target"].size(0)),
        "sample_size": ntokens,
    }
    count = getattr(task, "count_metrics", None)
    if count is not None:
        out.update(count(logits, sample))
    return out


@CRITERIA.register("cross_entropy", CrossEntropyConfig)
class CrossEntropyCriterion:
    """Summed negative log-likelihood of the target tokens."""

    def __init__(self, cfg: CrossEntropyConfig, task: Any):
        self.cfg, self.task = cfg, task

    def __call__(self, model: Any, sample: Dict[str, Any]) -> Tuple[torch.Tensor, int, Dict[str, float]]:
        loss, nll, ntokens, logits = smoothed_nll(model, sample, self.task.ignore_index, 0.0)
        return loss, ntokens, _logging(self.task, loss, nll, sample, ntokens, logits)


@CRITERIA.register("label_smoothed_cross_entropy", LabelSmoothedCrossEntropyConfig)
class LabelSmoothedCrossEntropyCriterion:
    """(1 - eps - eps_i) * nll + eps_i * sum_v(-log p_v), eps_i = eps / (V - 1), as in fairseq."""

    def __init__(self, cfg: LabelSmoothedCrossEntropyConfig, task: Any):
        self.cfg, self.task = cfg, task

    def __call__(self, model: Any, sample: Dict[str, Any]) -> Tuple[torch.Tensor, int, Dict[str, float]]:
        loss, nll, ntokens, logits = smoothed_nll(model, sample, self.task.ignore_index, self.cfg.label_smoothing)
        return loss, ntokens, _logging(self.task, loss, nll, sample, ntokens, logits)


@CRITERIA.register("adaptive_loss", AdaptiveLossConfig)
class AdaptiveLossCriterion:
    """Summed NLL of a language model's targets through its adaptive softmax (Grave et al., 2017;
    fairseq's ``adaptive_loss``): ``model(..., target=)`` returns the targets' log-probs ``(B, T)``
    and the full ``(B, T, V)`` is never built. Works with any language model (a full softmax
    computes the same NLL as ``cross_entropy``, only slower)."""

    def __init__(self, cfg: AdaptiveLossConfig, task: Any):
        if getattr(task, "model_kind", None) != "lm":
            from seqkit.errors import SeqkitError

            raise SeqkitError(f"criterion adaptive_loss trains language models (task language_modeling), not task "
                              f"{task.cfg.name}")
        self.cfg, self.task = cfg, task

    def __call__(self, model: Any, sample: Dict[str, Any]) -> Tuple[torch.Tensor, int, Dict[str, float]]:
        target = sample["target"]  # (B, T), ignore_index where not scored
        lprobs = model(**sample["net_input"], target=target)  # (B, T), 0 where not scored
        keep = target.ne(self.task.ignore_index)
        nll = -lprobs.masked_fill(~keep, 0.0).sum()
        ntokens = int(keep.sum())
        return nll, ntokens, _logging(self.task, nll, nll, sample, ntokens, lprobs)
