"""Word-level knowledge distillation (Hinton et al., 2015; Kim & Rush, 2016, "word-KD").

The student learns from the gold targets and from a trained teacher's distribution over the same
outputs, softened by a temperature ``T``::

    loss = (1 - alpha) * gold + alpha * T^2 * sum over scored positions of CE(p_teacher^T, p_student^T)

``gold`` is the (label-smoothed) cross-entropy of the gold targets; ``p^T = softmax(logits / T)``;
``T^2`` keeps the soft term's gradients at the gold term's scale as T grows. The soft cross-entropy
is the KL to the teacher plus the teacher's entropy, a constant, so its gradient is the KL's; the
logs show the KL (``kd_loss``, per scored target, base 2: 0 when the student matches the teacher).

The teacher is any seqkit checkpoint of the same kind of task with the same dictionaries (and label
set), run in eval mode without gradients on the student's own batches. Classifiers and taggers
output a few numbers per example, so the teacher's outputs are kept, by example id, the first time
an example is seen: it runs once per training example, not once per epoch. Translation and
language models output a vocabulary-sized distribution per token: the teacher runs on every batch,
or, with ``top_k``, once per example, its k most probable tokens per position kept (as in
multilingual distillation, Tan et al., 2019: top-8), the distribution renormalized over them.
Validation scores the gold targets only (as ``cross_entropy`` would), so a distilled run's
validation loss, and its best checkpoint, compare with a run trained without a teacher.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Dict, Tuple

import torch

from seqkit.core.checkpoints import load_for_inference
from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import CRITERIA
from seqkit.criteria.cross_entropy import _logging, smoothed_nll

log = logging.getLogger("seqkit.train")

# the tasks whose outputs are small enough to keep per example (labels, not a vocabulary)
_CACHED_KINDS = ("classifier", "tagger")


@dataclass
class DistillationConfig:
    name: str = arg("distillation", "registry name")
    teacher: str = arg("", "the teacher: a seqkit checkpoint of the same task with the same dictionaries (required)")
    alpha: float = arg(0.5, "weight of the teacher's soft targets; 1 - alpha goes to the gold targets (0: no "
                            "distillation, 1: the teacher only)", ge=0, le=1)
    temperature: float = arg(1.0, "T: both distributions are softmax(logits / T); the soft term is scaled by T^2",
                             gt=0)
    label_smoothing: float = arg(0.0, "epsilon of the gold term's label smoothing", ge=0, lt=1)
    top_k: int = arg(0, "translation and language models: keep the teacher's k most probable tokens at each "
                        "target position, per example, the first time it is seen, and renormalize over them: "
                        "the teacher then runs once per training example, not once per batch (0: the full "
                        "distribution, the teacher run on every batch; at most the target vocabulary's size; not "
                        "for classifiers and taggers, which always keep their full outputs)", ge=0)


class SoftCrossEntropy(torch.autograd.Function):
    """Per position ``-sum_v q_v log softmax(z / T)_v`` for fixed teacher probabilities ``q``, with
    a hand-written backward, ``(softmax(z / T) - q) / T``: one (N, V) pass each way, where autograd
    would keep the log-softmax, the product and their gradients."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, q: torch.Tensor, keep: torch.Tensor, temperature: float):
        # logits (N, V) any float dtype; q (N, V) fp32 teacher probabilities; keep (N,) float 1/0
        dtype = torch.float32 if logits.element_size() < 4 else logits.dtype
        lprobs = (logits.to(dtype) / temperature).log_softmax(dim=-1)  # (N, V)
        ce = -(q * lprobs).sum(dim=-1) * keep  # (N,)
        ctx.save_for_backward(lprobs, q, keep)
        ctx.temperature, ctx.dtype = temperature, logits.dtype
        return ce

    @staticmethod
    def backward(ctx, grad_ce: torch.Tensor):
        lprobs, q, keep = ctx.saved_tensors
        grad = lprobs.exp_().sub_(q)  # p - q (N, V)
        grad.mul_((grad_ce * keep / ctx.temperature)[:, None])
        return grad.to(ctx.dtype), None, None, None


