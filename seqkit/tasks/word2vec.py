"""Word vectors from context: ``task=word2vec`` (Mikolov et al., 2013), skip-gram or CBOW with
negative sampling and subsampling of frequent words, on a language-modeling folder whose
dictionary is the vocabulary (``seqkit-preprocess task=language_modeling tokenizer=space``;
``thresholdsrc=5`` is word2vec's ``min_count=5``).

    seqkit-train task=word2vec task.data=DIR model=word2vec criterion=word2vec \\
        optimizer=sgd optimizer.lr=0.025 lr_scheduler=polynomial_decay \\
        lr_scheduler.end_learning_rate=0.0000025 optimization.max_update=N

How a batch is drawn (pieces, subsampling, dynamic window, noise words): :mod:`seqkit.data.word2vec`.
The word counts behind subsampling and the noise distribution are the training split's. The
model (:mod:`seqkit.models.word2vec`) is of kind ``word2vec``; ``seqkit-embed words=...``,
``analogy=``, ``analogies=`` and ``export=`` read its input vectors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import CRITERIA, MODELS, TASKS
from seqkit.data.dictionary import Dictionary
from seqkit.data.word2vec import MODES, Word2VecDataset, word_counts
from seqkit.models.base import check_model_kind
from seqkit.tasks.folders import tokenizer_label
from seqkit.tasks.language_modeling import FolderTask


@dataclass
class Word2VecTaskConfig:
    name: str = arg("word2vec", "registry name")
    data: str = arg("data-bin", "folder written by seqkit-preprocess task=language_modeling (tokenizer=space: its "
                                "dictionary is the vocabulary; thresholdsrc= is word2vec's min_count)")
    mode: str = arg("skipgram", "skipgram: each context word's vector predicts the centre word; cbow: the mean of "
                                "the window's vectors predicts it", choices=MODES)
    window: int = arg(5, "farthest context word; each centre word draws its window uniformly from 1..window "
                         "(Mikolov's dynamic window)", ge=1)
    negative: int = arg(5, "noise words per prediction, drawn from the unigram distribution raised to 0.75", ge=1)
    sample: float = arg(1e-3, "subsampling threshold t: a word of frequency f is kept with probability "
                              "min(1, (sqrt(f/t) + 1) t/f), as the C code and gensim; 0: keep every word", ge=0)
    max_sentence_length: int = arg(10000, "a longer line is cut into pieces of this many words (gensim's limit; "
                                          "the C code's is 1000); windows never cross a line end or a cut", ge=1)


@TASKS.register("word2vec", Word2VecTaskConfig)
class Word2VecTask(FolderTask):
    """Dictionary and tokenizer from the folder (training) or a checkpoint (``seqkit-embed``)."""

    model_kind = "word2vec"

    def __init__(self, cfg: Word2VecTaskConfig, state: Optional[Dict[str, Any]] = None):
        super().__init__(cfg, state)
        self._counts: Optional[np.ndarray] = None

    def describe(self) -> str:
        """``word2vec vectors (space tokenizer, 40 types)``, for messages."""
        return f"word2vec vectors ({tokenizer_label(self._tokenizer_state)}, {len(self.dictionary)} types)"

    @property
    def tgt_dict(self) -> Dictionary:
        """What a generator would write in: word vectors write nothing (one line for seqkit-generate)."""
        raise SeqkitError(f"this checkpoint is {self.describe()}, which generate no text: seqkit-embed prints a "
                          "word's nearest words (path=CHECKPOINT words=WORD) and answers analogies (analogy=a:b::c)")

    # -- data ------------------------------------------------------------------------------------
    def counts(self) -> np.ndarray:
        """``(V,)`` the training split's word counts (subsampling and noise read them for every split)."""
        if self._counts is None:
            self._counts = word_counts(self.open_split("train"), len(self.dictionary))
        return self._counts

    def load_dataset(self, split: str, with_target: bool = True) -> Word2VecDataset:
        c = self.cfg
        return Word2VecDataset(self.open_split(split), self.counts(), self.dictionary.pad(), c.mode, c.window, c.negative,
                               c.sample, c.max_sentence_length)

    # -- components ------------------------------------------------------------------------------
    def build_model(self, model_cfg: Any) -> torch.nn.Module:
        check_model_kind(model_cfg.name, self.model_kind, "word2vec")
        return MODELS.build(model_cfg, self.dictionary)

    def build_criterion(self, criterion_cfg: Any) -> Callable:
        if criterion_cfg.name != "word2vec":
            raise SeqkitError(f"task word2vec trains with criterion=word2vec (negative sampling), not "
                              f"criterion={criterion_cfg.name}")
        return CRITERIA.build(criterion_cfg, self)

    def metric_names(self) -> List[str]:
        return ["loss"]

    def valid_metrics(self, model: Any, dataset: Any, make_generator: Callable) -> Dict[str, float]:
        return {}

    def reduce_metrics(self, sums: Dict[str, float]) -> Dict[str, float]:
        """``kept``: the share (%) of the words that subsampling kept (gensim's effective / raw words)."""
        if not sums.get("raw_words"):
            return {}
        return {"kept": round(100.0 * sums.get("ntokens", 0.0) / sums["raw_words"], 2)}
