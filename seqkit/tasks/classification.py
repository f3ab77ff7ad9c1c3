"""Sentence classification (single sentences or pairs) and sequence tagging.

Both read a folder written by ``seqkit-preprocess task=classification|tagging`` (see
:mod:`seqkit.preprocess.labelled`) and train models of kind ``classifier`` / ``tagger``
(:class:`seqkit.models.base.EncoderClassifierModel`) with the usual criteria: the target of a
classification batch is ``(B,)``, of a tagging batch ``(B, S)`` with ``IGNORE`` wherever no tag is
scored (padding, ``<s>``/``</s>``, pieces after a word's first).

Metrics: the criterion asks the task to count, on every batch, what the metrics need
(``count_metrics``: a confusion matrix, or conlleval's chunk counts); the trainer sums the counts
over the validation set (and over ranks) and ``reduce_metrics`` turns the sums into accuracy,
macro-F1 and MCC, or entity precision/recall/F1. ``checkpoint.best_checkpoint_metric`` can name
any of them (with ``checkpoint.maximize_best_checkpoint_metric=true``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import CRITERIA, MODELS, TASKS
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.data.labelled_dataset import IGNORE, UNLABELLED_WORD_START, LabelledDataset, encode_example
from seqkit.models.base import check_model_kind
from seqkit.scoring import metrics
from seqkit.tasks.folders import check_dictionary, check_folder, describe_folder, tokenizer_label
from seqkit.tokenizers import Tokenizer, load_tokenizer


@dataclass
class ClassificationConfig:
    name: str = arg("classification", "registry name")
    data: str = arg("data-bin", "folder written by seqkit-preprocess task=classification")


@dataclass
class TaggingConfig:
    name: str = arg("tagging", "registry name")
    data: str = arg("data-bin", "folder written by seqkit-preprocess task=tagging")


@TASKS.register("classification", ClassificationConfig)
class ClassificationTask:
    """A label per sentence (or sentence pair). Dictionaries, labels and tokenizer come from the
    data folder (training) or from a checkpoint (prediction)."""

    per_token = False
    model_kind = "classifier"
    ignore_index = IGNORE  # criteria skip targets equal to this

    def __init__(self, cfg: Any, state: Optional[Dict[str, Any]] = None):
        self.cfg = cfg
        if state is None:
            state = self._read_data_folder(cfg)
        self.src_dict = Dictionary.from_state_dict(state["src_dict"])
        self.labels: List[str] = list(state["labels"])
        self.pairs: bool = bool(state["pairs"])
        self._tokenizer_state = state.get("tokenizer")
        self._tokenizer: Optional[Tokenizer] = None

    def _read_data_folder(self, cfg: Any) -> Dict[str, Any]:
        meta_path = os.path.join(cfg.data, "preprocess.json")
        if not os.path.isfile(meta_path):
            raise SeqkitError(f"{cfg.data} is not a seqkit-preprocess output folder (no preprocess.json)")
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
        made_for = meta.get("task", "translation")
        if made_for != cfg.name:
            raise SeqkitError(f"{cfg.data} was preprocessed for task {made_for}, not {cfg.name} "
                              f"(seqkit-preprocess task={cfg.name} ...)")
        tok_path = os.path.join(cfg.data, "tokenizer.input.pt")
        return {
            "src_dict": Dictionary.load(os.path.join(cfg.data, "dict.input.txt")).state_dict(),
            "labels": meta["labels"],
            "pairs": meta.get("pairs", False),
            "tokenizer": torch.load(tok_path, map_location="cpu", weights_only=True) if os.path.isfile(tok_path) else None,
        }

    def checkpoint_state(self) -> Dict[str, Any]:
        return {"src_dict": self.src_dict.state_dict(), "labels": list(self.labels), "pairs": self.pairs,
                "tokenizer": self._tokenizer_state}

    def describe(self) -> str:
        """What this task's model is, for messages: ``a sentence classifier (3 labels)``."""
        if self.per_token:
            return f"a tagger ({len(self.labels)} tags)"
        return f"a sentence{'-pair' if self.pairs else ''} classifier ({len(self.labels)} labels)"

    def check_data_folder(self) -> None:
        """The folder is of this task's kind (pairs for a pair classifier), in this dictionary."""
        data, model = self.cfg.data, self.describe()
        meta = check_folder(data, self.cfg.name, model)
        if meta is not None and not self.per_token and bool(meta.get("pairs", False)) != self.pairs:
            raise SeqkitError(f"task.data={data} is {describe_folder(meta)}, but this checkpoint is {model}: "
                              f"give it {'sentence pairs' if self.pairs else 'single sentences'} "
                              "(seqkit-preprocess task=classification ...)")
        check_dictionary(data, "dict.input.txt", self.src_dict, tokenizer_label(self._tokenizer_state), meta,
                         "preprocess the text as its training folder was (the same tokenizer and dictionary)")

    # -- data ------------------------------------------------------------------------------------
    def split_exists(self, split: str) -> bool:
        return os.path.isfile(os.path.join(self.cfg.data, f"{split}.input.idx"))

    def load_dataset(self, split: str, with_target: bool = True) -> LabelledDataset:
        base = os.path.join(self.cfg.data, split)
        self.check_data_folder()
        if not self.split_exists(split):
            raise SeqkitError(f"no split {split!r} in {self.cfg.data} (no {base}.input.idx)")
        inputs = IndexedDataset(f"{base}.input")
        inputs.check_vocab(len(self.src_dict))
        labels = None
        # tagging always loads its label stream: it also marks where words start
        if (with_target or self.per_token) and os.path.isfile(f"{base}.label.idx"):
            labels = IndexedDataset(f"{base}.label")
            if len(labels) != len(inputs):
                raise SeqkitError(f"{base}: {len(inputs)} inputs but {len(labels)} labels")
            # an untagged split stores only word starts (1s): scoring it would give a loss of 0
            if with_target and self.per_token and len(labels) and bool(labels[0].eq(UNLABELLED_WORD_START).any()):
                raise SeqkitError(f"{base}: the {split} split has no tags (it was read from a file without a tag "
                                  "column); training and validation need them (dataset.valid_subset= skips validation)")
        elif with_target:  # training and validation score labels; prediction passes with_target=False
            raise SeqkitError(f"{base}.label.idx not found: the {split} split has no labels (training and "
                              "validation need them; set dataset.valid_subset= to skip validation)")
        return LabelledDataset(inputs, labels, self.src_dict, self.per_token, self.pairs)

    # -- components ------------------------------------------------------------------------------
    def build_model(self, model_cfg: Any) -> torch.nn.Module:
        check_model_kind(model_cfg.name, self.model_kind, self.cfg.name)
        return MODELS.build(model_cfg, self.src_dict, len(self.labels))

    def build_criterion(self, criterion_cfg: Any) -> Callable:
        return CRITERIA.build(criterion_cfg, self)

    # -- metrics ---------------------------------------------------------------------------------
    def count_metrics(self, logits: torch.Tensor, sample: Dict[str, Any]) -> Dict[str, float]:
        """Confusion-matrix cells ``cm_{gold}_{pred}`` of this batch (every cell, so all ranks and
        batches log the same keys)."""
        cm = metrics.confusion_counts(logits.detach().argmax(dim=-1), sample["target"], len(self.labels), IGNORE)
        K = len(self.labels)
        flat = cm.reshape(-1)  # stays on the device: the trainer reads the sums once per log line
        return {f"cm_{g}_{p}": flat[g * K + p] for g in range(K) for p in range(K)}

    def metric_names(self) -> List[str]:
        """What validation reports (any can be ``checkpoint.best_checkpoint_metric``)."""
        return ["loss", "nll_loss", "ppl", "accuracy", "macro_f1", "mcc"] + (["f1"] if len(self.labels) == 2 else [])

    def reduce_metrics(self, sums: Dict[str, float]) -> Dict[str, float]:
        K = len(self.labels)
        if f"cm_{K - 1}_{K - 1}" not in sums:
            return {}
        cm = [[int(sums[f"cm_{g}_{p}"]) for p in range(K)] for g in range(K)]
        return metrics.classification_metrics(cm)

    def valid_metrics(self, model: Any, dataset: Any, make_generator: Callable) -> Dict[str, float]:
        return {}  # everything comes from count_metrics during the validation pass

    # -- text <-> ids ------------------------------------------------------------------------------
    def tokenizer(self) -> Optional[Tokenizer]:
        if self._tokenizer is None and self._tokenizer_state is not None:
            self._tokenizer = load_tokenizer(self._tokenizer_state)
        return self._tokenizer

    def encode_example(self, texts: Tuple[str, ...]) -> Tuple[List[int], List[int]]:
        """Raw example -> ids ``<s> a </s> [b </s>]`` and, for tagging, the first piece of each word."""
        want = 2 if self.pairs else 1
        if not self.per_token and len(texts) != want:
            raise SeqkitError(f"this model reads {'sentence pairs' if self.pairs else 'single sentences'}: "
                              f"expected {want} tab-separated text(s), got {len(texts)}")
        tok = self.tokenizer()
        if tok is None:
            raise SeqkitError("the checkpoint holds no tokenizer")
        return encode_example(tok, self.src_dict, tuple(texts), self.per_token)


