"""Cross-entropy, plain and label-smoothed (Szegedy et al., 2016), for every task.

A criterion is built as ``Criterion(cfg, task)``. It calls ``model(**sample["net_input"])`` and
scores the logits ``(..., V)`` against ``sample["target"]`` ``(...)``, skipping targets equal to
``task.ignore_index`` (translation: padding; classification/tagging: unlabelled positions). Where
the task counts metrics (``task.count_metrics(logits, sample)``: accuracy, F1, ...), the counts go
into the logging output, to be summed and turned into metrics by the task's ``reduce_metrics``.

Fused path: where the model gives features and its output projection apart (``forward(...,
features_only=True)`` and ``output_projection()``, seqkit's Transformer) and the sample says which
rows to score, the loss projects the rows a block at a time inside :class:`FusedLinearSmoothedNLL`:
neither the ``(N, V)`` logits nor their log-probs outlive the forward. The sample says it one of
two ways (:func:`fused_smoothed_nll`): ``target_index`` ``(N,)``, the flat positions of the real
targets (token-budget batches, set by translation's collation: padding can be a third of the rows,
and it is never projected), or ``fixed_shape=True`` (packed batches, ~2% padding): all ``B*T``
rows, weighted 1 at real targets and 0 at padding, so that every batch gives the loss inputs of one
shape (what CUDA graphs need; an index of N rows would change length from batch to batch). A task
that counts metrics on logits, or any other model, takes the logits path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn.functional as F

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


class FusedLinearSmoothedNLL(torch.autograd.Function):
    """Summed label-smoothed NLL of ``logits = x @ weight.T + bias`` with the projection inside,
    a block of rows at a time: each block's logits ``(n, V)`` and fp32 log-probs live only while
    the block is processed. Its gradients are computed in the forward, block by block (d loss /
    d logits = p - q as in :class:`SmoothedNLL`; then ``(p - q) @ weight`` for the rows of ``x``
    and ``(p - q).T @ x`` summed in fp32 for ``weight``), so what is kept for backward is
    ``(N, C)`` and ``(V, C)``, and backward only scales them by the incoming gradient (the loss is
    a sum: its gradient a scalar). The same matmuls as projection + loss + their backward, and no
    recomputation. ``bias`` is a fixed buffer (no gradient). ``keep`` ``(N,)`` float, or None for
    all 1: a weight per row that multiplies its loss terms and its ``p - q`` row, so a row of weight
    0 (padding) adds neither loss nor gradient: all ``B*T`` rows of a fixed-shape batch go in,
    instead of an index of the scored ones whose length changes from batch to batch."""

    # the largest block of logits, in elements (fp32: 256 MiB); one block under torch.compile
    block_elements = 1 << 26

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], target: torch.Tensor,
                keep: Optional[torch.Tensor], eps: float, dtype: torch.dtype, grad: bool = True):
        # x (N, C) and weight (V, C) as the model holds them, multiplied in ``dtype``; target (N,) long, a
        # valid class at every row (weight-0 rows too); keep (N,) float 1/0 or None; grad: whether the
        # caller records gradients (needs_input_grad does not know: validation)
        with torch.autocast(x.device.type, enabled=False):
            xc, w = x.to(dtype), weight.to(dtype)  # (N, C), (V, C)
            b = None if bias is None else bias.to(dtype)
            N, V = x.size(0), w.size(0)
            eps_i = eps / (V - 1)
            ctx.eps, ctx.eps_i = eps, eps_i
            want_x, want_w = grad and ctx.needs_input_grad[0], grad and ctx.needs_input_grad[1]
            gx = torch.empty_like(xc) if want_x else None  # (N, C)
            gw = None  # (V, C) fp32
            losses, nlls = [], []
            step = N if torch.compiler.is_compiling() else max(1, FusedLinearSmoothedNLL.block_elements // V)
            # compiled: one block, not a range over the symbolic N (which would specialize it: a graph per N)
            for a in (0,) if torch.compiler.is_compiling() else range(0, N, step):
                xr, t = xc[a : a + step], target[a : a + step]  # (n, C), (n,)
                k = None if keep is None else keep[a : a + step]  # (n,)
                z = F.linear(xr, w, b)  # (n, V) in dtype
                lp = z.log_softmax(dim=-1, dtype=torch.promote_types(z.dtype, torch.float32))  # (n, V)
                del z
                nll = -lp.gather(1, t[:, None]).squeeze(1)  # (n,)
                loss = (1.0 - eps - eps_i) * nll + eps_i * -lp.sum(dim=-1) if eps > 0 else nll
                if k is not None:
                    nll, loss = nll * k, loss * k
                losses.append(loss.sum())
                nlls.append(nll.sum())
                if want_x or want_w:
                    p = lp.exp_()  # (n, V) fp32, in place of the log-probs
                    if eps_i:
                        p.sub_(eps_i)
                    p[torch.arange(p.size(0), device=p.device), t] -= 1.0 - eps - eps_i  # p - q
                    if k is not None:
                        p.mul_(k[:, None])  # padding's rows: 0
                    g = p.to(dtype)  # (n, V)
                    del lp, p
                    if want_x:
                        gx[a : a + step] = g @ w
                    if want_w:
                        part = g.t() @ xr  # (V, C)
                        gw = part.float() if gw is None else gw.add_(part)
            if want_w and gw is None:  # no rows
                gw = torch.zeros(w.shape, dtype=torch.float32, device=w.device)
        ctx.save_for_backward(gx, gw)
        ctx.x_dtype, ctx.w_dtype = x.dtype, weight.dtype
        zero = x.new_zeros((), dtype=torch.float32)
        loss, nll = (torch.stack(v).sum() if v else zero for v in (losses, nlls))
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, grad_nll: torch.Tensor):
        gx, gw = ctx.saved_tensors
        dx = None if gx is None else (gx * grad_loss.to(gx.dtype)).to(ctx.x_dtype)
        dw = None if gw is None else (gw * grad_loss).to(ctx.w_dtype)
        return dx, dw, None, None, None, None, None, None


def core_model(model: Any) -> Any:
    """The model inside torch.compile's and DistributedDataParallel's wrappers (what declares
    ``forward_options``); the call still goes through the wrappers."""
    while True:
        inner = getattr(model, "_orig_mod", None)
        if inner is None and type(model).__name__ == "DistributedDataParallel":
            inner = model.module
        if inner is None:
            return model
        model = inner


def model_inputs(model: Any, sample: Dict[str, Any]) -> Dict[str, Any]:
    """``net_input``, plus collation's host flag ``src_padded`` for a model whose
    ``forward_options`` take it (seqkit's Transformer: no attention mask when nothing is padded)."""
    net_input = sample["net_input"]
    if "src_padded" in sample and "src_padded" in getattr(core_model(model), "forward_options", ()):
        return {**net_input, "src_padded": sample["src_padded"]}
    return net_input


def _sharded(t: torch.Tensor) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a torch without distributed
        return False
    return isinstance(t, DTensor)


def fused_smoothed_nll(model: Any, sample: Dict[str, Any], ignore_index: int,
                       eps: float) -> Optional[Tuple[torch.Tensor, torch.Tensor, Any]]:
    """The summed (label-smoothed) loss and NLL over the real targets (those that are not
    ``ignore_index``) and their count, through :class:`FusedLinearSmoothedNLL`, over the rows the
    sample names:

    - ``sample["fixed_shape"]`` True (packed collation: every batch of one shape, ~2% padding):
      all ``B*T`` rows, weighted by ``target != ignore_index``; the count is a 0-d tensor (read on
      the host only when logged; collation's ``ntokens`` is the same count, on the host). Every
      input of the loss then has one shape whatever the batch's real tokens: one CUDA graph.
    - else ``sample["target_index"]`` ``(N,)`` (token-budget collation): the N listed rows only (no
      host read), so padding is never projected; the count is N.

    None where the sample names neither, the model does not offer the fused path (see the module
    docstring), its projection is sharded (FSDP: only its forward gathers the weights), or it would
    multiply in fp16."""
    fixed = bool(sample.get("fixed_shape", False))
    index = None if fixed else sample.get("target_index")
    core = core_model(model)
    if (not fixed and index is None) or "features_only" not in getattr(core, "forward_options", ()):
        return None
    projection = core.output_projection()
    if projection is None or _sharded(projection[0]):
        return None
    weight, bias, scale = projection
    kind = weight.device.type
    dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else weight.dtype
    if dtype == torch.float16:  # unscaled p - q summed over rows could overflow fp16 (GradScaler's scale is outside)
        return None
    features = model(**model_inputs(model, sample), features_only=True)  # (B, T, C)
    x = features.reshape(-1, features.size(-1))  # (B*T, C)
    target = sample["target"].reshape(-1)  # (B*T,)
    if fixed:
        real = target.ne(ignore_index)  # (B*T,) on the device: nothing read, no size that depends on the batch
        count: Any = real.sum()
        keep: Optional[torch.Tensor] = real.float()
        if ignore_index < 0:
            target = target.clamp(min=0)  # gather needs a valid class at the weight-0 rows too
    else:
        x, target = x.index_select(0, index), target.index_select(0, index)  # (N, C), (N,): scored rows only
        count, keep = index.numel(), None
    if scale != 1.0:
        x = x * scale
    dtype = torch.promote_types(dtype, x.dtype) if not torch.is_autocast_enabled(kind) else dtype
    loss, nll = FusedLinearSmoothedNLL.apply(x, weight, bias, target, keep, eps, dtype, torch.is_grad_enabled())
    return loss, nll, count


def smoothed_nll(model: Any, sample: Dict[str, Any], ignore_index: int,
                 eps: float) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Summed (label-smoothed) loss and NLL over the scored targets, their count (a 0-d tensor: read
    on the host only when logged), and the logits."""
    logits = model(**model_inputs(model, sample))  # (B, T, V) translation/tagging, (B, K) classification
    target = sample["target"].reshape(-1)  # (N,)
    keep = target.ne(ignore_index)
    # all positions go through the log-softmax: batches are sorted by target length so padding is
    # rare, and boolean-indexing the (B, T, V) logits would cost a scatter of the same size in backward
    safe = target if ignore_index >= 0 else target.clamp(min=0)  # gather needs a valid index everywhere
    loss, nll = SmoothedNLL.apply(logits.reshape(-1, logits.size(-1)), safe, keep.float(), eps)
    return loss.sum(), nll.sum(), keep.sum(), logits


def criterion_loss(model: Any, sample: Dict[str, Any], task: Any,
                   eps: float) -> Tuple[torch.Tensor, Any, Dict[str, Any]]:
    """``(loss, sample_size, logging_output)``: the fused path where it applies and the task counts
    no metrics on logits, else the logits path."""
    counts = getattr(task, "count_metrics", None) is not None
    fused = None if counts else fused_smoothed_nll(model, sample, task.ignore_index, eps)
    if fused is not None:
        loss, nll, ntokens = fused
        return loss, ntokens, _logging(task, loss, nll, sample, ntokens, None)
    loss, nll, ntokens, logits = smoothed_nll(model, sample, task.ignore_index, eps)
    return loss, ntokens, _logging(task, loss, nll, sample, ntokens, logits)


def _logging(task: Any, loss: torch.Tensor, nll: torch.Tensor, sample: Dict[str, Any], ntokens: Any,
             logits: Optional[torch.Tensor]) -> Dict[str, Any]:
    """The logging output: numbers, or 0-d tensors left on the device (a GPU step never waits to
    read them; the trainer sums them and reads them once per log line). A ``fixed_shape`` batch logs
    the device count as ``ntokens`` (the same number): collation's host int, read in a compiled
    function, would be an input of its graph that changes with every batch (a CUDA graph each)."""
    host = not sample.get("fixed_shape", False)
    out = {
        "loss": loss.detach(),
        "nll_loss": nll.detach(),
        "ntokens": int(sample.get("ntokens", ntokens)) if host else ntokens,  # throughput (translation: sample_size)
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
        return criterion_loss(model, sample, self.task, 0.0)


@CRITERIA.register("label_smoothed_cross_entropy", LabelSmoothedCrossEntropyConfig)
class LabelSmoothedCrossEntropyCriterion:
    """(1 - eps - eps_i) * nll + eps_i * sum_v(-log p_v), eps_i = eps / (V - 1), as in fairseq."""

    def __init__(self, cfg: LabelSmoothedCrossEntropyConfig, task: Any):
        self.cfg, self.task = cfg, task

    def __call__(self, model: Any, sample: Dict[str, Any]) -> Tuple[torch.Tensor, Any, Dict[str, Any]]:
        return criterion_loss(model, sample, self.task, self.cfg.label_smoothing)


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
