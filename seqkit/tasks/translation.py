"""Translation: parallel data binarized by ``seqkit-preprocess`` -> encoder-decoder models."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import CRITERIA, MODELS, TASKS
from seqkit.data.dictionary import Dictionary
from seqkit.tasks.folders import (check_dictionary, check_folder, check_shards, describe_folder, epoch_dir, shard_dirs,
                                  tokenizer_label)
from seqkit.tokenizers import Tokenizer, load_tokenizer

if TYPE_CHECKING:  # torch is imported where data is read or a model built: see seqkit.tasks
    import torch

    from seqkit.data.pair_dataset import LanguagePairDataset

log = logging.getLogger("seqkit.translation")


@dataclass
class TranslationConfig:
    name: str = arg("translation", "registry name")
    data: str = arg("data-bin", "folder written by seqkit-preprocess; dir1:dir2:...: shards of one corpus in the same "
                                "dictionaries, epoch e training on shard (e-1) % N, valid/test read from the first")
    source_lang: Optional[str] = arg(None, "source language (default: from the data folder's preprocess.json)")
    target_lang: Optional[str] = arg(None, "target language (default: from preprocess.json)")
    prepend_bos: bool = arg(False, "start every source with <s> (BART's tokenizer does; seqkit-import sets it for "
                                   "BART)")
    eval_bleu: bool = arg(False, "also compute detokenized sacreBLEU on the valid set each validation (beam search)")
    eval_bleu_beam: int = arg(5, "beam size for eval_bleu", ge=1)
    eval_bleu_max_sentences: int = arg(0, "translate only the first N valid sentences for eval_bleu (0: all)", ge=0)
    eval_bleu_batch_size: int = arg(64, "sentences per generation batch for eval_bleu", ge=1)


@TASKS.register("translation", TranslationConfig)
class TranslationTask:
    """Dictionaries and tokenizer come from the data folder (training) or a checkpoint (inference)."""

    model_kind = "seq2seq"

    def __init__(self, cfg: TranslationConfig, state: Optional[Dict[str, Any]] = None):
        self.cfg = cfg
        if state is None:
            state = self._read_data_folder(cfg)
        self.source_lang, self.target_lang = state["source_lang"], state["target_lang"]
        self.src_dict = Dictionary.from_state_dict(state["src_dict"])
        self.tgt_dict = Dictionary.from_state_dict(state["tgt_dict"])
        self._tokenizer_states = {"src": state.get("src_tokenizer"), "tgt": state.get("tgt_tokenizer")}
        self._tokenizers: Dict[str, Tokenizer] = {}
        self.ignore_index = self.tgt_dict.pad()  # criteria skip padded target positions

    @staticmethod
    def _read_data_folder(cfg: TranslationConfig) -> Dict[str, Any]:
        data = shard_dirs(cfg.data)[0]  # shards: the first one's dictionaries, which all must share
        meta_path = os.path.join(data, "preprocess.json")
        if not os.path.isfile(meta_path):
            raise SeqkitError(f"{data} is not a seqkit-preprocess output folder (no preprocess.json)")
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
        made_for = meta.get("task", "translation")
        if made_for != "translation":  # e.g. seqkit-train without task=classification (translation is the default)
            raise SeqkitError(f"{data} was preprocessed for task {made_for}, not translation (seqkit-train "
                              f"task={made_for} ...)")
        src = cfg.source_lang or meta.get("source_lang")
        tgt = cfg.target_lang or meta.get("target_lang")
        if not src or not tgt:
            raise SeqkitError(f"{data}: translation needs a source and a target language")
        check_shards(cfg.data)
        import torch

        state: Dict[str, Any] = {"source_lang": src, "target_lang": tgt}
        for side, lang in (("src", src), ("tgt", tgt)):
            state[f"{side}_dict"] = Dictionary.load(os.path.join(data, f"dict.{lang}.txt")).state_dict()
            tok_path = os.path.join(data, f"tokenizer.{lang}.pt")
            state[f"{side}_tokenizer"] = (
                torch.load(tok_path, map_location="cpu", weights_only=True) if os.path.isfile(tok_path) else None
            )
        return state

    def checkpoint_state(self) -> Dict[str, Any]:
        """What a checkpoint must hold to rebuild this task without the data folder."""
        return {
            "source_lang": self.source_lang,
            "target_lang": self.target_lang,
            "src_dict": self.src_dict.state_dict(),
            "tgt_dict": self.tgt_dict.state_dict(),
            "src_tokenizer": self._tokenizer_states["src"],
            "tgt_tokenizer": self._tokenizer_states["tgt"],
        }

    def describe(self) -> str:
        """What this task's model is, for messages: ``a translation model (de→en)``."""
        return f"a translation model ({self.source_lang}→{self.target_lang})"

    def check_data_folder(self, epoch: int = 1) -> None:
        """The folder (epoch ``epoch``'s shard) is a translation folder of this language pair, in these dictionaries."""
        data, model = epoch_dir(self.cfg.data, epoch), self.describe()
        meta = check_folder(data, "translation", model)
        if meta is None:
            return
        pair = (meta.get("source_lang"), meta.get("target_lang"))
        if all(pair) and pair != (self.source_lang, self.target_lang):
            raise SeqkitError(f"task.data={data} is {describe_folder(meta)}, but this checkpoint is {model}: "
                              f"give it {self.source_lang}→{self.target_lang} text (seqkit-preprocess "
                              f"source_lang={self.source_lang} target_lang={self.target_lang} ...)")
        for side, lang, d in (("src", self.source_lang, self.src_dict), ("tgt", self.target_lang, self.tgt_dict)):
            check_dictionary(data, f"dict.{lang}.txt", d, tokenizer_label(self._tokenizer_states.get(side)), meta,
                             "preprocess the text as its training folder was (the same tokenizer and dictionaries)")

    # -- data --------------------------------------------------------------------------------
    def split_exists(self, split: str) -> bool:
        prefix = os.path.join(epoch_dir(self.cfg.data), f"{split}.{self.source_lang}-{self.target_lang}.{self.source_lang}")
        return os.path.isfile(prefix + ".idx")

    def load_dataset(self, split: str, with_target: bool = True, epoch: int = 1) -> LanguagePairDataset:
        """``split`` of the folder, or of epoch ``epoch``'s shard when task.data names shards (1: the first)."""
        from seqkit.data.indexed_dataset import IndexedDataset
        from seqkit.data.pair_dataset import LanguagePairDataset

        self.check_data_folder(epoch)
        base = os.path.join(epoch_dir(self.cfg.data, epoch), f"{split}.{self.source_lang}-{self.target_lang}")
        src = IndexedDataset(f"{base}.{self.source_lang}")
        src.check_vocab(len(self.src_dict))
        tgt = None
        if with_target:
            tgt = IndexedDataset(f"{base}.{self.target_lang}")
            tgt.check_vocab(len(self.tgt_dict))
            if len(src) != len(tgt):
                raise SeqkitError(f"{base}: {len(src)} source but {len(tgt)} target sentences")
        return LanguagePairDataset(src, tgt, self.src_dict, self.tgt_dict, source_bos=self.cfg.prepend_bos)

    # -- components -----------------------------------------------------------------------------
    def build_model(self, model_cfg: Any) -> torch.nn.Module:
        from seqkit.models.base import check_model_kind

        check_model_kind(model_cfg.name, self.model_kind, "translation")
        return MODELS.build(model_cfg, self.src_dict, self.tgt_dict)

    def build_criterion(self, criterion_cfg: Any) -> Callable:
        return CRITERIA.build(criterion_cfg, self)

    # -- text <-> ids ------------------------------------------------------------------------------
    def tokenizer(self, side: str) -> Optional[Tokenizer]:
        if side not in self._tokenizers and self._tokenizer_states.get(side) is not None:
            self._tokenizers[side] = load_tokenizer(self._tokenizer_states[side])
        return self._tokenizers.get(side)

    def encode_source(self, line: str) -> List[int]:
        tok = self.tokenizer("src")
        pieces = tok.encode(line) if tok is not None else line.split()
        ids = self.src_dict.encode(pieces, append_eos=True)
        return [self.src_dict.bos()] + ids if self.cfg.prepend_bos else ids

    def pieces(self, ids: Any, side: str = "tgt") -> List[str]:
        return (self.tgt_dict if side == "tgt" else self.src_dict).string(ids)

    def detokenize(self, pieces: List[str], side: str = "tgt") -> str:
        tok = self.tokenizer(side)
        return tok.decode(pieces) if tok is not None else " ".join(pieces)

    # -- validation extras -------------------------------------------------------------------------
    def metric_names(self) -> List[str]:
        """What validation reports (any can be ``checkpoint.best_checkpoint_metric``)."""
        return ["loss", "nll_loss", "ppl"] + (["bleu"] if self.cfg.eval_bleu else [])

    def valid_metrics(self, model: Any, dataset: LanguagePairDataset, make_generator: Callable) -> Dict[str, float]:
        """Detokenized sacreBLEU of beam search on ``dataset`` when ``eval_bleu`` (else nothing)."""
        if not self.cfg.eval_bleu:
            return {}
        import sacrebleu

        n = len(dataset) if self.cfg.eval_bleu_max_sentences <= 0 else min(len(dataset), self.cfg.eval_bleu_max_sentences)
        generator = make_generator(beam=self.cfg.eval_bleu_beam)
        hyps: List[str] = []
        refs: List[str] = []
        bs = self.cfg.eval_bleu_batch_size
        # sort by length so batches carry little padding; scores do not depend on the order
        skip = set(dataset.too_long(*model.max_positions()).tolist())  # the loss skips them too
        order = sorted((i for i in range(n) if i not in skip), key=lambda i: int(dataset.src_sizes[i]))
        out: Dict[int, str] = {}
        for start in range(0, n, bs):
            sample = dataset.collate(order[start : start + bs])
            ni = sample["net_input"]
            results = generator.generate(model, ni["src_tokens"], ni["src_lengths"])
            for sid, nbest in zip(sample["id"].tolist(), results):
                out[sid] = self.detokenize(self.pieces(nbest[0]["tokens"]))
        for i in order:
            hyps.append(out[i])
            refs.append(self.detokenize(self.pieces(dataset.tgt[i])))
        bleu = sacrebleu.corpus_bleu(hyps, [refs])
        return {"bleu": round(bleu.score, 2)}
