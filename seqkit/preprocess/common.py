"""What both preprocessors share (:mod:`seqkit.preprocess.text` for parallel and monolingual text,
:mod:`seqkit.preprocess.labelled` for classification and tagging): the config of
``seqkit-preprocess``, the split names, tokenizer training."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Protocol, Tuple

import numpy as np
from omegaconf import MISSING

from seqkit.core.config import arg, to_plain
from seqkit.core.errors import SeqkitError
from seqkit.core.io import staging_in_use
from seqkit.core.registry import TOKENIZERS
from seqkit.core.settings import user_set
from seqkit.data.dictionary import Dictionary
from seqkit.tokenizers import Tokenizer

log = logging.getLogger("seqkit.preprocess")


TASKS = ("translation", "classification", "tagging", "language_modeling")
LM_KEY = "text"  # the "language" of a monolingual data folder: {split}.text.bin, dict.text.txt


@dataclass
class PreprocessConfig:
    task: str = arg("translation", "translation (parallel text files {pref}.{lang}), classification (TSV with a "
                                   "header, or {pref}.input0[/1] + {pref}.label), tagging (CoNLL columns) or "
                                   "language_modeling (one text file per split: {pref}, or {pref}.{source_lang})",
                    choices=TASKS)
    source_lang: Optional[str] = arg(None, "source language suffix: files are {pref}.{source_lang}[.gz]")
    target_lang: Optional[str] = arg(None, "target language suffix; empty/null = one-language mode")
    trainpref: Optional[str] = arg(None, "training files prefix (required)")
    validpref: Optional[str] = arg(None, "validation prefix(es), comma-separated -> splits valid, valid1, ...")
    testpref: Optional[str] = arg(None, "test prefix(es), comma-separated -> splits test, test1, ...")
    destdir: str = arg("data-bin", "output folder")
    joined_dictionary: bool = arg(True, "one tokenizer and dictionary trained on both sides")
    thresholdsrc: int = arg(0, "drop source pieces seen fewer times in training (joined: both sides)", ge=0)
    thresholdtgt: int = arg(0, "drop target pieces seen fewer times in training", ge=0)
    nwordssrc: int = arg(-1, "source dictionary size, specials included (-1 = all; joined: both sides)", ge=-1)
    nwordstgt: int = arg(-1, "target dictionary size, specials included (-1 = all)", ge=-1)
    workers: int = arg(1, "processes that encode and binarize", ge=1)
    overwrite: bool = arg(False, "replace a non-empty destdir")
    skip_empty: bool = arg(True, "drop training pairs with an empty side (valid/test keep them)")
    shards: int = arg(1, "translation / language_modeling: write destdir/shard0 ... shard{N-1}, each a whole data "
                         "folder holding the N-th contiguous part of the training pairs (the same dictionaries, "
                         "valid and test in each); train on them with task.data=DIR/shard0:DIR/shard1:... (one "
                         "shard an epoch). 1 = one folder, destdir itself", ge=1)
    tokenizer: Any = arg(MISSING, "tokenizer config, filled by the hydra `tokenizer` group (tokenizer=NAME)")
    # classification / tagging only (other tasks refuse them: check_settings)
    text_columns: Any = arg(help="classification: TSV column(s) holding the text: text_columns=sentence or "
                                 "text_columns=[sentence1,sentence2] for pairs", factory=lambda: ["sentence"])
    label_column: str = arg("label", "classification: TSV column holding the label (a split without it is unlabelled)")
    word_column: int = arg(0, "tagging: CoNLL column holding the word (negative: from the end)")
    tag_column: int = arg(-1, "tagging: CoNLL column holding the tag (negative: from the end)")
    carve_valid: float = arg(0.0, "classification / tagging: hold out this share of the training examples as "
                                  "split `valid` (chosen by carve_seed; the tokenizer and dictionary learn from "
                                  "the rest); the validpref splits then become valid1, valid2, ... (GLUE: choose "
                                  "on the carved split, report the official dev once)", ge=0.0, lt=1.0)
    carve_seed: int = arg(1, "classification / tagging: the seed that picks carve_valid's examples")
    carve_unit: str = arg("example", "what carve_valid holds out: `example` (rows picked one by one) or "
                                     "`sentence` (phrase corpora such as SST-2, whose rows are the phrases of "
                                     "each sentence: whole sentences are held out and the rows found only "
                                     "inside them leave train; see seqkit/preprocess/carve.py)")
    vocab_from: Optional[str] = arg(None, "classification / tagging / language_modeling: reuse the tokenizer and "
                                          "dictionary of this pretraining checkpoint or language_modeling folder "
                                          "instead of learning new ones (for model=pretrained_classifier / "
                                          "pretrained_tagger, or to go on training a language model on new text)")


LABELLED = ("classification", "tagging")
# settings that only some tasks read -> (those tasks, what the setting is for)
TASK_SETTINGS = {
    "text_columns": (("classification",), "the TSV columns of a classification file"),
    "label_column": (("classification",), "the TSV column of a classification file's labels"),
    "word_column": (("tagging",), "a CoNLL file's word column"),
    "tag_column": (("tagging",), "a CoNLL file's tag column"),
    "target_lang": (("translation",), "the target side of parallel text"),
    "source_lang": (("translation", "language_modeling"), "the files' language suffix"),
    "joined_dictionary": (("translation",), "one dictionary for both sides of parallel text"),
    "thresholdtgt": (("translation",), "the target dictionary's count threshold"),
    "nwordstgt": (("translation",), "the target dictionary's size"),
    "skip_empty": (("translation",), "dropping training pairs with an empty side (a language model keeps "
                                     "every line)"),
    "workers": (("translation", "language_modeling", "classification", "tagging"),
                "processes that binarize a text stream"),
    "shards": (("translation", "language_modeling"), "training text cut into shard folders"),
}


def _shown(cfg: PreprocessConfig, name: str) -> str:
    value = getattr(cfg, name)
    return f"{name}=[{','.join(map(str, value))}]" if isinstance(value, (list, tuple)) else f"{name}={value}"


def check_carve(cfg: PreprocessConfig) -> None:
    """carve_valid, carve_seed and carve_unit: a known unit; on classification and tagging only; the
    seed and unit only with something carved."""
    from seqkit.preprocess.carve import check_known_unit, check_unit

    check_known_unit(cfg.carve_unit)  # on any task
    if cfg.task in LABELLED:
        check_unit(cfg.carve_unit, cfg.carve_valid)  # a unit with nothing carved
        if cfg.carve_valid <= 0 and user_set(cfg, ["carve_seed"]):
            raise SeqkitError(f"{_shown(cfg, 'carve_seed')} picks what carve_valid holds out, and carve_valid=0 holds "
                              "out nothing: set carve_valid (e.g. carve_valid=0.1) or drop carve_seed")
        return
    if cfg.carve_valid > 0:
        raise SeqkitError("carve_valid= applies to task=classification and tagging (translation and language "
                          "models have validation files of their own: validpref=)")
    for name in ("carve_seed", "carve_unit"):
        if user_set(cfg, [name]):
            raise SeqkitError(f"{_shown(cfg, name)} applies to what carve_valid holds out, in task=classification and "
                              f"tagging; task={cfg.task} carves nothing (its validation files: validpref=): drop it")


def check_settings(cfg: PreprocessConfig) -> None:
    """Refuse, before any file is read, a setting that ``cfg.task`` would not read."""
    check_carve(cfg)
    if cfg.vocab_from and cfg.task == "translation":
        raise SeqkitError("vocab_from= applies to task=classification, tagging and language_modeling")
    for name, (tasks, what) in TASK_SETTINGS.items():
        if cfg.task not in tasks and user_set(cfg, [name]):
            raise SeqkitError(f"{_shown(cfg, name)} sets {what}, read by task={' and '.join(tasks)} only; "
                              f"task={cfg.task} does not read it: drop it")
    for name in ("thresholdtgt", "nwordstgt"):
        if cfg.joined_dictionary and user_set(cfg, [name]):
            raise SeqkitError(f"{_shown(cfg, name)}: with joined_dictionary=true (the default) one dictionary "
                              "serves both sides, built with thresholdsrc and nwordssrc; set those, or "
                              "joined_dictionary=false")


def split_names(cfg: PreprocessConfig) -> List[Tuple[str, str]]:
    """[(split, prefix)]: train, valid, valid1, ..., test, test1, ..."""
    out = [("train", cfg.trainpref)]
    for base, prefs in (("valid", cfg.validpref), ("test", cfg.testpref)):
        parts = [p.strip() for p in str(prefs or "").split(",") if p.strip()]
        shift = 1 if base == "valid" and getattr(cfg, "carve_valid", 0) > 0 else 0  # `valid` is the carved split
        out += [(base if i + shift == 0 else f"{base}{i + shift}", p) for i, p in enumerate(parts)]
    return out


def remove_stale_staging(dest: str) -> List[str]:
    """Remove the staging folders a killed run writing ``dest`` left beside it (``.{name}.tmp-XXXXXXXX``
    and its ``.old``, see :func:`seqkit.core.io.staged_dir`); the paths removed. A folder that a
    running seqkit-preprocess holds (two runs writing one destdir at once) is left to it."""
    parent, name = os.path.split(os.path.abspath(dest))
    if not os.path.isdir(parent):
        return []
    # seqkit.core.io._temp_name: the prefix, then 8 characters of [a-z0-9_]
    stale = re.compile(re.escape(f".{name}.tmp-") + r"[a-z0-9_]{8}(\.old)?")
    removed = []
    for entry in sorted(os.listdir(parent)):
        path = os.path.join(parent, entry)
        if stale.fullmatch(entry) and os.path.isdir(path) and not os.path.islink(path):
            if not entry.endswith(".old") and staging_in_use(path):
                log.info("left %s: another seqkit-preprocess is writing it", path)
                continue
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
            log.info("removed %s, the staging folder of an interrupted run", path)
    return removed


@contextlib.contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """While the block runs, SIGTERM (``kill``, a job scheduler) raises ``SystemExit(143)`` instead
    of ending the process at once, so the staged folder is removed on the way out; a second SIGTERM
    acts at once. Outside the main thread, a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    previous = signal.SIG_DFL if previous is None else previous  # (None: a handler set outside Python)

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def tokenizer_config(value: Any) -> Any:
    """The typed tokenizer config from a dataclass, DictConfig or plain dict (checked)."""
    plain = to_plain(value)
    if not isinstance(plain, dict):
        raise SeqkitError("tokenizer is required (e.g. tokenizer=sentencepiece_bpe)")
    return TOKENIZERS.make_config(plain)


