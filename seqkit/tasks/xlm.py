"""Cross-lingual language-model pretraining (XLM, Lample & Conneau 2019): MLM on each language's
sentences and TLM on parallel pairs, with language embeddings; samples: :mod:`seqkit.data.xlm_dataset`.

Data: one translation folder written by ``seqkit-preprocess`` with one dictionary for both sides
(``joined_dictionary=true``, the default): its splits are already language-tagged
(``train.de-en.de``, ``train.de-en.en``), each side being that language's monolingual text for MLM
and the pairs the parallel text for TLM. So the pretrained encoder reads the very dictionary the
translation model of that folder reads (``model.init_from``, :mod:`seqkit.models.init_from`).
``task.langs`` orders the languages: language k is row k of the model's language table.

The model is a BERT-family masked LM whose segment table is the language table
(``model.num_segments`` = the number of languages; the ``xlm_*`` presets): XLM's language
embeddings are added to token + position embeddings before the embedding LayerNorm, exactly where
BERT's segment embeddings are. The dictionary gains ``<mask>`` at the end, as in task masked_lm.
Each epoch holds every sentence of each language once (MLM) and every pair once (TLM): with both,
a third of the samples are TLM streams (the paper alternates MLM and TLM batches).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import CRITERIA, MODELS, TASKS
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.data.mlm_dataset import MASK
from seqkit.data.noising import NoiseSpecials
from seqkit.data.xlm_dataset import XLMDataset
from seqkit.models.base import check_model_kind
from seqkit.tasks.translation import TranslationConfig, TranslationTask
from seqkit.tokenizers import Tokenizer, load_tokenizer

LANGS_HELP = ("languages, in the order of the model's language rows (default: the folder's source then target "
              "language)")


def bilingual_state(data: str, langs: List[str], who: str) -> Dict[str, Any]:
    """The translation folder's dictionaries and tokenizers (one dictionary for both sides) and ``langs``."""
    state = TranslationTask._read_data_folder(TranslationConfig(data=data))
    pair = [state["source_lang"], state["target_lang"]]
    if state["src_dict"] != state["tgt_dict"]:
        raise SeqkitError(f"task {who}: {data} has a dictionary per side; {who} reads both languages in one "
                          "(seqkit-preprocess joined_dictionary=true)")
    for lang in langs:
        if lang not in pair:
            raise SeqkitError(f"task.langs: {lang} is not a language of {data} (its languages: {', '.join(pair)}); "
                              f"give task.langs from them")
    if len(set(langs)) != len(langs):
        raise SeqkitError(f"task.langs={langs} names a language twice; name each once")
    return {**state, "langs": list(langs) or pair}


class BilingualFolderTask:
    """What task xlm and task mass share: a translation folder's sides as per-language text."""

    cfg: Any
    who = "xlm"

    def _setup(self, state: Optional[Dict[str, Any]]) -> None:
        if state is None:
            state = bilingual_state(self.cfg.data, list(self.cfg.langs), self.who)
        self._state = state
        self.langs: List[str] = list(state["langs"])
        self.pair: Tuple[str, str] = (state["source_lang"], state["target_lang"])
        self.dictionary = Dictionary.from_state_dict(state["src_dict"])
        real = len(self.dictionary)
        self.mask_idx = self.dictionary.add(MASK, 0)
        self.specials = NoiseSpecials(mask=self.mask_idx, vocab_size=real)
        self.src_dict = self.tgt_dict = self.dictionary
        self.ignore_index = self.dictionary.pad()
        self._tokenizer: Optional[Tokenizer] = None

    def checkpoint_state(self) -> Dict[str, Any]:
        return dict(self._state)

    def tokenizer(self, side: str = "src") -> Optional[Tokenizer]:
        if self._tokenizer is None and self._state.get("src_tokenizer") is not None:
            self._tokenizer = load_tokenizer(self._state["src_tokenizer"])
        return self._tokenizer

    def _prefix(self, split: str, lang: str) -> str:
        src, tgt = self.pair
        return os.path.join(self.cfg.data, f"{split}.{src}-{tgt}.{lang}")

    def split_exists(self, split: str) -> bool:
        return os.path.isfile(self._prefix(split, self.pair[0]) + ".idx")

    def sides(self, split: str, langs: List[str], why: str) -> Dict[str, IndexedDataset]:
        """Each language's side of ``split``; a missing one in one line naming ``why`` it is read."""
        out = {}
        for lang in langs:
            prefix = self._prefix(split, lang)
            if not os.path.isfile(prefix + ".idx"):
                raise SeqkitError(f"task.data={self.cfg.data}: no {os.path.basename(prefix)}.idx, the {lang} side of "
                                  f"{split} that {why} reads; preprocess both sides, or drop {lang} from it")
            out[lang] = IndexedDataset(prefix)
            out[lang].check_vocab(self.specials.vocab_size)
        if len({len(d) for d in out.values()}) > 1:
            raise SeqkitError(f"task.data={self.cfg.data}: the sides of {split} hold "
                              f"{', '.join(f'{len(d)} {k}' for k, d in out.items())} sentences; re-preprocess them")
        return out

    def build_criterion(self, criterion_cfg: Any) -> Callable:
        return CRITERIA.build(criterion_cfg, self)

    def valid_metrics(self, model: Any, dataset: Any, make_generator: Callable) -> Dict[str, float]:
        return {}


