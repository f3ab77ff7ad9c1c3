"""Causal language modeling: a folder written by ``seqkit-preprocess task=language_modeling``
(one token stream per split, see :mod:`seqkit.data.lm_dataset` for how it becomes blocks) ->
models of kind ``lm`` (:class:`seqkit.models.base.LanguageModel`).

``prefix_length`` > 0 makes it a prefix LM (T5's prefix-LM objective, UniLM's seq-to-seq mask):
each block's first tokens are read bidirectionally and not scored, the rest causally and scored
(see :mod:`seqkit.data.lm_dataset`). Only a model whose attention takes that mask trains so
(``transformer_lm``; the LSTM reads left to right); the task marks the model it builds
(``model.prefix_lm``), so a prompt given to ``seqkit-generate`` is read as the prefix.

For generation the task looks like a translation task whose source is the prompt: the same
``src_dict``/``tgt_dict`` (one dictionary), ``encode_source`` (``</s> w1 ... wn``, no final eos),
``pieces`` and ``detokenize``, so ``seqkit-generate`` and the Translator drive it unchanged.
"""

from __future__ import annotations

import abc
import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

import torch

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import CRITERIA, MODELS, TASKS
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.data.lm_dataset import BREAK_MODES, TokenBlockDataset
from seqkit.models.base import check_model_kind
from seqkit.tasks.folders import check_dictionary, check_folder, check_shards, epoch_dir, shard_dirs, tokenizer_label
from seqkit.tokenizers import Tokenizer, load_tokenizer

DATA_KEY = "text"  # file names of a monolingual folder: dict.text.txt, {split}.text.bin (seqkit.preprocess.common.LM_KEY)


@dataclass
class LanguageModelingConfig:
    name: str = arg("language_modeling", "registry name")
    data: str = arg("data-bin", "folder written by seqkit-preprocess task=language_modeling; dir1:dir2:...: shards "
                                "in one dictionary, epoch e training on shard (e-1) % N, valid/test read from the first")
    tokens_per_sample: int = arg(512, "tokens scored per block (one training sample; <= the model's positions)", ge=1)
    sample_break_mode: str = arg("none", "none: fixed-size blocks across lines; eos: one line per block; complete: "
                                         "whole lines packed up to tokens_per_sample", choices=BREAK_MODES)
    context_window: int = arg(0, "validation/evaluation: each block also reads up to this many earlier tokens "
                                 "without scoring them (input length tokens_per_sample + context_window)", ge=0)
    eos_prefix: bool = arg(True, "</s> before each prompt and before the split's first token, as seqkit's training puts "
                                 "it before every line; false: the ids as the tokenizer gives them (seqkit-import sets "
                                 "it so for a GPT-2, which transformers feeds no prefix)")
    prefix_length: int = arg(0, "a prefix LM: each block's first this many tokens are read bidirectionally and not "
                                "scored, the rest causally and scored (validation always splits here; "
                                "seqkit-generate reads a prompt as the prefix); 0: a causal LM", ge=0)
    prefix_random: bool = arg(False, "training blocks: each one's prefix length drawn instead, uniformly from 1 to "
                                     "its length - 1 (T5's random split point), anew every epoch from common.seed; "
                                     "needs prefix_length > 0, which validation keeps")
    stream_batches: int = arg(0, "Transformer-XL's order: the split as this many streams of consecutive blocks, each "
                                 "batch the next block of every stream (rows continue the batch before, so the "
                                 "model carries memory; the same order every epoch, dataset.max_tokens unread); "
                                 "0: token-budget batches of shuffled blocks", ge=0)