def check_top_k(top_k: int, task: Any) -> None:
    """One clear error for a ``top_k`` that would be ignored: a classifier's or tagger's outputs are
    kept whole, and a vocabulary has no more than its size of tokens to keep."""
    if not top_k:
        return
    kind = getattr(task, "model_kind", None)
    if kind in _CACHED_KINDS:
        raise SeqkitError(f"criterion.top_k={top_k} applies to translation and language models; a {kind} keeps the "
                          "teacher's full outputs (a few numbers per example): leave criterion.top_k=0")
    target = getattr(task, "tgt_dict", None)
    if target is not None and top_k > len(target):
        raise SeqkitError(f"criterion.top_k={top_k} is more than the target vocabulary's {len(target)} tokens: at "
                          f"most {len(target)} (0: the full distribution)")


def load_teacher(path: str, task: Any) -> torch.nn.Module:
    """The teacher model of checkpoint ``path``, in eval mode, its parameters frozen; one clear
    error when it was trained for another kind of task or with other dictionaries or labels."""
    if not path:
        raise SeqkitError("criterion=distillation needs criterion.teacher=CHECKPOINT")
    if not os.path.isfile(path):
        raise SeqkitError(f"criterion.teacher={path}: no such checkpoint")
    # building the teacher draws initial weights: the student's dropout and shuffling must not see it
    with torch.random.fork_rng(devices=[]):
        teacher_task, teacher = load_for_inference(path)
    kind, teacher_kind = getattr(task, "model_kind", None), getattr(teacher_task, "model_kind", None)
    if kind not in ("seq2seq", "lm") + _CACHED_KINDS:
        raise SeqkitError(f"criterion=distillation trains translation, language modelling, classification and "
                          f"tagging models, not task {task.cfg.name}")
    if teacher_kind != kind:
        raise SeqkitError(f"criterion.teacher={path} is a {teacher_kind} checkpoint; this task trains a {kind} model")
    for attr, what in (("src_dict", "input dictionary"), ("tgt_dict", "target dictionary"), ("labels", "label set")):
        mine, theirs = getattr(task, attr, None), getattr(teacher_task, attr, None)
        if mine is not None and mine != theirs:
            raise SeqkitError(f"criterion.teacher={path}: its {what} differs from the student's ({len(theirs or [])} "
                              f"against {len(mine)} entries): a teacher must read and predict the same symbols")
    student_prefix = getattr(getattr(task, "cfg", None), "prefix_length", 0) > 0
    if student_prefix or getattr(teacher, "prefix_lm", False):
        raise SeqkitError(f"criterion=distillation with a prefix LM ({'the student' if student_prefix else path}: "
                          "task.prefix_length) is not supported: the batch's bidirectional prefix would be read by "
                          "the other model as it was not trained; distil causal language models")
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    log.info("teacher %s: %s parameters", path, f"{sum(p.numel() for p in teacher.parameters()):,}")
    return teacher


