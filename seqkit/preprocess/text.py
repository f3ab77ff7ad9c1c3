"""Raw parallel text -> tokenizer(s), dictionaries and memory-mapped id arrays (``seqkit-preprocess``).

(``task=classification`` and ``task=tagging`` are handled in :mod:`seqkit.preprocess.labelled`; the
config and what both share are in :mod:`seqkit.preprocess.common`.)

``task=language_modeling`` reads one text file per split (``{pref}``, or ``{pref}.{source_lang}``
when source_lang is given) and keeps every line, an empty one as a lone eos (WikiText's paragraph
breaks): the files hold one token stream per split, ``{split}.text.bin/.idx`` with
``dict.text.txt`` and ``tokenizer.text.pt``, and ``preprocess.json`` records each split's words
(whitespace tokens plus one eos per line) for per-word perplexity.

Steps: read and check every input (files exist, UTF-8, source/target line counts agree), train
the tokenizer on the training text, count pieces of the training split, build the
dictionaries, then binarize every split in ``workers`` processes (contiguous chunks, one shard
per worker, merged in order so the output does not depend on ``workers``). Everything is written
in a staged folder that becomes ``destdir`` only when all of it succeeded (removed on an error,
Ctrl-C or SIGTERM; one a SIGKILL left behind is removed by the next run).

Output folder (read by the translation task and the generator):
    dict.{lang}.txt  tokenizer.{lang}.pt  {split}.{src}-{tgt}.{lang}.bin/.idx  preprocess.json
(one-language mode, no target_lang: ``{split}.{src}.bin/.idx``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing as mp
import os
import time
from collections import Counter
from typing import Any, Dict, List, Tuple

from seqkit.core.config import to_plain
from seqkit.core.errors import SeqkitError
from seqkit.core.io import atomic_write_text, read_all_lines, staged_dir
from seqkit.data.dictionary import UNK, Dictionary
from seqkit.data.indexed_dataset import IndexedDatasetBuilder, dtype_for_vocab
from seqkit.preprocess.common import (LM_KEY, TASKS, PreprocessConfig, check_settings,  # noqa: F401
                                      pretrained_vocabulary, remove_stale_staging, save_torch, sigterm_as_exit,
                                      split_names, tokenizer_config, train_tokenizers)
from seqkit.tokenizers import Tokenizer, load_tokenizer

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


def read_inputs(cfg: PreprocessConfig, langs: List[str]) -> Dict[str, Dict[str, List[str]]]:
    """split -> lang -> lines; every file is checked before any is read in full."""
    paths = {split: {lang: input_path(pref, lang) for lang in langs} for split, pref in split_names(cfg)}
    data: Dict[str, Dict[str, List[str]]] = {}
    for split, by_lang in paths.items():
        data[split] = {lang: read_all_lines(p) for lang, p in by_lang.items()}
        if len(langs) == 2:
            (a, pa), (b, pb) = by_lang.items()
            na, nb = len(data[split][a]), len(data[split][b])
            if na != nb:
                raise SeqkitError(f"line counts differ: {pa} has {na} lines, {pb} has {nb}")
    return data


def read_lm_inputs(cfg: PreprocessConfig) -> Dict[str, Dict[str, List[str]]]:
    """split -> {LM_KEY: lines} for language modeling: file ``{pref}`` (``{pref}.{source_lang}``
    when set, ``.gz`` allowed); every path is checked before any file is read in full."""
    paths = {}
    for split, pref in split_names(cfg):
        if cfg.source_lang:
            paths[split] = input_path(pref, cfg.source_lang)
        elif os.path.isfile(pref) or os.path.isfile(pref + ".gz"):
            paths[split] = pref if os.path.isfile(pref) else pref + ".gz"
        else:
            raise SeqkitError(f"file not found: {pref} (nor {pref}.gz)")
    return {split: {LM_KEY: read_all_lines(path)} for split, path in paths.items()}


def count_words(lines: List[str]) -> int:
    """Words a per-word perplexity divides by: whitespace tokens plus one end of line each."""
    return sum(len(line.split()) + 1 for line in lines)


def drop_empty(sides: Dict[str, List[str]]) -> Tuple[Dict[str, List[str]], int]:
    """Training pairs with no empty side, and how many were dropped."""
    columns = list(sides.values())
    keep = [i for i, row in enumerate(zip(*columns)) if all(s.strip() for s in row)]
    return {lang: [lines[i] for i in keep] for lang, lines in sides.items()}, len(columns[0]) - len(keep)


# --------------------------------------------------------------------------------------- workers

# Set before a pool starts: forked workers inherit them; spawned ones rebuild them from states.
_TOKENIZERS: Dict[str, Tokenizer] = {}
_DICTS: Dict[str, Dictionary] = {}


def _set_globals(toks: Dict[str, Tokenizer], dicts: Dict[str, Dictionary]) -> None:
    _TOKENIZERS.clear()
    _TOKENIZERS.update(toks)
    _DICTS.clear()
    _DICTS.update(dicts)


def _init_spawned(tok_states: Dict[str, dict], dict_states: Dict[str, dict]) -> None:
    toks = {lang: load_tokenizer(s) for lang, s in tok_states.items()}
    _set_globals(toks, {lang: Dictionary.from_state_dict(s) for lang, s in dict_states.items()})


def _count_chunk(task: Tuple[str, List[str]]) -> Counter:
    lang, lines = task
    tok = _TOKENIZERS[lang]
    counts: Counter = Counter()
    for line in lines:
        counts.update(tok.encode(line))
    return counts


def _binarize_chunk(task: Tuple[str, List[str], str]) -> Tuple[int, int, int, int]:
    """Encode lines into shard ``prefix``: (sentences, tokens without eos, unk tokens, empty lines)."""
    lang, lines, prefix = task
    tok, d = _TOKENIZERS[lang], _DICTS[lang]
    builder = IndexedDatasetBuilder(prefix, dtype_for_vocab(len(d)))
    ntok = nunk = nempty = 0
    for line in lines:
        ids = d.encode(tok.encode(line), append_eos=True)
        builder.add(ids)
        ntok += len(ids) - 1
        nunk += ids.count(d.unk_index)
        nempty += len(ids) == 1
    builder.finalize()
    return len(lines), ntok, nunk, nempty


def _run(fn, tasks: list, workers: int, toks: Dict[str, Tokenizer], dicts: Dict[str, Dictionary]) -> list:
    """``fn`` over ``tasks``, results in task order: in this process (workers=1) or a pool."""
    _set_globals(toks, dicts)
    if workers == 1 or len(tasks) <= 1:
        return [fn(t) for t in tasks]
    if "fork" in mp.get_all_start_methods():
        ctx, init, args = mp.get_context("fork"), None, ()
    else:  # pragma: no cover - no fork (Windows): rebuild from plain states
        states = ({k: t.state_dict() for k, t in toks.items()}, {k: d.state_dict() for k, d in dicts.items()})
        ctx, init, args = mp.get_context("spawn"), _init_spawned, states
    with ctx.Pool(min(workers, len(tasks)), init, args) as pool:
        return pool.map(fn, tasks, chunksize=1)


def chunks(n: int, k: int) -> List[Tuple[int, int]]:
    """``k`` contiguous near-equal [start, end) ranges over ``n`` items (never empty unless n=0)."""
    k = max(1, min(k, n))
    return [(i * n // k, (i + 1) * n // k) for i in range(k)]


# ------------------------------------------------------------------------------------------ main


def _build_dictionaries(
    cfg: PreprocessConfig, langs: List[str], train: Dict[str, List[str]], toks: Dict[str, Tokenizer]
) -> Dict[str, Dictionary]:
    """lang -> Dictionary of the training split's pieces (counted in ``workers`` processes)."""
    tasks = [(lang, train[lang][a:b]) for lang in langs for a, b in chunks(len(train[lang]), cfg.workers)]
    counted = _run(_count_chunk, tasks, cfg.workers, toks, {})
    dicts: Dict[str, Dictionary] = {}
    for group in [langs] if cfg.joined_dictionary else [[lang] for lang in langs]:
        counts: Counter = Counter()
        for (lang, _), c in zip(tasks, counted):
            if lang in group:
                counts.update(c)
        # pieces the tokenizer can emit but the training text never did still get an id (count 0)
        for piece in getattr(toks[group[0]], "vocab_pieces", list)():
            counts.setdefault(piece, 0)
        is_src = cfg.source_lang in group  # joined: the source settings apply (as in fairseq)
        d = Dictionary.build(
            counts,
            threshold=cfg.thresholdsrc if is_src else cfg.thresholdtgt,
            nwords=cfg.nwordssrc if is_src else cfg.nwordstgt,
        )
        dicts.update({lang: d for lang in group})
    return dicts


