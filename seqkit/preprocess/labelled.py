"""``seqkit-preprocess task=classification|tagging``: labelled text -> tokenizer, dictionaries and
binarized splits (the same memory-mapped format as translation).

Output folder (read by :mod:`seqkit.tasks.classification`):
    dict.input.txt  tokenizer.input.pt  dict.label.txt (label count, one per line; line = id)
    {split}.input.bin/.idx  {split}.label.bin/.idx (when the split has labels)
    {split}.text.txt (the examples as read: pair columns tab-separated, a tagged sentence's words
    space-separated; printed back by seqkit-generate)  preprocess.json

Layout of an example: ``<s> a ... </s>`` or ``<s> a ... </s> b ... </s>``. Tagging splits each word
into pieces on its own; the word's tag goes on its first piece (see
:mod:`seqkit.data.labelled_dataset` for how labels are stored).

``task=classification`` streams (:mod:`seqkit.preprocess.labelled_stream`: memory flat in the
corpus size, ``workers`` processes; ``carve_unit=sentence`` too, in a few bytes a training row:
:mod:`seqkit.preprocess.carve_stream`), and so does ``task=tagging``
(:mod:`seqkit.preprocess.tagging_stream`: worker ranges start where a CoNLL sentence starts).
:func:`preprocess_in_memory` reads every split in memory: the reference the tests hold the streamed
folders to, byte for byte.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from collections import Counter
from typing import Any, Dict, List, Tuple

import numpy as np

from seqkit.core.config import to_plain
from seqkit.core.errors import SeqkitError
from seqkit.core.io import atomic_write_text, staged_dir
from seqkit.data.dictionary import UNK, Dictionary
from seqkit.data.indexed_dataset import write_dataset
from seqkit.data.labelled_dataset import FIRST_TAG, NOT_A_WORD_START, UNLABELLED_WORD_START, encode_example
from seqkit.data.labelled_text import LabelledSplit, check_known_labels, read_classification, read_conll
from seqkit.preprocess.carve import carve
from seqkit.preprocess.common import (pretrained_vocabulary, save_torch, sigterm_as_exit, split_names,
                                      train_tokenizers)
from seqkit.preprocess.labelled_stream import (KeptTexts, carve_train, check_known, check_source, encode_all,
                                               kept_labels, plan, write_folder)
from seqkit.preprocess.tagging_stream import stream_tagging

log = logging.getLogger("seqkit.preprocess")


def as_list(value: Any) -> List[str]:
    if value is None or value == "":
        return []
    return [str(value)] if isinstance(value, str) else [str(v) for v in value]


def text_columns(cfg: Any) -> List[str]:
    """The text columns (a classification setting), after checking trainpref is given."""
    if not cfg.trainpref:
        raise SeqkitError("trainpref is required (a TSV file, or a CoNLL file for task=tagging)")
    columns = as_list(cfg.text_columns)
    if cfg.task == "classification" and not 1 <= len(columns) <= 2:
        raise SeqkitError(f"text_columns names {len(columns)} columns; classification takes 1 (a sentence) or 2 (a pair)")
    return columns


def read_splits(cfg: Any) -> Tuple[Dict[str, LabelledSplit], Dict[str, Any]]:
    """({split: examples}, what carve_valid did: {} when nothing was carved)."""
    columns = text_columns(cfg)
    data, carved = {}, {}
    for split, pref in split_names(cfg):
        if cfg.task == "tagging":
            data[split] = read_conll(pref, cfg.word_column, cfg.tag_column)
        else:
            data[split] = read_classification(pref, columns, cfg.label_column)
    if data["train"].labels is None:
        what = f"column {cfg.label_column!r}" if cfg.task == "classification" else "tag column"
        raise SeqkitError(f"{data['train'].path}: the training split has no labels ({what})")
    if cfg.carve_valid > 0:
        train, valid, summary = carve(data["train"], cfg.carve_valid, cfg.carve_seed, cfg.carve_unit)
        data = {"train": train, "valid": valid, **{k: v for k, v in data.items() if k != "train"}}
        carved = {"split": "valid", "share": cfg.carve_valid, "seed": cfg.carve_seed, "unit": cfg.carve_unit,
                  "from": train.path, **summary}
    return data, carved


def label_set(train: LabelledSplit) -> List[str]:
    """The training labels, sorted (their ids are their positions)."""
    seen = set()
    for labels in train.labels:
        seen.update(labels if isinstance(labels, list) else [labels])
    return sorted(seen)


def preprocess_labelled(cfg: Any, tok_cfg: Any, dest: str) -> Dict[str, Any]:
    """task=classification and tagging, streamed (see the module doc)."""
    return (preprocess_tagging if cfg.task == "tagging" else preprocess_classification)(cfg, tok_cfg, dest)


def preprocess_in_memory(cfg: Any, tok_cfg: Any, dest: str) -> Dict[str, Any]:
    """Every split read in memory, then carved, encoded and written: the folder the streamed paths
    must write (the tests' reference; ``preprocess_labelled`` does not call it)."""
    t_start = time.perf_counter()
    per_token = cfg.task == "tagging"
    data, carved = read_splits(cfg)
    labels = label_set(data["train"])
    for split, sp in data.items():
        if split != "train":
            check_known_labels(sp, split, labels)
    label_id = {label: i for i, label in enumerate(labels)}
    # the tokenizer learns from the training text: each sentence of a pair on its own line, a
    # tagged sentence as its words joined by spaces
    if per_token:
        train_lines = [" ".join(words) for words in data["train"].texts]
    else:
        train_lines = [text for texts in data["train"].texts for text in texts]
    pairs = not per_token and len(data["train"].texts[0]) == 2
    log.info("read %s: %s", ", ".join(f"{s} {len(sp.texts)}" for s, sp in data.items()),
             f"{len(labels)} labels" + (" (sentence pairs)" if pairs else ""))

    pretrained = pretrained_vocabulary(cfg.vocab_from) if cfg.vocab_from else None
    with sigterm_as_exit(), staged_dir(dest, cfg.overwrite) as out:
        if pretrained is not None:
            tok, d = pretrained
            tok_cfg = tok.cfg
        else:
            tok = train_tokenizers(tok_cfg, True, ["input"], {"input": train_lines})["input"]
            counts: Counter = Counter()
            for texts in data["train"].texts:
                for text in texts:
                    counts.update(tok.encode(text))
            for piece in getattr(tok, "vocab_pieces", list)():
                counts.setdefault(piece, 0)
            d = Dictionary.build(counts, threshold=cfg.thresholdsrc, nwords=cfg.nwordssrc)
        d.save(os.path.join(out, "dict.input.txt"))
        save_torch(tok.state_dict(), os.path.join(out, "tokenizer.input.pt"))
        label_counts = Counter(x for ls in data["train"].labels for x in (ls if per_token else [ls]))
        atomic_write_text(os.path.join(out, "dict.label.txt"), "".join(f"{x} {label_counts[x]}\n" for x in labels))
        stats = {}
        for split, sp in data.items():
            inputs, stored = [], []
            ntok = nunk = 0
            for i, texts in enumerate(sp.texts):
                ids, starts = encode_example(tok, d, texts, per_token)
                inputs.append(ids)
                ntok += len(ids)
                nunk += ids.count(d.unk())
                if per_token:
                    row = [NOT_A_WORD_START] * len(ids)
                    for j, pos in enumerate(starts):
                        row[pos] = FIRST_TAG + label_id[sp.labels[i][j]] if sp.labels is not None else UNLABELLED_WORD_START
                    stored.append(row)
                elif sp.labels is not None:
                    stored.append([label_id[sp.labels[i]]])
            write_dataset(os.path.join(out, f"{split}.input"), inputs, len(d))
            if sp.labels is not None or per_token:
                write_dataset(os.path.join(out, f"{split}.label"), stored, len(labels) + FIRST_TAG)
            atomic_write_text(os.path.join(out, f"{split}.text.txt"),
                              "".join((" " if per_token else "\t").join(t) + "\n" for t in sp.texts))
            stats[split] = {"examples": len(sp.texts), "labelled": sp.labels is not None, "tokens": ntok,
                            "unk_pct": round(100.0 * nunk / max(ntok, 1), 3)}
            _log_split(split, stats[split])
        write_meta(out, cfg, pairs, labels, tok_cfg, stats, carved)
    return _done(t_start, d, labels, stats, dest)


def _log_split(split: str, st: Dict[str, Any]) -> None:
    log.info("%s: %d examples%s, %d tokens with <s>/</s>, %.2f%% replaced by %s", split, st["examples"],
             "" if st["labelled"] else " (no labels)", st["tokens"], st["unk_pct"], UNK)


def write_meta(out: str, cfg: Any, pairs: bool, labels: List[str], tok_cfg: Any, stats: Dict[str, Any],
               carved: Dict[str, Any]) -> None:
    meta = {
        "task": cfg.task,
        "pairs": pairs,
        "labels": labels,
        "tokenizer": to_plain(tok_cfg),
        "vocab_from": cfg.vocab_from,
        "splits": {split: st["examples"] for split, st in stats.items()},
        "carved": carved or None,
        "stats": stats,
    }
    atomic_write_text(os.path.join(out, "preprocess.json"), json.dumps(meta, indent=2, ensure_ascii=False) + "\n")


def _done(t_start: float, d: Dictionary, labels: List[str], stats: Dict[str, Any], dest: str) -> Dict[str, Any]:
    seconds = time.perf_counter() - t_start
    log.info("dictionary: %d types; labels: %s; %.1fs -> %s", len(d), ", ".join(labels[:20]) +
             (" ..." if len(labels) > 20 else ""), seconds, dest)
    return {"splits": stats, "dictionary": {"input": len(d)}, "labels": labels, "seconds": round(seconds, 3)}


def preprocess_classification(cfg: Any, tok_cfg: Any, dest: str) -> Dict[str, Any]:
    """task=classification, streamed (:mod:`seqkit.preprocess.labelled_stream`): the folder
    :func:`preprocess_in_memory` writes, byte for byte."""
    t_start = time.perf_counter()
    columns = text_columns(cfg)
    with sigterm_as_exit(), staged_dir(dest, cfg.overwrite) as out:
        work = os.path.join(out, ".work")  # the workers' files and .gz inputs' plain copies
        os.makedirs(work)
        sources = {split: check_source(split, pref, columns, cfg.label_column, work)
                   for split, pref in split_names(cfg)}
        train = sources["train"]
        if train.labels is None:
            raise SeqkitError(f"{train.path}: the training split has no labels (column {cfg.label_column!r})")
        held, dropped, carved = carve_train(cfg, train)
        labels, label_counts = kept_labels(train, held, dropped)
        for split, src in sources.items():
            if split != "train":
                check_known(src, split, labels)
        rows = {"train": train.rows - len(held) - len(dropped), **({"valid": len(held)} if carved else {}),
                **{split: src.rows for split, src in sources.items() if split != "train"}}
        pairs = len(columns) == 2
        log.info("read %s: %s", ", ".join(f"{s} {n}" for s, n in rows.items()),
                 f"{len(labels)} labels" + (" (sentence pairs)" if pairs else ""))

        # each sentence of a pair on a line of its own for the tokenizer
        tok_cfg, d, stats = write_folder(cfg, tok_cfg, out, work, sources, held, labels, label_counts, bool(carved),
                                         KeptTexts(train, np.union1d(held, dropped), len(columns)),
                                         functools.partial(plan, dropped=dropped), encode_all)
        for split, st in stats.items():
            _log_split(split, st)
        write_meta(out, cfg, pairs, labels, tok_cfg, stats, carved)
    return _done(t_start, d, labels, stats, dest)


def preprocess_tagging(cfg: Any, tok_cfg: Any, dest: str) -> Dict[str, Any]:
    """task=tagging, streamed (:mod:`seqkit.preprocess.tagging_stream`): the folder
    :func:`preprocess_in_memory` writes, byte for byte."""
    t_start = time.perf_counter()
    text_columns(cfg)  # trainpref is given
    with sigterm_as_exit(), staged_dir(dest, cfg.overwrite) as out:
        tok_cfg, d, labels, stats, carved = stream_tagging(cfg, tok_cfg, out)
        for split, st in stats.items():
            _log_split(split, st)
        write_meta(out, cfg, False, labels, tok_cfg, stats, carved)
    return _done(t_start, d, labels, stats, dest)