@CRITERIA.register("distillation", DistillationConfig)
class DistillationCriterion:
    """(1 - alpha) * gold cross-entropy + alpha * T^2 * soft cross-entropy to a teacher's outputs."""

    def __init__(self, cfg: DistillationConfig, task: Any):
        self.cfg, self.task = cfg, task
        check_top_k(cfg.top_k, task)
        self.teacher = load_teacher(cfg.teacher, task)
        labels = getattr(task, "model_kind", None) in _CACHED_KINDS
        self.keep_outputs = labels or cfg.top_k > 0
        self.top_k = 0 if labels else cfg.top_k
        # example id -> the teacher's logits (K,) or (T, K); with top_k, (values (T, k), indices (T, k))
        self._outputs: Dict[int, Any] = {}

    def __call__(self, model: Any, sample: Dict[str, Any]) -> Tuple[torch.Tensor, int, Dict[str, float]]:
        gold, nll, n, logits = smoothed_nll(model, sample, self.task.ignore_index, self.cfg.label_smoothing)
        logs = _logging(self.task, gold, nll, sample, n, logits)
        if not model.training:  # validation: the gold targets only
            return gold, n, logs
        t = self.cfg.temperature
        keep = sample["target"].reshape(-1).ne(self.task.ignore_index).float()  # (N,)
        q, entropy = self._teacher_probs(sample, logits)  # (N, V), (N,)
        soft = SoftCrossEntropy.apply(logits.reshape(-1, logits.size(-1)), q, keep, t).sum()
        a = self.cfg.alpha
        loss = (1.0 - a) * gold + (a * t * t) * soft
        logs["loss"] = loss.detach()
        logs["kd_loss"] = soft.detach() - (entropy * keep).sum()  # the KL, summed
        return loss, n, logs

    @torch.no_grad()
    def _teacher_probs(self, sample: Dict[str, Any], logits: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The teacher's distribution at temperature T ``(N, V)`` fp32 for the student's ``logits``
        ``(B, T, V)`` or ``(B, K)``, and its entropy ``(N,)``."""
        device, t, n_out = logits.device, self.cfg.temperature, logits.size(-1)
        if next(self.teacher.parameters()).device != device:
            self.teacher.to(device)
        if not self.keep_outputs:
            z = self.teacher(**sample["net_input"]).float().reshape(-1, n_out)  # (N, V)
            lp = (z / t).log_softmax(dim=-1)
            return lp.exp(), -(lp.exp() * lp).sum(dim=-1)
        ids = sample["id"].tolist()
        missing = [i for i, sid in enumerate(ids) if sid not in self._outputs]
        if missing:  # the whole batch goes through the teacher once; the new examples are kept
            fresh = self.teacher(**sample["net_input"]).float()
            if self.top_k:
                values, indices = fresh.topk(min(self.top_k, n_out), dim=-1)  # (B, T, k)
                lengths = sample["target"].ne(self.task.ignore_index).sum(dim=1).tolist()
                for i in missing:  # a sentence's own positions only
                    self._outputs[ids[i]] = (values[i, : lengths[i]].cpu(), indices[i, : lengths[i]].int().cpu())
            else:
                for i in missing:
                    self._outputs[ids[i]] = fresh[i].cpu()
        shape = logits.shape[1:-1]  # (T,) or ()
        if not self.top_k:
            z = torch.stack([_fit(self._outputs[sid], logits.shape[1:]) for sid in ids]).to(device)
            lp = (z.reshape(-1, n_out) / t).log_softmax(dim=-1)
            return lp.exp(), -(lp.exp() * lp).sum(dim=-1)
        k = self._outputs[ids[0]][0].size(-1)
        values = torch.stack([_fit(self._outputs[sid][0], (*shape, k)) for sid in ids]).to(device).reshape(-1, k)
        indices = torch.stack([_fit(self._outputs[sid][1], (*shape, k)) for sid in ids]).to(device).reshape(-1, k)
        lp = (values / t).log_softmax(dim=-1)  # (N, k): renormalized over the teacher's k best
        q = logits.new_zeros(values.size(0), n_out, dtype=torch.float32).scatter_(1, indices.long(), lp.exp())
        return q, -(lp.exp() * lp).sum(dim=-1)


def _fit(row: torch.Tensor, shape: Tuple[int, ...]) -> torch.Tensor:
    """A kept row ``(K,)`` or ``(T', ...)`` cut or zero-padded to this batch's ``(T, ...)``: a row is
    as long as its sentence, or as the batch it was first seen in; positions past a sentence's end
    are padding, skipped by the loss."""
    if tuple(row.shape) == tuple(shape):
        return row
    out = row.new_zeros(shape)
    n = min(row.size(0), shape[0])
    out[:n] = row[:n]
    return out
