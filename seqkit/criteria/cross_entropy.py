"""Token-level cross-entropy, plain and label-smoothed (Szegedy et al., 2016)."""

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
        # half-precision logits (autocast) are normalized in fp32
        lprobs = (logits.float() if logits.element_size() < 4 else logits).log_softmax(dim=-1)  # (N, V)
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


def smoothed_nll(model: Any, sample: Dict[str, Any], pad: int, eps: float) -> Tuple[torch.Tensor, torch.Tensor, int]:
    """Summed (label-smoothed) loss and NLL over the non-pad target tokens, and their count."""
    net_input = sample["net_input"]
    logits = model(net_input["src_tokens"], net_input["src_lengths"], net_input["prev_output_tokens"])  # (B, T, V)
    target = sample["target"].reshape(-1)  # (B*T,)
    keep = target.ne(pad)
    # all positions go through the log-softmax: batches are sorted by target length so padding is
    # rare, and boolean-indexing the (B, T, V) logits would cost a scatter of the same size in backward
    loss, nll = SmoothedNLL.apply(logits.reshape(-1, logits.size(-1)), target, keep.float(), eps)
    return loss.sum(), nll.sum(), int(keep.sum())


def _logging(loss: torch.Tensor, nll: torch.Tensor, sample: Dict[str, Any], ntokens: int) -> Dict[str, float]:
    return {
        "loss": float(loss.detach()),
        "nll_loss": float(nll.detach()),
        "ntokens": ntokens,
        "nsentences": int(sample["target"].size(0)),
        "sample_size": ntokens,
    }


@CRITERIA.register("cross_entropy", CrossEntropyConfig)
class CrossEntropyCriterion:
    """Summed negative log-likelihood of the target tokens."""

    def __init__(self, cfg: CrossEntropyConfig, pad: int):
        self.cfg, self.pad = cfg, pad

    def __call__(self, model: Any, sample: Dict[str, Any]) -> Tuple[torch.Tensor, int, Dict[str, float]]:
        loss, nll, ntokens = smoothed_nll(model, sample, self.pad, 0.0)
        return loss, ntokens, _logging(loss, nll, sample, ntokens)


@CRITERIA.register("label_smoothed_cross_entropy", LabelSmoothedCrossEntropyConfig)
class LabelSmoothedCrossEntropyCriterion:
    """(1 - eps - eps_i) * nll + eps_i * sum_v(-log p_v), eps_i = eps / (V - 1), as in fairseq."""

    def __init__(self, cfg: LabelSmoothedCrossEntropyConfig, pad: int):
        self.cfg, self.pad = cfg, pad

    def __call__(self, model: Any, sample: Dict[str, Any]) -> Tuple[torch.Tensor, int, Dict[str, float]]:
        loss, nll, ntokens = smoothed_nll(model, sample, self.pad, self.cfg.label_smoothing)
        return loss, ntokens, _logging(loss, nll, sample, ntokens)
