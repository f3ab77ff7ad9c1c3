"""Masked-LM objectives (task ``masked_lm``): BERT's masked tokens (+ NSP/SOP, + SpanBERT's
span-boundary objective) and ELECTRA's generator + replaced-token detection.

Both return losses summed over the batch with ``sample_size`` = the masked tokens N, as the
trainer expects. Losses of another unit are rescaled so that after the trainer's division by N
each term is its own mean, as the papers add them: the sentence loss (one per sample) by N / B,
ELECTRA's discriminator loss (one per input token) by N / T_real.
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
class MaskedLMLossConfig:
    name: str = arg("masked_lm", "registry name")


@dataclass
class ElectraLossConfig:
    name: str = arg("electra", "registry name")
    disc_weight: float = arg(50.0, "lambda: weight of the discriminator's loss against the generator's MLM loss", ge=0)


def _check_task(task: Any, name: str) -> None:
    if getattr(task, "model_kind", None) != "masked_lm":
        raise SeqkitError(f"criterion {name} trains masked language models (task masked_lm), not task {task.cfg.name}")


def _mlm_terms(logits: torch.Tensor, target: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Summed NLL of ``target`` ``(N,)`` under ``logits`` ``(N, V)``, and the top-1 hits."""
    lprobs = logits.float().log_softmax(-1)
    return F.nll_loss(lprobs, target, reduction="sum"), (lprobs.argmax(-1) == target).sum()


@CRITERIA.register("masked_lm", MaskedLMLossConfig)
class MaskedLMCriterion:
    """Masked-token NLL, plus the sentence (NSP/SOP) and span-boundary losses when the model has
    those heads."""

    def __init__(self, cfg: MaskedLMLossConfig, task: Any):
        _check_task(task, "masked_lm")
        self.cfg, self.task = cfg, task

    def __call__(self, model: Any, sample: Dict[str, Any]) -> Tuple[torch.Tensor, int, Dict[str, float]]:
        out = model(**sample["net_input"])
        target = sample["target"]  # (N,) original ids of the masked positions
        n = target.numel()
        nll, correct = _mlm_terms(out["mlm"], target)
        loss = nll
        logs: Dict[str, Any] = {"mlm_correct": correct}
        if "sbo" in out:
            sbo, sbo_correct = _mlm_terms(out["sbo"], target)
            loss = loss + sbo
            logs.update(sbo_loss=sbo.detach(), sbo_correct=sbo_correct)
        if "sentence" in out:
            gold = sample["sentence_target"]  # (B,)
            sent = F.cross_entropy(out["sentence"].float(), gold, reduction="sum")
            loss = loss + sent * (n / max(gold.numel(), 1))
            logs.update(sentence_loss=sent.detach(), sentence_count=float(gold.numel()),
                        sentence_correct=(out["sentence"].argmax(-1) == gold).sum())
        logs.update(loss=loss.detach(), nll_loss=nll.detach(), ntokens=sample["ntokens"],
                    nsentences=sample["nsentences"], sample_size=n)
        return loss, n, logs


@CRITERIA.register("electra", ElectraLossConfig)
class ElectraCriterion:
    """Generator MLM loss + ``disc_weight`` x the discriminator's replaced-token detection loss
    (binary cross-entropy over every real input position)."""

    def __init__(self, cfg: ElectraLossConfig, task: Any):
        _check_task(task, "electra")
        self.cfg, self.task = cfg, task

    def __call__(self, model: Any, sample: Dict[str, Any]) -> Tuple[torch.Tensor, int, Dict[str, float]]:
        target = sample["target"]  # (N,)
        out = model(**sample["net_input"], mlm_target=target)
        if "disc" not in out:
            raise SeqkitError("criterion electra needs an ELECTRA model (model=electra_small ...)")
        n = target.numel()
        nll, correct = _mlm_terms(out["mlm"], target)
        keep, labels = out["keep"], out["disc_labels"]  # (B, S) bool each
        logit = out["disc"].float()[keep]
        gold = labels[keep].float()
        disc = F.binary_cross_entropy_with_logits(logit, gold, reduction="sum")
        positions = keep.sum().clamp(min=1)  # (a tensor: no host read)
        loss = nll + self.cfg.disc_weight * disc * (n / positions)
        logs = {"mlm_correct": correct, "disc_loss": disc.detach(), "disc_positions": positions,
                "disc_correct": ((logit > 0).float() == gold).sum(), "replaced": gold.sum(),
                "loss": loss.detach(), "nll_loss": nll.detach(), "ntokens": sample["ntokens"],
                "nsentences": sample["nsentences"], "sample_size": n}
        return loss, n, logs
