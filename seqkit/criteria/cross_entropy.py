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

from seqkit.core.config import arg
from seqkit.core.registry import CRITERIA


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


# devices where SmoothedNLL's half-precision logits take the lean path; on a 2-core Xeon (AMX) the
# CPU's bf16 training of the Multi30k model measured 3-4% slower with it (4,410 / 4,369 against
# 4,597 / 4,488 tokens/s, benchmarks/translation.py), so the CPU keeps fp32 log-probs
LEAN_DEVICES = ("cuda",)


class SmoothedNLL(torch.autograd.Function):
    """Label-smoothed NLL of logits with a hand-written backward.

    Per position: loss = -sum_v q_v log p_v with q_target = 1 - eps and q_v = eps_i = eps / (V - 1)
    elsewhere (fairseq's (1 - eps - eps_i) * nll + eps_i * sum_v(-log p_v)), so d loss / d logits
    = p - q. Autograd's version builds that from log_softmax, gather and sum backward passes,
    each a (N, V) pass plus a zero-filled scatter; this one is one exp and two in-place ops.

    fp32/fp64 logits keep their log-probs (as big as the logits) for an exact backward, and so do
    half-precision logits off ``LEAN_DEVICES`` (in fp32). On a GPU bf16/fp16 logits (autocast) are
    normalized in fp32 a block of rows at a time; what is kept for backward is
    the logits themselves plus an fp32 log-sum-exp per row, and backward writes p - q, rebuilt in
    fp32 block by block, straight into the logits' dtype: no fp32 (N, V) tensor lives from forward
    to backward (fp32 log-probs took twice the bf16 logits' memory).
    """

    # the largest fp32 temporary of the bf16/fp16 path, in elements (256 MiB); eager only: under
    # torch.compile the rows go in one block, N being a symbol and Inductor fusing the fp32 math
    block_elements = 1 << 26

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, keep: torch.Tensor, eps: float):
        # logits (N, V) any float dtype; target (N,) long; keep (N,) float 1/0
        eps_i = eps / (logits.size(-1) - 1)
        ctx.eps, ctx.eps_i = eps, eps_i
        ctx.dtype = logits.dtype
        if logits.element_size() >= 4 or logits.device.type not in LEAN_DEVICES:
            lprobs = logits.log_softmax(dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))  # (N, V)
            nll, smooth = -lprobs.gather(1, target[:, None]).squeeze(1), -lprobs.sum(dim=-1)  # (N,) each
            ctx.save_for_backward(lprobs, target, keep)
        else:
            blocks = [SmoothedNLL._terms(logits[rows], target[rows]) for rows in SmoothedNLL._blocks(logits)]
            nll, smooth, lse = (torch.cat(parts) if len(parts) > 1 else parts[0] for parts in zip(*blocks))
            ctx.save_for_backward(logits, target, keep, lse)
        nll = nll * keep
        loss = (1.0 - eps - eps_i) * nll + eps_i * (smooth * keep) if eps > 0 else nll.clone()
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, grad_nll: torch.Tensor):
        saved = ctx.saved_tensors
        if len(saved) == 3:  # p from the kept log-probs, in place
            lprobs, target, keep = saved
            grad = SmoothedNLL._p_minus_q(lprobs.exp_(), target, grad_loss * keep, ctx)
            return grad.to(ctx.dtype), None, None, None
        logits, target, keep, lse = saved
        scale = grad_loss * keep  # (N,)
        grad = torch.empty_like(logits)  # (N, V) in the logits' dtype
        for rows in SmoothedNLL._blocks(logits):
            p = (logits[rows] - lse[rows, None]).exp_()  # fp32 (rows, V): the promotion does the upcast
            grad[rows] = SmoothedNLL._p_minus_q(p, target[rows], scale[rows], ctx)
        return grad, None, None, None

    @staticmethod
    def _p_minus_q(p: torch.Tensor, target: torch.Tensor, scale: torch.Tensor, ctx: Any) -> torch.Tensor:
        """``(p - q) * scale`` in place in ``p`` ``(n, V)``; ``target``, ``scale`` ``(n,)``."""
        if ctx.eps_i:
            p.sub_(ctx.eps_i)
        rows = torch.arange(p.size(0), device=p.device)
        p[rows, target] -= 1.0 - ctx.eps - ctx.eps_i
        return p.mul_(scale[:, None])

    @staticmethod
    def _terms(z: torch.Tensor, target: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """-log p_target, -sum_v log p_v and log-sum-exp, fp32 ``(n,)`` each, of half-precision
        logits ``z`` ``(n, V)``, read as they are (no fp32 copy of ``z`` first)."""
        lprobs = z.log_softmax(dim=-1, dtype=torch.float32)  # (n, V), freed with the block
        # at a row's largest logit log p = z_max - lse as the softmax computed it: lse without an exp pass
        lse = z.amax(dim=-1).float() - lprobs.amax(dim=-1)
        return -lprobs.gather(1, target[:, None]).squeeze(1), -lprobs.sum(dim=-1), lse

    @staticmethod
    def _blocks(logits: torch.Tensor) -> list:
        """Row slices of at most ``block_elements`` logits each (all rows at once under torch.compile)."""
        n, v = logits.shape
        if torch.compiler.is_compiling():
            return [slice(None)]
        step = max(1, SmoothedNLL.block_elements // v)
        return [slice(i, i + step) for i in range(0, n, step)] or [slice(None)]


def smoothed_nll(model: Any, sample: Dict[str, Any], ignore_index: int,
                 eps: float) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Summed (label-smoothed) loss and NLL over the scored targets, their count (a 0-d tensor: read
    on the host only when logged), and the logits."""
    logits = model(**sample["net_input"])  # (B, T, V) translation/tagging, (B, K) classification
    target = sample["target"].reshape(-1)  # (N,)
    keep = target.ne(ignore_index)
    # all positions go through the log-softmax: batches are sorted by target length so padding is
    # rare, and boolean-indexing the (B, T, V) logits would cost a scatter of the same size in backward
    safe = target if ignore_index >= 0 else target.clamp(min=0)  # gather needs a valid index everywhere
    loss, nll = SmoothedNLL.apply(logits.reshape(-1, logits.size(-1)), safe, keep.float(), eps)
    return loss.sum(), nll.sum(), keep.sum(), logits


def _logging(task: Any, loss: torch.Tensor, nll: torch.Tensor, sample: Dict[str, Any], ntokens: Any,
             logits: torch.Tensor) -> Dict[str, Any]:
    """The logging output: numbers, or 0-d tensors left on the device (a GPU step never waits to
    read them; the trainer sums them and reads them once per log line)."""
    out = {
        "loss": loss.detach(),
        "nll_loss": nll.detach(),
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

    def __call__(self, model: Any, sample: Dict[str, Any]) -> Tuple[torch.Tensor, Any, Dict[str, Any]]:
        loss, nll, ntokens, logits = smoothed_nll(model, sample, self.task.ignore_index, 0.0)
        return loss, ntokens, _logging(self.task, loss, nll, sample, ntokens, logits)


@CRITERIA.register("label_smoothed_cross_entropy", LabelSmoothedCrossEntropyConfig)
class LabelSmoothedCrossEntropyCriterion:
    """(1 - eps - eps_i) * nll + eps_i * sum_v(-log p_v), eps_i = eps / (V - 1), as in fairseq."""

    def __init__(self, cfg: LabelSmoothedCrossEntropyConfig, task: Any):
        self.cfg, self.task = cfg, task

    def __call__(self, model: Any, sample: Dict[str, Any]) -> Tuple[torch.Tensor, Any, Dict[str, Any]]:
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
            from seqkit.core.errors import SeqkitError

            raise SeqkitError(f"criterion adaptive_loss trains language models (task language_modeling), not task "
                              f"{task.cfg.name}")
        self.cfg, self.task = cfg, task

    def __call__(self, model: Any, sample: Dict[str, Any]) -> Tuple[torch.Tensor, Any, Dict[str, Any]]:
        target = sample["target"]  # (B, T), ignore_index where not scored
        lprobs = model(**sample["net_input"], target=target)  # (B, T), 0 where not scored
        keep = target.ne(self.task.ignore_index)
        nll = -lprobs.masked_fill(~keep, 0.0).sum()
        ntokens = keep.sum()
        return nll, ntokens, _logging(self.task, nll, nll, sample, ntokens, lprobs)