class FolderTask(abc.ABC):
    """What every task over a language-modeling folder shares (the language model, word2vec,
    skip-/quick-thought): the dictionary and tokenizer from the folder (training) or a checkpoint
    (inference), and the folder's splits, checked to be of this dictionary."""

    def __init__(self, cfg: Any, state: Optional[Dict[str, Any]] = None):
        self.cfg = cfg
        if state is None:
            state = self.folder_state(cfg.data)
        self.dictionary = Dictionary.from_state_dict(state["dict"])
        self.src_dict = self.dictionary
        self._tokenizer_state = state.get("tokenizer")
        self._tokenizer: Optional[Tokenizer] = None

    @staticmethod
    def read_meta(data: str) -> Dict[str, Any]:
        """The folder's ``preprocess.json`` (the first shard's), checked to be a language-modeling folder."""
        data = shard_dirs(data)[0]
        meta_path = os.path.join(data, "preprocess.json")
        if not os.path.isfile(meta_path):
            raise SeqkitError(f"{data} is not a seqkit-preprocess output folder (no preprocess.json)")
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
        made_for = meta.get("task", "translation")
        if made_for != "language_modeling":
            raise SeqkitError(f"{data} was preprocessed for task {made_for}, not language_modeling "
                              "(seqkit-preprocess task=language_modeling ...)")
        return meta

    @classmethod
    def folder_state(cls, data: str) -> Dict[str, Any]:
        """Dictionary and tokenizer states of a language-modeling folder (every monolingual task's start);
        of the first shard when ``data`` names shards, after checking all have its dictionary."""
        cls.read_meta(data)
        check_shards(data)
        data = shard_dirs(data)[0]
        tok_path = os.path.join(data, f"tokenizer.{DATA_KEY}.pt")
        return {
            "dict": Dictionary.load(os.path.join(data, f"dict.{DATA_KEY}.txt")).state_dict(),
            "tokenizer": torch.load(tok_path, map_location="cpu", weights_only=True) if os.path.isfile(tok_path) else None,
        }

    def checkpoint_state(self) -> Dict[str, Any]:
        return {"dict": self.dictionary.state_dict(), "tokenizer": self._tokenizer_state}

    @abc.abstractmethod
    def describe(self) -> str:
        """What this task's model is, for messages (``a language model (space tokenizer, 20 types)``)."""

    # -- data ------------------------------------------------------------------------------------
    def split_exists(self, split: str, epoch: int = 1) -> bool:
        return os.path.isfile(os.path.join(epoch_dir(self.cfg.data, epoch), f"{split}.{DATA_KEY}.idx"))

    def open_split(self, split: str, epoch: int = 1) -> IndexedDataset:
        """The token array of ``split`` (of epoch ``epoch``'s shard when task.data names shards), after
        checking the folder is of this task's dictionary."""
        folder = epoch_dir(self.cfg.data, epoch)
        prefix = os.path.join(folder, f"{split}.{DATA_KEY}")
        check_lm_folder(folder, self.describe(), self.dictionary, self._tokenizer_state)
        if not self.split_exists(split, epoch):
            raise SeqkitError(f"no split {split!r} in {folder} (no {prefix}.idx)")
        data = IndexedDataset(prefix)
        data.check_vocab(len(self.dictionary))
        return data


