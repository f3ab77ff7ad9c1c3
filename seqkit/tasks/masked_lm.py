"""Masked language modeling (BERT, RoBERTa, ALBERT, SpanBERT, ELECTRA) on a folder written by
``seqkit-preprocess task=language_modeling``; samples and masking: :mod:`seqkit.data.mlm_dataset`.

The dictionary gains ``<mask>`` at the end (as fairseq's masked_lm task adds it), so a masked-LM
model's vocabulary is the folder's dictionary plus one. Validation reports the masked-token loss
and top-1 accuracy (``accuracy``: the share of masked positions whose original token is the
model's first choice), and with sentence pairs the NSP/SOP accuracy (``sentence_accuracy``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

import torch

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import CRITERIA, MODELS, TASKS
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.data.lm_dataset import BREAK_MODES
from seqkit.data.mlm_dataset import MASK, MASK_UNITS, PAIR_MODES, MaskedLMDataset, MaskingOptions, word_start_table
from seqkit.data.noising import NoiseSpecials
from seqkit.models.base import check_model_kind
from seqkit.tasks.folders import tokenizer_label
from seqkit.tasks.language_modeling import DATA_KEY, LanguageModelingTask, check_lm_folder
from seqkit.tokenizers import Tokenizer, load_tokenizer


@dataclass
class MaskedLMConfig:
    name: str = arg("masked_lm", "registry name")
    data: str = arg("data-bin", "folder written by seqkit-preprocess task=language_modeling")
    tokens_per_sample: int = arg(128, "longest sample in tokens, <s> and </s> included (<= the model's positions)", ge=4)
    sample_break_mode: str = arg("complete", "complete: whole lines packed up to tokens_per_sample, across documents "
                                             "(RoBERTa's full sentences); none: fixed-size blocks; eos: one line each",
                                 choices=BREAK_MODES)
    mask_prob: float = arg(0.15, "share of maskable tokens (words, with mask_unit=word/span) selected", gt=0, lt=1)
    leave_unmasked_prob: float = arg(0.1, "of the selected: left as they are", ge=0, le=1)
    random_token_prob: float = arg(0.1, "of the selected: replaced by a random token", ge=0, le=1)
    mask_unit: str = arg("token", "token; word: whole-word masking; span: SpanBERT's geometric spans of words",
                         choices=MASK_UNITS)
    span_p: float = arg(0.2, "mask_unit=span: span lengths ~ Geometric(span_p) truncated to span_max", gt=0, le=1)
    span_max: int = arg(10, "mask_unit=span: longest span in words", ge=1)
    mask_copies: int = arg(0, "0: new masks every epoch (dynamic, RoBERTa); k: k fixed masked copies of each "
                              "sample for the whole run (static, BERT duplicated its data 10 times)", ge=0)
    sentence_pairs: str = arg("none", "none; nsp: next-sentence prediction (BERT); sop: sentence-order "
                                      "prediction (ALBERT); needs a model with a sentence head", choices=PAIR_MODES)
    seed: int = arg(1, "seed of the masks (with the epoch and the sample's index)")


@TASKS.register("masked_lm", MaskedLMConfig)
class MaskedLMTask:
    """Dictionary (+ ``<mask>``) and tokenizer from the data folder (training) or a checkpoint."""

    model_kind = "masked_lm"

    def __init__(self, cfg: MaskedLMConfig, state: Optional[Dict[str, Any]] = None):
        self.cfg = cfg
        if state is None:
            state = LanguageModelingTask.folder_state(cfg.data)
        self._state = state
        self.dictionary = Dictionary.from_state_dict(state["dict"])
        real = len(self.dictionary)  # random replacements come from the folder's own symbols
        if self.dictionary.symbols[-1] == MASK:  # an imported model's dictionary ends with it already
            real -= 1
        self.mask_idx = self.dictionary.add(MASK, 0)
        self.specials = NoiseSpecials(mask=self.mask_idx, vocab_size=real)
        self.src_dict = self.dictionary
        self._tokenizer: Optional[Tokenizer] = None
        self.ignore_index = self.dictionary.pad()

    def checkpoint_state(self) -> Dict[str, Any]:
        return dict(self._state)

    def describe(self) -> str:
        """What this task's model is, for messages."""
        tok = tokenizer_label(self._state.get("tokenizer"))
        return f"a masked language model ({tok}, {len(self.dictionary)} types)"

    def tokenizer_name(self) -> Optional[str]:
        tok = self._state.get("tokenizer") or {}
        return (tok.get("config") or {}).get("name")

    def tokenizer(self) -> Optional[Tokenizer]:
        if self._tokenizer is None and self._state.get("tokenizer") is not None:
            self._tokenizer = load_tokenizer(self._state["tokenizer"])
        return self._tokenizer

    # -- data ------------------------------------------------------------------------------------
    def split_exists(self, split: str) -> bool:
        return os.path.isfile(os.path.join(self.cfg.data, f"{split}.{DATA_KEY}.idx"))

    def options(self) -> MaskingOptions:
        c = self.cfg
        if c.leave_unmasked_prob + c.random_token_prob > 1:
            raise SeqkitError("task.leave_unmasked_prob + task.random_token_prob must be <= 1")
        return MaskingOptions(c.mask_prob, c.leave_unmasked_prob, c.random_token_prob, c.mask_unit, c.span_p,
                              c.span_max, c.mask_copies, c.sentence_pairs)

    def load_dataset(self, split: str, with_target: bool = True) -> MaskedLMDataset:
        prefix = os.path.join(self.cfg.data, f"{split}.{DATA_KEY}")
        check_lm_folder(self.cfg.data, self.describe(), self.dictionary, self._state.get("tokenizer"))
        if not self.split_exists(split):
            raise SeqkitError(f"no split {split!r} in {self.cfg.data} (no {prefix}.idx)")
        data = IndexedDataset(prefix)
        data.check_vocab(self.specials.vocab_size)
        opts = self.options()
        if split != "train":  # the same masks at every validation, so runs and epochs compare
            opts.mask_copies = 1
        words = word_start_table(self.dictionary, self.tokenizer_name()) if opts.mask_unit != "token" else None
        return MaskedLMDataset(data, self.dictionary, self.specials, self.cfg.tokens_per_sample,
                               self.cfg.sample_break_mode, opts, words, self.cfg.seed)

    # -- components ------------------------------------------------------------------------------
    def build_model(self, model_cfg: Any) -> torch.nn.Module:
        check_model_kind(model_cfg.name, self.model_kind, "masked_lm")
        model = MODELS.build(model_cfg, self.dictionary)
        wants = self.cfg.sentence_pairs != "none"
        if wants != bool(getattr(model, "has_sentence_head", False)):
            raise SeqkitError(f"task.sentence_pairs={self.cfg.sentence_pairs} needs a model "
                              f"{'with' if wants else 'without'} a sentence head (model.sentence_head="
                              f"{'true' if wants else 'false'})")
        if getattr(model, "has_span_head", False) and self.cfg.mask_unit != "span":
            raise SeqkitError("model.span_boundary_head=true needs task.mask_unit=span (its spans' boundaries)")
        return model

    def build_criterion(self, criterion_cfg: Any) -> Callable:
        return CRITERIA.build(criterion_cfg, self)

    # -- metrics ---------------------------------------------------------------------------------
    def metric_names(self) -> List[str]:
        names = ["loss", "nll_loss", "ppl", "accuracy"]
        return names + (["sentence_accuracy"] if self.cfg.sentence_pairs != "none" else [])

    def reduce_metrics(self, sums: Dict[str, float]) -> Dict[str, float]:
        out: Dict[str, float] = {}
        if sums.get("sample_size"):
            out["accuracy"] = round(100.0 * sums.get("mlm_correct", 0.0) / sums["sample_size"], 2)
        if sums.get("disc_positions"):  # ELECTRA's discriminator: replaced-token detection accuracy
            out["disc_accuracy"] = round(100.0 * sums.get("disc_correct", 0.0) / sums["disc_positions"], 2)
            # the share of replaced positions: calling every token original scores 100 minus this
            out["replaced"] = round(100.0 * sums.get("replaced", 0.0) / sums["disc_positions"], 2)
        if sums.get("sentence_count"):
            out["sentence_accuracy"] = round(100.0 * sums.get("sentence_correct", 0.0) / sums["sentence_count"], 2)
        return out

    def valid_metrics(self, model: Any, dataset: Any, make_generator: Callable) -> Dict[str, float]:
        return {}
