"""Word2vec's negative-sampling loss (Mikolov et al., 2013; task ``word2vec``).

For a prediction with hidden vector h (the context word's input vector, or the mean of the window's
for CBOW), true word w and noise words n_1..n_k (rows of ``target`` ``(P, 1 + k)``):

    loss = -log σ(u_w · h) - Σ_j log σ(-u_{n_j} · h)

summed over the batch's predictions, u being the output vectors. A noise word equal to the true
word is not scored (the C code skips it). The batch's ``sample_size`` is 1, so the gradient is the
sum over predictions (:mod:`seqkit.data.word2vec`); the logged ``loss`` is per prediction, in bits
as every seqkit loss (its logging ``sample_size`` is the prediction count).
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
class NegativeSamplingConfig:
    name: str = arg("word2vec", "registry name")


def negative_sampling_loss(scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Scores ``(P, 1 + k)`` (column 0 the true word) and the scored words ``(P, 1 + k)`` -> the
    summed loss (a 0-d tensor); a noise word equal to its row's true word is left out."""
    scores = scores.float()
    positive = F.logsigmoid(scores[:, 0]).sum()
    noise = F.logsigmoid(-scores[:, 1:])  # (P, k)
    noise = noise.masked_fill(target[:, 1:] == target[:, :1], 0.0).sum()
    return -(positive + noise)


@CRITERIA.register("word2vec", NegativeSamplingConfig)
class NegativeSamplingCriterion:
    def __init__(self, cfg: NegativeSamplingConfig, task: Any):
        if getattr(task, "model_kind", None) != "word2vec":
            raise SeqkitError(f"criterion word2vec trains task word2vec, not task {task.cfg.name}; use "
                              f"criterion={getattr(task, 'model_kind', 'cross_entropy')}")
        self.cfg = cfg

    def __call__(self, model: Any, sample: Dict[str, Any]) -> Tuple[torch.Tensor, int, Dict[str, Any]]:
        target = sample["target"]  # (P, 1 + k)
        loss = negative_sampling_loss(model(sample["net_input"]["context"], target), target)
        logs = {"loss": loss.detach(), "ntokens": sample["ntokens"], "nsentences": sample["nsentences"],
                "raw_words": sample["raw_words"], "sample_size": target.size(0)}
        return loss, 1, logs