@TASKS.register("language_modeling", LanguageModelingConfig)
class LanguageModelingTask(FolderTask):
    """Dictionary and tokenizer come from the data folder (training) or a checkpoint (inference)."""

    model_kind = "lm"

    def __init__(self, cfg: LanguageModelingConfig, state: Optional[Dict[str, Any]] = None):
        super().__init__(cfg, state)
        self.tgt_dict = self.dictionary  # the generator's view: the prompt is the source
        self.ignore_index = self.dictionary.pad()  # unscored positions: padding, context windows and prefixes
        if cfg.prefix_random and not cfg.prefix_length:
            raise SeqkitError("task.prefix_random=true draws a prefix LM's split points; it needs task.prefix_length "
                              "> 0 (the split validation keeps, e.g. half of task.tokens_per_sample), or drop it")

    def describe(self) -> str:
        """What this task's model is, for messages: ``a language model (space tokenizer, 20 types)``."""
        return f"a language model ({tokenizer_label(self._tokenizer_state)}, {len(self.dictionary)} types)"

    def load_dataset(self, split: str, with_target: bool = True, context_window: Optional[int] = None,
                     bidirectional: Optional[bool] = None, streams: Optional[int] = None,
                     epoch: int = 1) -> TokenBlockDataset:
        """Blocks of ``split``; ``context_window`` None: the config's, except 0 for train. Each block's
        first ``prefix_length`` tokens (drawn for train with ``prefix_random``) are not scored and,
        ``bidirectional`` (None: when ``prefix_length`` > 0, a prefix LM), read both ways. ``streams`` None: ``stream_batches``'s order (:mod:`seqkit.data.lm_dataset`).
        ``epoch``: whose shard when task.data names shards (1: the first)."""
        streams = self.cfg.stream_batches if streams is None else streams
        if streams and torch.distributed.is_available() and torch.distributed.is_initialized() \
                and torch.distributed.get_world_size() > 1:
            raise SeqkitError("task.stream_batches carries memory from one batch to the next in one process; "
                              "run it without torchrun")
        data = self.open_split(split, epoch)
        context = context_window if context_window is not None else 0 if split == "train" else self.cfg.context_window
        bidirectional = self.cfg.prefix_length > 0 if bidirectional is None else bidirectional
        random = self.cfg.prefix_random and split == "train"  # validation and evaluation keep prefix_length
        return TokenBlockDataset(data, self.dictionary, self.cfg.tokens_per_sample, self.cfg.sample_break_mode, context,
                                 self.cfg.eos_prefix, self.cfg.prefix_length, random, bidirectional, streams)

    def words(self, split: str) -> Optional[int]:
        """Words in ``split`` as preprocess counted them (whitespace tokens + one per line), if known."""
        return self.read_meta(self.cfg.data).get("words", {}).get(split)

    # -- components ------------------------------------------------------------------------------
    def build_model(self, model_cfg: Any) -> torch.nn.Module:
        check_model_kind(model_cfg.name, self.model_kind, "language_modeling")
        # a model whose attention takes the prefix-LM mask has the flag (transformer_lm)
        if self.cfg.prefix_length and not hasattr(MODELS.builder(model_cfg.name), "prefix_lm"):
            raise SeqkitError(f"task.prefix_length={self.cfg.prefix_length}: model {model_cfg.name} cannot read a "
                              "prefix bidirectionally (a recurrent LM reads one way; the prefix-LM mask is "
                              "attention's); use model=transformer_lm or one of its presets (gpt_mini...), or drop "
                              "task.prefix_length")
        check_streams(model_cfg, self.cfg.stream_batches)
        model = MODELS.build(model_cfg, self.dictionary)
        if self.cfg.prefix_length:
            model.prefix_lm = True  # seqkit-generate reads a prompt as the prefix
        return model

    def build_criterion(self, criterion_cfg: Any) -> Callable:
        return CRITERIA.build(criterion_cfg, self)

    def metric_names(self) -> List[str]:
        return ["loss", "nll_loss", "ppl"]

    def valid_metrics(self, model: Any, dataset: Any, make_generator: Callable) -> Dict[str, float]:
        return {}

    # -- text <-> ids ------------------------------------------------------------------------------
    def tokenizer(self, side: str = "tgt") -> Optional[Tokenizer]:
        if self._tokenizer is None and self._tokenizer_state is not None:
            self._tokenizer = load_tokenizer(self._tokenizer_state)
        return self._tokenizer

    def encode_source(self, line: str) -> List[int]:
        """A prompt: ``</s>`` (what precedes every line in training; without ``eos_prefix`` only before
        an empty prompt) then its pieces, no final eos."""
        tok = self.tokenizer()
        pieces = tok.encode(line) if tok is not None else line.split()
        ids = self.dictionary.encode(pieces, append_eos=False)
        return [self.dictionary.eos()] + ids if self.cfg.eos_prefix or not ids else ids

    def pieces(self, ids: Any, side: str = "tgt") -> List[str]:
        return self.dictionary.string(ids)

    def detokenize(self, pieces: List[str], side: str = "tgt") -> str:
        tok = self.tokenizer()
        return tok.decode(pieces) if tok is not None else " ".join(pieces)


def check_streams(model_cfg: Any, streams: int) -> None:
    """A model with memory (``mem_len``, Transformer-XL) trains on streams, and only it does."""
    mem_len = getattr(model_cfg, "mem_len", None)
    if mem_len is None and streams:
        raise SeqkitError(f"task.stream_batches={streams} orders batches for a model that carries memory across "
                          f"them (model=transformer_xl); model {model_cfg.name} reads each block alone: drop it")
    if mem_len and not streams:
        raise SeqkitError(f"model.mem_len={mem_len} reads the previous segment of each row, which shuffled blocks "
                          "are not: set task.stream_batches (e.g. 16, the batch's rows) or model.mem_len=0")


def check_lm_folder(data: str, model: str, dictionary: Dictionary,
                    tokenizer_state: Optional[Dict[str, Any]]) -> None:
    """Every monolingual task's data check: a language-modeling folder, binarized in ``dictionary``
    (or its first symbols: masked LM and denoising add theirs after the folder's)."""
    meta = check_folder(data, "language_modeling", model)
    check_dictionary(data, f"dict.{DATA_KEY}.txt", dictionary, tokenizer_label(tokenizer_state), meta,
                     "binarize the text in its vocabulary (seqkit-preprocess task=language_modeling "
                     "vocab_from=CHECKPOINT ...)")