@TASKS.register("tagging", TaggingConfig)
class TaggingTask(ClassificationTask):
    """A tag per word, on the word's first piece; entity-level metrics as conlleval computes them."""

    per_token = True
    model_kind = "tagger"

    def count_metrics(self, logits: torch.Tensor, sample: Dict[str, Any]) -> Dict[str, float]:
        """conlleval's chunk counts and token accuracy of this batch: ``(B, S, K)`` logits (read
        on the host: tagging's updates make this one read of the device per batch)."""
        pred = logits.detach().argmax(dim=-1).tolist()  # (B, S)
        target = sample["target"].tolist()  # (B, S), IGNORE where no tag is scored
        gold_sents, pred_sents = [], []
        for p_row, t_row in zip(pred, target):
            keep = [j for j, t in enumerate(t_row) if t != IGNORE]
            gold_sents.append([self.labels[t_row[j]] for j in keep])
            pred_sents.append([self.labels[p_row[j]] for j in keep])
        c = metrics.entity_counts(gold_sents, pred_sents)
        return {f"chunk_{k}": float(c[k]) for k in ("correct", "predicted", "gold", "tokens", "correct_tokens")}

    # host lists and loops: under common.compile, seqkit.training.compile runs it eagerly (through
    # torch.compiler.disable, applied there so that torch._dynamo loads only when compiling)
    count_metrics.eager_under_compile = True  # type: ignore[attr-defined]

    def metric_names(self) -> List[str]:
        return ["loss", "nll_loss", "ppl", "precision", "recall", "f1", "accuracy"]

    def reduce_metrics(self, sums: Dict[str, float]) -> Dict[str, float]:
        if "chunk_gold" not in sums:
            return {}
        counts = {k: int(sums[f"chunk_{k}"]) for k in ("correct", "predicted", "gold", "tokens", "correct_tokens")}
        scores = metrics.entity_scores({**counts, "per_type": {}})
        return {k: scores[k] for k in ("precision", "recall", "f1", "accuracy")}