def _binarize(
    cfg: PreprocessConfig, langs: List[str], data: dict, out: str, toks: Dict[str, Tokenizer], dicts: dict
) -> Dict[str, Any]:
    """Write every split's ``.bin``/``.idx``: contiguous chunks -> worker shards -> merged in order."""
    src, tgt = cfg.source_lang, cfg.target_lang or None
    prefixes: Dict[Tuple[str, str], str] = {}
    tasks = []
    for split, sides in data.items():
        for lang in langs:
            base = f"{split}.{src}-{tgt}.{lang}" if tgt else f"{split}.{src}"
            prefixes[split, lang] = os.path.join(out, base)
            for k, (a, b) in enumerate(chunks(len(sides[lang]), cfg.workers)):
                shard = os.path.join(out, f"{base}.shard{k}")
                tasks.append(((split, lang), (lang, sides[lang][a:b], shard)))
    results = _run(_binarize_chunk, [t for _, t in tasks], cfg.workers, toks, dicts)
    return _merge_shards(tasks, results, prefixes, dicts)


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

    if lm:  # one stream per split: every line stays, the names below are those of one language
        data = read_lm_inputs(cfg)
        cfg = dataclasses.replace(cfg, source_lang=LM_KEY, target_lang=None, skip_empty=False)
    else:
        data = read_inputs(cfg, langs)
    n_lines = sum(len(lines) for sides in data.values() for lines in sides.values())
    skipped = 0
    if cfg.skip_empty:
        data["train"], skipped = drop_empty(data["train"])
    if not any(line.strip() for line in data["train"][cfg.source_lang]):
        raise SeqkitError(f"no training sentences in {cfg.trainpref}{'' if lm else '.*'} (after dropping empty lines)")
    log.info("read %d lines in %d split(s): %s", n_lines, len(data), ", ".join(data))
    if skipped:
        log.info("train: dropped %d pair(s) with an empty side (skip_empty=true)", skipped)

    with sigterm_as_exit(), staged_dir(dest, cfg.overwrite) as out:
        if cfg.vocab_from:  # a pretrained model's pieces and ids, to go on training it on this text
            tok, d = pretrained_vocabulary(cfg.vocab_from)
            toks, dicts, tok_cfg = {LM_KEY: tok}, {LM_KEY: d}, tok.cfg
        else:
            toks = train_tokenizers(tok_cfg, cfg.joined_dictionary, langs, data["train"])
            dicts = _build_dictionaries(cfg, langs, data["train"], toks)
        for lang in langs:
            dicts[lang].save(os.path.join(out, f"dict.{lang}.txt"))
            save_torch(toks[lang].state_dict(), os.path.join(out, f"tokenizer.{lang}.pt"))
        log.info("dictionary: %s", ", ".join(f"[{lang}] {len(dicts[lang])} types" for lang in langs))
        split_stats = _binarize(cfg, langs, data, out, toks, dicts)
        split_stats["train"]["skipped_empty"] = skipped
        # no timings in here: the folder's bytes depend only on the inputs and the config
        meta = {
            **({"task": "language_modeling",
                "words": {split: count_words(sides[LM_KEY]) for split, sides in data.items()}} if lm else {}),
            "source_lang": cfg.source_lang,
            "target_lang": cfg.target_lang or None,
            "joined_dictionary": cfg.joined_dictionary,
            "tokenizer": to_plain(tok_cfg),
            **({"vocab_from": cfg.vocab_from} if cfg.vocab_from else {}),
            "splits": {split: len(sides[cfg.source_lang]) for split, sides in data.items()},
            "stats": split_stats,
        }
        atomic_write_text(os.path.join(out, "preprocess.json"), json.dumps(meta, indent=2, ensure_ascii=False) + "\n")

    seconds = time.perf_counter() - t_start
    _log_stats(split_stats, langs)
    log.info("%d lines in %.1fs (%.0f lines/s) -> %s", n_lines, seconds, n_lines / max(seconds, 1e-9), dest)
    return {
        "splits": split_stats,
        "dictionary": {lang: len(dicts[lang]) for lang in langs},
        "lines": n_lines,
        "seconds": round(seconds, 3),
        "lines_per_s": round(n_lines / max(seconds, 1e-9), 1),
    }