DEFAULT_SAMPLE = 1_000_000  # training pairs a tokenizer without an input_sentence_size field learns from


class TrainText(Protocol):
    """The training text a tokenizer learns from: ``pairs`` line numbers (pairs kept after
    skip_empty), and ``write(lang, ranks, path)``: that language's lines at the kept pairs of
    ``ranks`` (sorted; None = every kept pair), in file order, as UTF-8 lines ending in ``\n``."""

    pairs: int

    def write(self, lang: str, ranks: Optional[np.ndarray], path: str) -> None: ...


class LinesInMemory:
    """:class:`TrainText` over lines already read (classification and tagging: small corpora)."""

    def __init__(self, train: Dict[str, List[str]]):
        self.train = train
        self.pairs = len(next(iter(train.values())))

    def write(self, lang: str, ranks: Optional[np.ndarray], path: str) -> None:
        lines = self.train[lang]
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.writelines(line + "\n" for line in (lines if ranks is None else (lines[r] for r in ranks.tolist())))


def sample_ranks(total: int, size: int, seed: int, chunk: int = 1 << 20) -> Optional[np.ndarray]:
    """``size`` of ``range(total)`` drawn without replacement with ``seed``, sorted; None (every
    one) when ``size`` is 0 or ``total <= size``. Drawn ``chunk`` items at a time (how many fall in
    each chunk is hypergeometric), so memory stays ``O(size + chunk)`` however large ``total``."""
    if size <= 0 or total <= size:
        return None
    rng = np.random.default_rng(seed)
    out, left, need = [], total, size
    for start in range(0, total, chunk):
        n = min(chunk, total - start)
        k = int(rng.hypergeometric(n, left - n, need)) if left > n else need
        out.append(np.sort(rng.choice(n, size=k, replace=False)) + start)
        left, need = left - n, need - k
    return np.concatenate(out)


