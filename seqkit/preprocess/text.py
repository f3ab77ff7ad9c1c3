"""Raw parallel text -> tokenizer(s), dictionaries and memory-mapped id arrays (``seqkit-preprocess``).

(``task=classification`` and ``task=tagging`` are handled in :mod:`seqkit.preprocess.labelled`; the
config and what both share are in :mod:`seqkit.preprocess.common`.)

``task=language_modeling`` reads one text file per split (``{pref}``, or ``{pref}.{source_lang}``
when source_lang is given) and keeps every line, an empty one as a lone eos (WikiText's paragraph
breaks): the files hold one token stream per split, ``{split}.text.bin/.idx`` with
``dict.text.txt`` and ``tokenizer.text.pt``, and ``preprocess.json`` records each split's words
(whitespace tokens plus one eos per line) for per-word perplexity.

The steps stream, so memory stays flat in the corpus size (issue 63): **read** (check pass,
:mod:`seqkit.preprocess.stream`: files exist, UTF-8, a line at most 1 MB, the two sides' line
counts agree; byte offsets for the workers) -> **learn the tokenizer** on a seeded sample of
``tokenizer.input_sentence_size`` training pairs -> **encode** every line once in ``workers``
processes over line ranges, to provisional ids (:mod:`seqkit.preprocess.encode`) -> the
**dictionary** from the training ranges' piece counts -> **binarize**: the ranges remapped through
it and merged in order (the output does not depend on ``workers``) -> ``shards`` folders.
Everything is written in a staged folder that becomes ``destdir`` only when all of it succeeded
(removed on an error, Ctrl-C or SIGTERM; one a SIGKILL left behind is removed by the next run).

Output folder (read by the translation task and the generator):
    dict.{lang}.txt  tokenizer.{lang}.pt  {split}.{src}-{tgt}.{lang}.bin/.idx  preprocess.json
(one-language mode, no target_lang: ``{split}.{src}.bin/.idx``); with ``shards=N``, one such
folder per shard: ``destdir/shard0`` ... ``shard{N-1}``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from typing import Any, Dict, List, Tuple

import numpy as np

from seqkit.core.config import to_plain
from seqkit.core.errors import SeqkitError
from seqkit.core.io import atomic_write_text, staged_dir
from seqkit.data.dictionary import UNK, Dictionary
from seqkit.preprocess.common import (LM_KEY, TASKS, PreprocessConfig, check_settings,  # noqa: F401
                                      pretrained_vocabulary, remove_stale_staging, save_torch, sigterm_as_exit,
                                      split_names, tokenizer_config, train_tokenizers)
from seqkit.preprocess.encode import Range, build_dictionaries, merge, run_ranges
from seqkit.preprocess.stream import Split, TrainFiles, cuts, scan_inputs
from seqkit.tokenizers import Tokenizer

log = logging.getLogger("seqkit.preprocess")


# ---------------------------------------------------------------------------------------- inputs


def input_path(pref: str, lang: str) -> str:
    """``{pref}.{lang}``, else ``{pref}.{lang}.gz``; a missing file is an error naming it."""
    path = f"{pref}.{lang}"
    if os.path.isfile(path):
        return path
    if os.path.isfile(path + ".gz"):
        return path + ".gz"
    raise SeqkitError(f"file not found: {path} (nor {path}.gz)")


def _check_config(cfg: PreprocessConfig) -> List[str]:
    if not cfg.source_lang:
        raise SeqkitError("source_lang is required (e.g. source_lang=de)")
    if not cfg.trainpref:
        raise SeqkitError("trainpref is required (files {trainpref}.{lang}[.gz])")
    if cfg.workers < 1:
        raise SeqkitError(f"workers must be >= 1, got {cfg.workers}")
    langs = [cfg.source_lang] + ([cfg.target_lang] if cfg.target_lang else [])
    if len(set(langs)) != len(langs):
        raise SeqkitError(f"source_lang and target_lang are both {cfg.source_lang!r}")
    return langs


def input_paths(cfg: PreprocessConfig, langs: List[str], lm: bool) -> Dict[str, Dict[str, str]]:
    """split -> lang -> input file, every path checked before any file is read. Language modeling:
    file ``{pref}`` (``{pref}.{source_lang}`` when set, ``.gz`` allowed) under ``LM_KEY``."""
    out: Dict[str, Dict[str, str]] = {}
    for split, pref in split_names(cfg):
        if not lm:
            out[split] = {lang: input_path(pref, lang) for lang in langs}
        elif cfg.source_lang:
            out[split] = {LM_KEY: input_path(pref, cfg.source_lang)}
        elif os.path.isfile(pref) or os.path.isfile(pref + ".gz"):
            out[split] = {LM_KEY: pref if os.path.isfile(pref) else pref + ".gz"}
        else:
            raise SeqkitError(f"file not found: {pref} (nor {pref}.gz)")
    return out


# ------------------------------------------------------------------------------------------ main


def _folder(out: str, cfg: PreprocessConfig, shard: int) -> str:
    return out if cfg.shards == 1 else os.path.join(out, f"shard{shard}")


def _plan(cfg: PreprocessConfig, langs: List[str], splits: Dict[str, Split], work: str, lm: bool) -> List[Range]:
    """The workers' line ranges: each split cut into ``workers`` ranges (the training split first
    into ``shards``), in order."""
    tasks: List[Range] = []
    for split in splits.values():
        train = split.name == "train"
        for shard, cut in enumerate(cuts(split, cfg.workers, cfg.shards if train else 1)):
            if train and cfg.shards > 1 and split.kept(cut[0], cut[-1]) == 0:
                raise SeqkitError(f"shards={cfg.shards}: shard {shard} would hold no training pair ({split.kept()} in "
                                  "all): use fewer shards")
            for a, b in zip(cut, cut[1:]):
                files = {lang: (split.scans[lang].path, split.scans[lang].offset(a)) for lang in langs}
                drop = split.dropped[np.searchsorted(split.dropped, a):np.searchsorted(split.dropped, b)] - a
                tasks.append(Range(split.name, shard, files, b - a, os.path.join(work, f"{split.name}.{len(tasks)}"),
                                   train=train and not cfg.vocab_from, drop=drop.tolist(), words=lm))
    return tasks


def _binarize(cfg: PreprocessConfig, langs: List[str], splits: Dict[str, Split], out: str, work: str,
              toks: Dict[str, Tokenizer], dicts: Dict[str, Dictionary] | None, lm: bool) -> Tuple[Any, list, list]:
    """Encode every line once, build the dictionaries (unless given), write every folder's
    ``.bin``/``.idx`` (valid and test copied into every shard); returns the dictionaries, and per
    shard: split -> {"skipped_empty", "langs": lang -> counts}, and split -> words."""
    tasks = _plan(cfg, langs, splits, work, lm)
    results = run_ranges(tasks, cfg.workers, toks)
    if dicts is None:
        dicts = build_dictionaries(cfg, langs, toks, tasks, results)
    src, tgt = cfg.source_lang, cfg.target_lang or None
    stats: List[Dict[str, Any]] = [{} for _ in range(cfg.shards)]
    words: List[Dict[str, int]] = [{} for _ in range(cfg.shards)]
    for split in splits:
        for shard in range(cfg.shards if split == "train" else 1):
            folder = _folder(out, cfg, shard)
            os.makedirs(folder, exist_ok=True)
            parts = [(t, r) for t, r in zip(tasks, results) if t.split == split and t.shard == shard]
            st = stats[shard][split] = {"skipped_empty": sum(t.count - r.lines for t, r in parts), "langs": {}}
            for lang in langs:
                base = f"{split}.{src}-{tgt}.{lang}" if tgt else f"{split}.{src}"
                s = st["langs"][lang] = merge(os.path.join(folder, base), lang, parts, toks[lang], dicts[lang])
                s["unk_pct"] = round(100.0 * s["unk"] / max(s["tokens"], 1), 3)
            words[shard][split] = sum(r.words for _, r in parts)
        for shard in range(1 if split == "train" else cfg.shards):  # valid and test: in every shard
            if shard:
                first, folder = _folder(out, cfg, 0), _folder(out, cfg, shard)
                for name in sorted(os.listdir(first)):
                    if name.startswith(f"{split}."):
                        shutil.copyfile(os.path.join(first, name), os.path.join(folder, name))
                stats[shard][split] = json.loads(json.dumps(stats[0][split]))
                words[shard][split] = words[0][split]
    return dicts, stats, words


def _write_folder(folder: str, cfg: PreprocessConfig, langs: List[str], toks: Dict[str, Tokenizer],
                  dicts: Dict[str, Dictionary], tok_cfg: Any, stats: Dict[str, Any], words: Dict[str, int],
                  shard: int, lm: bool) -> None:
    for lang in langs:
        dicts[lang].save(os.path.join(folder, f"dict.{lang}.txt"))
        save_torch(toks[lang].state_dict(), os.path.join(folder, f"tokenizer.{lang}.pt"))
    # no timings in here: the folder's bytes depend only on the inputs and the config
    meta = {
        **({"task": "language_modeling", "words": words} if lm else {}),
        "source_lang": cfg.source_lang,
        "target_lang": cfg.target_lang or None,
        "joined_dictionary": cfg.joined_dictionary,
        "tokenizer": to_plain(tok_cfg),
        **({"vocab_from": cfg.vocab_from} if cfg.vocab_from else {}),
        "splits": {split: st["langs"][cfg.source_lang]["sentences"] for split, st in stats.items()},
        "stats": stats,
        **({"shard": {"index": shard, "count": cfg.shards}} if cfg.shards > 1 else {}),
    }
    atomic_write_text(os.path.join(folder, "preprocess.json"), json.dumps(meta, indent=2, ensure_ascii=False) + "\n")


def preprocess(cfg: PreprocessConfig) -> Dict[str, Any]:
    """Run every step; returns the stats (also logged, and saved in ``preprocess.json``)."""
    t_start = time.perf_counter()
    lm = cfg.task == "language_modeling"
    if lm and not cfg.trainpref:
        raise SeqkitError("trainpref is required (the training text file)")
    langs = _check_config(cfg) if cfg.task == "translation" else [LM_KEY] if lm else []
    check_settings(cfg)  # a setting this task would ignore fails before any file is read
    tok_cfg = tokenizer_config(cfg.tokenizer)  # a bad tokenizer config fails before any reading
    dest = os.path.abspath(cfg.destdir)
    if os.path.exists(dest) and not os.path.isdir(dest):
        raise SeqkitError(f"destdir {dest} exists and is not a folder")
    if os.path.isdir(dest) and os.listdir(dest) and not cfg.overwrite:  # fail before the long part
        raise SeqkitError(f"output folder {dest} exists and is not empty (pass overwrite=true to replace it)")
    remove_stale_staging(dest)
    if cfg.task not in ("translation", "language_modeling"):
        from seqkit.preprocess.labelled import preprocess_labelled

        return preprocess_labelled(cfg, tok_cfg, dest)

    paths = input_paths(cfg, langs, lm)
    if lm:  # one stream per split: every line stays, the names below are those of one language
        cfg = dataclasses.replace(cfg, source_lang=LM_KEY, target_lang=None, skip_empty=False)
    with sigterm_as_exit(), staged_dir(dest, cfg.overwrite) as out:
        work = os.path.join(out, ".work")  # provisional files and .gz inputs' plain copies
        os.makedirs(work)
        splits = scan_inputs(paths, work, cfg.skip_empty)
        n_lines = sum(split.lines * len(split.scans) for split in splits.values())
        train = splits["train"]
        blank_src = np.setdiff1d(np.asarray(train.scans[cfg.source_lang].blank, dtype=np.int64), train.dropped)
        if train.kept() - len(blank_src) == 0:
            raise SeqkitError(f"no training sentences in {cfg.trainpref}{'' if lm else '.*'} (after dropping empty "
                              "lines)")
        log.info("read %d lines in %d split(s): %s", n_lines, len(splits), ", ".join(splits))
        if len(train.dropped):
            log.info("train: dropped %d pair(s) with an empty side (skip_empty=true)", len(train.dropped))
        dicts = None
        if cfg.vocab_from:  # a pretrained model's pieces and ids, to go on training it on this text
            tok, d = pretrained_vocabulary(cfg.vocab_from)
            toks, dicts, tok_cfg = {LM_KEY: tok}, {LM_KEY: d}, tok.cfg
        else:
            toks = train_tokenizers(tok_cfg, cfg.joined_dictionary, langs, TrainFiles(train))
        dicts, stats, words = _binarize(cfg, langs, splits, out, work, toks, dicts, lm)
        shutil.rmtree(work)
        log.info("dictionary: %s", ", ".join(f"[{lang}] {len(dicts[lang])} types" for lang in langs))
        for shard in range(cfg.shards):
            _write_folder(_folder(out, cfg, shard), cfg, langs, toks, dicts, tok_cfg, stats[shard], words[shard],
                          shard, lm)

    seconds = time.perf_counter() - t_start
    for shard in range(cfg.shards):
        if cfg.shards > 1:
            log.info("shard%d:", shard)
        _log_stats(stats[shard], langs)
    if cfg.shards > 1:
        log.info("%d shards: train on them with task.data=%s", cfg.shards,
                 ":".join(_folder(dest, cfg, k) for k in range(cfg.shards)))
    log.info("%d lines in %.1fs (%.0f lines/s) -> %s", n_lines, seconds, n_lines / max(seconds, 1e-9), dest)
    return {
        "splits": stats[0],
        **({"shards": stats} if cfg.shards > 1 else {}),
        "dictionary": {lang: len(dicts[lang]) for lang in langs},
        "lines": n_lines,
        "seconds": round(seconds, 3),
        "lines_per_s": round(n_lines / max(seconds, 1e-9), 1),
    }


def _log_stats(stats: Dict[str, Any], langs: List[str]) -> None:
    for split, st in stats.items():
        for lang in langs:
            s = st["langs"][lang]
            extra = f", {s['empty']} empty line(s) kept" if s["empty"] and split != "train" else ""
            log.info(
                "%s [%s]: %d sentences, %d tokens, %.2f%% replaced by %s%s",
                split, lang, s["sentences"], s["tokens"], s["unk_pct"], UNK, extra,
            )
