"""Sentence vectors from context: ``task=skip_thought`` (Kiros et al., 2015) and
``task=quick_thought`` (Logeswaran & Lee, 2018), on a language-modeling folder written from one
sentence per line in document order, an empty line between documents (the layout, and how each
objective reads it: :mod:`seqkit.data.sentence_order`).

    seqkit-train task=skip_thought task.data=DIR model=skip_thought_small criterion=skip_thought
    seqkit-train task=quick_thought task.data=DIR model=quick_thought_small criterion=quick_thought

Models (:mod:`seqkit.models.skip_thought`) are of kind ``skip_thought`` / ``quick_thought``, built as
``Model(cfg, dictionary)``; each offers ``sentence_vectors(src_tokens, src_lengths) -> (B, D)``,
what ``seqkit-embed`` reads. A sentence is encoded as the folder's lines are: its pieces, then ``</s>``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

import torch

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import CRITERIA, MODELS, TASKS
from seqkit.data.dictionary import Dictionary
from seqkit.data.sentence_order import QuickThoughtDataset, SkipThoughtDataset
from seqkit.models.base import check_model_kind
from seqkit.tasks.folders import tokenizer_label
from seqkit.tasks.language_modeling import FolderTask
from seqkit.tokenizers import Tokenizer, load_tokenizer

FOLDER_DOC = ("folder written by seqkit-preprocess task=language_modeling from one sentence per line, an empty "
              "line between documents")


@dataclass
class SkipThoughtTaskConfig:
    name: str = arg("skip_thought", "registry name")
    data: str = arg("data-bin", FOLDER_DOC)


@dataclass
class QuickThoughtTaskConfig:
    name: str = arg("quick_thought", "registry name")
    data: str = arg("data-bin", FOLDER_DOC)


class _SentenceOrderTask(FolderTask):
    """What both objectives share: dictionary and tokenizer from the folder (training) or a checkpoint."""

    model_kind = ""  # the task's name: the kind of model and the criterion it trains
    what = ""  # for messages

    @property
    def tgt_dict(self) -> Dictionary:
        """What a generator would write in: a sentence encoder writes nothing (one line for
        seqkit-generate, which asks for it)."""
        raise SeqkitError(f"this checkpoint is {self.describe()}, which generates no text: seqkit-embed turns "
                          "sentences into its vectors (path=CHECKPOINT input=FILE output=FILE.npy)")

    def describe(self) -> str:
        """``a skip-thought sentence encoder (space tokenizer, 40 types)``, for messages."""
        tok = tokenizer_label(self._tokenizer_state)
        return f"a {self.what} sentence encoder ({tok}, {len(self.dictionary)} types)"

    # -- data ------------------------------------------------------------------------------------

    # -- components ------------------------------------------------------------------------------
    def build_model(self, model_cfg: Any) -> torch.nn.Module:
        check_model_kind(model_cfg.name, self.model_kind, self.model_kind)
        return MODELS.build(model_cfg, self.dictionary)

    def build_criterion(self, criterion_cfg: Any) -> Callable:
        if criterion_cfg.name != self.model_kind:
            raise SeqkitError(f"task {self.model_kind} trains with criterion={self.model_kind}, not "
                              f"criterion={criterion_cfg.name}")
        return CRITERIA.build(criterion_cfg, self)

    def valid_metrics(self, model: Any, dataset: Any, make_generator: Callable) -> Dict[str, float]:
        return {}

    # -- text -> ids -----------------------------------------------------------------------------
    def tokenizer(self) -> Optional[Tokenizer]:
        if self._tokenizer is None and self._tokenizer_state is not None:
            self._tokenizer = load_tokenizer(self._tokenizer_state)
        return self._tokenizer

    def encode_sentence(self, line: str) -> List[int]:
        """A sentence as training read it: its pieces, then ``</s>``."""
        tok = self.tokenizer()
        return self.dictionary.encode(tok.encode(line) if tok is not None else line.split(), append_eos=True)


@TASKS.register("skip_thought", SkipThoughtTaskConfig)
class SkipThoughtTask(_SentenceOrderTask):
    model_kind = "skip_thought"
    what = "skip-thought"

    def load_dataset(self, split: str, with_target: bool = True) -> SkipThoughtDataset:
        return SkipThoughtDataset(self.open_split(split), self.dictionary)

    def metric_names(self) -> List[str]:
        return ["loss", "nll_loss", "ppl", "prev_loss", "next_loss"]

    def reduce_metrics(self, sums: Dict[str, float]) -> Dict[str, float]:
        """Each decoder's loss per token of its own side, in bits."""
        return {f"{side}_loss": round(sums[f"{side}_nll"] / sums[f"{side}_tokens"] / math.log(2), 3)
                for side in ("prev", "next") if sums.get(f"{side}_tokens")}


@TASKS.register("quick_thought", QuickThoughtTaskConfig)
class QuickThoughtTask(_SentenceOrderTask):
    model_kind = "quick_thought"
    what = "quick-thought"

    def load_dataset(self, split: str, with_target: bool = True) -> QuickThoughtDataset:
        return QuickThoughtDataset(self.open_split(split), self.dictionary)

    def metric_names(self) -> List[str]:
        return ["loss", "accuracy"]

    def reduce_metrics(self, sums: Dict[str, float]) -> Dict[str, float]:
        """``accuracy``: of the sentences with a neighbour in their batch, the share (%) whose
        best-scored candidate is one."""
        if not sums.get("rows"):
            return {}
        return {"accuracy": round(100.0 * sums.get("correct", 0.0) / sums["rows"], 2)}
