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
    label_smoothing: float = arg(0.1, "epsilon: probability mass spread uniformly over the other tokens")


def token_nll(model: Any, sample: Dict[str, Any], pad: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probs of the non-pad target tokens: returns (lprobs (N, V) fp32, nll (N,), N)."""
    net_input = sample["net_input"]
    logits = model(net_input["src_tokens"], net_input["src_lengths"], net_input["prev_output_tokens"])  # (B, T, V)
    target = sample["target"]  # (B, T)
    keep = target.ne(pad)
    # only real tokens go through the (N, V) log-softmax: padding can be a large share of a batch
    lprobs = logits[keep].float().log_softmax(dim=-1)  # (N, V)
    tgt = target[keep]
    nll = -lprobs.gather(1, tgt[:, None]).squeeze(1)  # (N,)
    return lprobs, nll, tgt


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
        _, nll, tgt = token_nll(model, sample, self.pad)
        loss = nll.sum()
        return loss, tgt.numel(), _logging(loss, loss, sample, tgt.numel())


@CRITERIA.register("label_smoothed_cross_entropy", LabelSmoothedCrossEntropyConfig)
class LabelSmoothedCrossEntropyCriterion:
    """(1 - eps - eps_i) * nll + eps_i * sum_v(-log p_v), eps_i = eps / (V - 1), as in fairseq."""

    def __init__(self, cfg: LabelSmoothedCrossEntropyConfig, pad: int):
        self.cfg, self.pad = cfg, pad

    def __call__(self, model: Any, sample: Dict[str, Any]) -> Tuple[torch.Tensor, int, Dict[str, float]]:
        lprobs, nll, tgt = token_nll(model, sample, self.pad)
        eps = self.cfg.label_smoothing
        eps_i = eps / (lprobs.size(-1) - 1)
        smooth = -lprobs.sum(dim=-1)  # (N,)
        loss = ((1.0 - eps - eps_i) * nll + eps_i * smooth).sum()
        return loss, tgt.numel(), _logging(loss, nll.sum(), sample, tgt.numel())