def _merge_shards(tasks: list, results: list, prefixes: dict, dicts: Dict[str, Dictionary]) -> Dict[str, Any]:
    """Append the shards in task order; split -> {"skipped_empty", "langs": lang -> counts}.

    ``tokens`` counts pieces without the appended eos; ``unk_pct`` is the share of them that
    became ``<unk>``; ``empty`` counts lines with no piece (stored as eos alone).
    """
    stats: Dict[str, Any] = {}
    builders: Dict[Tuple[str, str], IndexedDatasetBuilder] = {}
    for (key, (lang, _, shard)), (n, ntok, nunk, nempty) in zip(tasks, results):
        split = key[0]
        if key not in builders:
            builders[key] = IndexedDatasetBuilder(prefixes[key], dtype_for_vocab(len(dicts[lang])))
        builders[key].merge_file(shard)
        s = stats.setdefault(split, {"skipped_empty": 0, "langs": {}})["langs"].setdefault(
            lang, {"sentences": 0, "tokens": 0, "unk": 0, "empty": 0}
        )
        s["sentences"] += n
        s["tokens"] += ntok
        s["unk"] += nunk
        s["empty"] += nempty
    for b in builders.values():
        b.finalize()
    for split in stats.values():
        for s in split["langs"].values():
            s["unk_pct"] = round(100.0 * s["unk"] / max(s["tokens"], 1), 3)
    return stats


def _log_stats(stats: Dict[str, Any], langs: List[str]) -> None:
    for split, st in stats.items():
        for lang in langs:
            s = st["langs"][lang]
            extra = f", {s['empty']} empty line(s) kept" if s["empty"] and split != "train" else ""
            log.info(
                "%s [%s]: %d sentences, %d tokens, %.2f%% replaced by %s%s",
                split, lang, s["sentences"], s["tokens"], s["unk_pct"], UNK, extra,
            )