def train_tokenizers(
    tok_cfg: Any, joined: bool, langs: List[str], train: "Dict[str, List[str]] | TrainText"
) -> Dict[str, Tokenizer]:
    """lang -> tokenizer trained on a seeded sample of ``tokenizer.input_sentence_size`` training
    pairs (every pair when there are no more: then exactly the lines in order, as before); the
    same object for every language when joined."""
    text = train if hasattr(train, "write") else LinesInMemory(train)
    size = getattr(tok_cfg, "input_sentence_size", DEFAULT_SAMPLE)
    seed = getattr(tok_cfg, "seed", 1)
    ranks = sample_ranks(text.pairs, size, seed)
    used = text.pairs if ranks is None else len(ranks)
    out: Dict[str, Tokenizer] = {}
    with tempfile.TemporaryDirectory(prefix="seqkit-tok-") as work:
        for group in [langs] if joined else [[lang] for lang in langs]:
            files = []
            for lang in group:  # the sampled training lines, as plain UTF-8 text for the trainer
                files.append(os.path.join(work, f"train.{lang}.txt"))
                text.write(lang, ranks, files[-1])
            sub = os.path.join(work, "-".join(group))
            os.makedirs(sub)
            tok = TOKENIZERS.build(tok_cfg)
            t0 = time.perf_counter()
            tok.train(files, sub)
            log.info("trained %s on %s: %d of %d lines (seed %d) in %.1fs", tok_cfg.name, "+".join(group),
                     used * len(group), text.pairs * len(group), seed, time.perf_counter() - t0)
            out.update({lang: tok for lang in group})
    return out


