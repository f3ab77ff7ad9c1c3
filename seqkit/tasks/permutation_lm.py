"""XLNet's permutation language modeling (Yang et al., 2019) on a folder written by
``seqkit-preprocess task=language_modeling``: each block read in a random factorisation order, the
last 1/K of the order predicted by the query stream of two-stream attention.

    seqkit-train task=permutation_lm task.data=DIR model=xlnet_mini criterion=cross_entropy ...
    seqkit-train task=classification model=pretrained_classifier model.path=CKPT ...   # fine-tune

Samples, orders and partial prediction: :mod:`seqkit.data.permutation`; the model:
:mod:`seqkit.models.xlnet` (kind ``permutation_lm``). The dictionary is the folder's own (no
symbol is added). Validation reports the loss over the predicted positions and top-1 ``accuracy``
there, under orders fixed for the run (``seqkit-eval-lm`` scores a checkpoint the same way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List

import torch

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import CRITERIA, MODELS, TASKS
from seqkit.data.lm_dataset import BREAK_MODES
from seqkit.data.permutation import PermutationLMDataset
from seqkit.models.base import check_model_kind
from seqkit.tasks.folders import shard_dirs, tokenizer_label
from seqkit.tasks.language_modeling import FolderTask

CRITERIA_READ = ("cross_entropy", "label_smoothed_cross_entropy")  # logits (N, V) against target (N,)


@dataclass
class PermutationLMConfig:
    name: str = arg("permutation_lm", "registry name")
    data: str = arg("data-bin", "folder written by seqkit-preprocess task=language_modeling")
    tokens_per_sample: int = arg(128, "longest sample in tokens, <s> included (<= the model's positions)", ge=3)
    sample_break_mode: str = arg("complete", "complete: whole lines packed up to tokens_per_sample, across documents; "
                                             "none: fixed-size blocks; eos: one line each", choices=BREAK_MODES)
    partial_prediction: int = arg(6, "K: predict the last 1/K of each factorisation order, max(1, (n - 1) // K) of "
                                     "a sample's n - 1 tokens after <s> (XLNet: 6 or 7); 1: every one", ge=1)
    seed: int = arg(1, "seed of the factorisation orders (with the epoch and the sample's index)")


@TASKS.register("permutation_lm", PermutationLMConfig)
class PermutationLMTask(FolderTask):
    """Dictionary and tokenizer from the data folder (training) or a checkpoint (inference)."""

    model_kind = "permutation_lm"

    def __init__(self, cfg: PermutationLMConfig, state: Any = None):
        if len(shard_dirs(cfg.data)) > 1:
            raise SeqkitError(f"task.data={cfg.data}: task permutation_lm reads one folder, not shards; give one")
        super().__init__(cfg, state)
        self.ignore_index = self.dictionary.pad()  # no target is padding: every predicted position is scored

    def describe(self) -> str:
        """What this task's model is, for messages."""
        return f"a permutation language model ({tokenizer_label(self._tokenizer_state)}, {len(self.dictionary)} types)"

    # -- data ------------------------------------------------------------------------------------
    def load_dataset(self, split: str, with_target: bool = True) -> PermutationLMDataset:
        """Blocks of ``split``: a new order every epoch for train, fixed orders for the others."""
        c = self.cfg
        d = self.dictionary
        return PermutationLMDataset(self.open_split(split), d.bos(), d.pad(), c.tokens_per_sample, c.sample_break_mode,
                                    c.partial_prediction, c.seed, fixed_orders=split != "train")

    # -- components ------------------------------------------------------------------------------
    def build_model(self, model_cfg: Any) -> torch.nn.Module:
        check_model_kind(model_cfg.name, self.model_kind, "permutation_lm")
        model = MODELS.build(model_cfg, self.dictionary)
        limit = model.max_positions()[0]
        if self.cfg.tokens_per_sample > limit:
            raise SeqkitError(f"task.tokens_per_sample={self.cfg.tokens_per_sample} exceeds the model's {limit} "
                              "positions (model.max_positions)")
        return model

    def build_criterion(self, criterion_cfg: Any) -> Callable:
        if criterion_cfg.name not in CRITERIA_READ:
            raise SeqkitError("task permutation_lm trains with criterion=cross_entropy (or "
                              "label_smoothed_cross_entropy) over the predicted tokens, not "
                              f"criterion={criterion_cfg.name}")
        return CRITERIA.build(criterion_cfg, self)

    # -- metrics ---------------------------------------------------------------------------------
    def count_metrics(self, logits: torch.Tensor, sample: Dict[str, Any]) -> Dict[str, Any]:
        """Top-1 hits at the predicted positions (a 0-d tensor, read once per log line)."""
        return {"plm_correct": logits.detach().argmax(dim=-1).eq(sample["target"]).sum()}

    def metric_names(self) -> List[str]:
        return ["loss", "nll_loss", "ppl", "accuracy"]

    def reduce_metrics(self, sums: Dict[str, float]) -> Dict[str, float]:
        if not sums.get("sample_size"):
            return {}
        return {"accuracy": round(100.0 * float(sums.get("plm_correct", 0.0)) / sums["sample_size"], 2)}

    def valid_metrics(self, model: Any, dataset: Any, make_generator: Callable) -> Dict[str, float]:
        return {}
