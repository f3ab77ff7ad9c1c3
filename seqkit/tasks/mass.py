"""Masked sequence-to-sequence pretraining (MASS, Song et al. 2019) with the translation Transformer;
samples: :mod:`seqkit.data.mass_dataset`.

Data as task xlm reads it (:mod:`seqkit.tasks.xlm`): one translation folder with one dictionary
for both sides, each side one language's monolingual sentences; ``task.langs`` orders the
languages, language k being row k of the model's language table (``model.num_langs``, added to the
token + position embeddings of encoder and decoder). The encoder reads a sentence with a span of
``span_ratio`` of its tokens masked; the decoder predicts the span from the span's previous tokens,
its other positions masked; the loss counts the span only. The dictionary gains ``<mask>`` at the
end. Validation adds ``accuracy``: teacher-forced accuracy of the span tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import torch

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS, TASKS
from seqkit.data.mass_dataset import MassDataset
from seqkit.models.base import check_model_kind
from seqkit.tasks.token_accuracy import TokenAccuracy
from seqkit.tasks.xlm import LANGS_HELP, BilingualFolderTask


@dataclass
class MassConfig:
    name: str = arg("mass", "registry name")
    data: str = arg("data-bin", "translation folder of seqkit-preprocess with one dictionary (joined_dictionary=true): "
                                "each side one language's monolingual sentences")
    langs: List[str] = arg(help=LANGS_HELP, factory=list)
    span_ratio: float = arg(0.5, "share of a sentence's tokens (</s> aside) in its masked span (the paper's 50%)",
                            gt=0, le=1)
    seed: int = arg(1, "seed of the spans (with the epoch and the sample's index)")


@TASKS.register("mass", MassConfig)
class MassTask(TokenAccuracy, BilingualFolderTask):
    """Dictionary (+ ``<mask>``), tokenizer and languages from the folder (training) or a checkpoint."""

    model_kind = "seq2seq"
    who = "mass"

    def __init__(self, cfg: MassConfig, state: Optional[Dict[str, Any]] = None):
        self.cfg = cfg
        self._setup(state)

    def describe(self) -> str:
        """What this task's model is, for messages."""
        return f"a MASS model ({', '.join(self.langs)}, {len(self.dictionary)} types)"

    def load_dataset(self, split: str, with_target: bool = True) -> MassDataset:
        sides = self.sides(split, self.langs, "task.langs")
        return MassDataset(sides, self.langs, self.specials, self.cfg.span_ratio, self.cfg.seed,
                           static=split != "train")

    def build_model(self, model_cfg: Any) -> torch.nn.Module:
        check_model_kind(model_cfg.name, self.model_kind, "mass")
        n = len(self.langs)
        if getattr(model_cfg, "num_langs", None) != n:
            raise SeqkitError(f"task mass: set model.num_langs={n} (a language row each: {', '.join(self.langs)})")
        return MODELS.build(model_cfg, self.dictionary, self.dictionary)