def save_torch(obj: Any, path: str) -> None:
    import torch

    torch.save(obj, path)


def pretrained_vocabulary(path: str) -> Tuple[Tokenizer, Dictionary]:
    """Tokenizer and dictionary of a pretraining checkpoint (its task's own, before ``<mask>`` or
    sentinels are added) or of a ``task=language_modeling`` folder."""
    from seqkit.core import checkpoints
    from seqkit.tasks.language_modeling import LanguageModelingTask
    from seqkit.tokenizers import load_tokenizer

    if os.path.isdir(path):
        state = LanguageModelingTask.folder_state(path)
    elif os.path.isfile(path):
        state = checkpoints.load(path).get("task_state") or {}
        if "src_dict" in state and state["src_dict"] == state.get("tgt_dict"):  # a translation model, one dictionary
            state = {"dict": state["src_dict"], "tokenizer": state.get("src_tokenizer")}
        if "dict" not in state:
            raise SeqkitError(f"vocab_from={path} is not a pretraining checkpoint (task language_modeling, "
                              "masked_lm or denoising)")
    else:
        raise SeqkitError(f"vocab_from={path}: no such checkpoint or folder")
    if state.get("tokenizer") is None:
        raise SeqkitError(f"vocab_from={path} holds no tokenizer")
    return load_tokenizer(state["tokenizer"]), Dictionary.from_state_dict(state["dict"])