@dataclass
class XLMConfig:
    name: str = arg("xlm", "registry name")
    data: str = arg("data-bin", "translation folder of seqkit-preprocess with one dictionary (joined_dictionary=true): "
                                "each side one language's text (MLM), the pairs parallel text (TLM)")
    langs: List[str] = arg(help=LANGS_HELP, factory=list)
    mlm: bool = arg(True, "MLM samples: every sentence of each language of task.langs")
    tlm: bool = arg(True, "TLM samples: every pair as one stream <s> src </s> <s> tgt </s> (positions restart at the "
                          "target, language ids switch there), masks on both sides")
    mask_prob: float = arg(0.15, "share of real tokens selected", gt=0, lt=1)
    leave_unmasked_prob: float = arg(0.1, "of the selected: left as they are", ge=0, le=1)
    random_token_prob: float = arg(0.1, "of the selected: replaced by a random token", ge=0, le=1)
    seed: int = arg(1, "seed of the masks (with the epoch and the sample's index)")


@TASKS.register("xlm", XLMConfig)
class XLMTask(BilingualFolderTask):
    """Dictionary (+ ``<mask>``), tokenizer and languages from the folder (training) or a checkpoint."""

    model_kind = "masked_lm"
    who = "xlm"

    def __init__(self, cfg: XLMConfig, state: Optional[Dict[str, Any]] = None):
        self.cfg = cfg
        if not cfg.mlm and not cfg.tlm:
            raise SeqkitError("task.mlm=false and task.tlm=false leave nothing to train on; set one of them true")
        if cfg.leave_unmasked_prob + cfg.random_token_prob > 1:
            raise SeqkitError("task.leave_unmasked_prob + task.random_token_prob must be <= 1")
        self._setup(state)
        if cfg.tlm and set(self.pair) - set(self.langs):
            raise SeqkitError(f"task.tlm=true reads both sides ({', '.join(self.pair)}) but task.langs="
                              f"[{','.join(self.langs)}]; give task.langs=[{','.join(self.pair)}] or task.tlm=false")

    def describe(self) -> str:
        """What this task's model is, for messages."""
        return f"an XLM model ({', '.join(self.langs)}, {len(self.dictionary)} types)"

    def load_dataset(self, split: str, with_target: bool = True) -> XLMDataset:
        c = self.cfg
        need = list(self.langs) if c.mlm else list(self.pair)
        why = "task.langs (MLM)" if c.mlm else "task.tlm (TLM)"
        sides = self.sides(split, need, why)
        return XLMDataset(sides, self.langs, self.langs if c.mlm else (), self.pair if c.tlm else None, self.specials,
                          c.mask_prob, c.leave_unmasked_prob, c.random_token_prob, c.seed, static=split != "train")

    def build_model(self, model_cfg: Any) -> torch.nn.Module:
        check_model_kind(model_cfg.name, self.model_kind, "xlm")
        n = len(self.langs)
        if getattr(model_cfg, "num_segments", None) != n:
            raise SeqkitError(f"task xlm: the model's segment table holds the language rows: set "
                              f"model.num_segments={n} (one per language: {', '.join(self.langs)}; the xlm_* presets)")
        if getattr(model_cfg, "sentence_head", False) or getattr(model_cfg, "span_boundary_head", False):
            raise SeqkitError("task xlm trains the masked-LM head only: set model.sentence_head=false and "
                              "model.span_boundary_head=false (the xlm_* presets)")
        return MODELS.build(model_cfg, self.dictionary)

    def metric_names(self) -> List[str]:
        return ["loss", "nll_loss", "ppl", "accuracy"]

    def reduce_metrics(self, sums: Dict[str, float]) -> Dict[str, float]:
        if not sums.get("sample_size"):
            return {}
        return {"accuracy": round(100.0 * sums.get("mlm_correct", 0.0) / sums["sample_size"], 2)}
