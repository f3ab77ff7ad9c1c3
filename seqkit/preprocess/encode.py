"""Encoding side of the streamed ``seqkit-preprocess``: each line encoded once, in workers over line
ranges, to provisional ids; the dictionary from their piece counts; the shards remapped and merged.

A worker (:func:`encode_range`) seeks every language's file to its range, reads the pairs together
(so skip_empty sees both sides), encodes each line once and writes, per language, ``.ids`` (int32
provisional ids, each line followed by 0 for its end) and ``.len`` (int32, each line's size with
that end). Provisional ids (:class:`PieceIds`): 0 = end of line, then the tokenizer's own ids + 1
where it has them (sentencepiece encodes a whole batch in C++), then the pieces it lacks (a
sentencepiece surface outside the model, every piece of other tokenizers) numbered as the worker
first sees them. It returns those pieces, and on the training split their counts.

Then :func:`build_dictionaries` sums the training counts into the dictionary exactly as counting
every line did (``Dictionary.build`` orders by count, then by symbol), and :func:`merge` sends each
range's ids through a lookup table (provisional -> dictionary id; a piece outside it -> ``<unk>``)
into the final ``.bin``, in range order, and writes the ``.idx`` from the ``.len`` files.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import dtype_for_vocab, write_index
from seqkit.tokenizers import Tokenizer, load_tokenizer

BATCH_LINES = 2048
REMAP_CHUNK = 1 << 20  # ids remapped at a time by the merge (a 4 MB read)


@dataclass
class Range:
    """One worker's lines: ``count`` lines of each language's file from its byte ``offset``."""

    split: str
    shard: int
    files: Dict[str, Tuple[str, int]]  # lang -> (path, byte offset)
    count: int
    prefix: str  # its provisional files: PREFIX.LANG.ids / .len
    train: bool  # count pieces (the dictionary is built from these)
    skip_empty: bool  # drop pairs with a blank side
    words: bool  # count words (language modeling)


@dataclass
class RangeResult:
    lines: int  # lines written (after skip_empty)
    pieces: Dict[str, List[str]]  # lang -> the pieces numbered past the tokenizer's own ids
    counts: Dict[str, Optional[np.ndarray]] = field(default_factory=dict)  # lang -> count per provisional id
    words: int = 0


class PieceIds:
    """One worker's provisional ids of one language (see the module doc)."""

    def __init__(self, tok: Tokenizer):
        self.tok = tok
        self.fast = callable(getattr(tok, "encode_ids", None)) and tok.encode_ids([]) is not None
        self.base = len(tok.id_pieces()) if self.fast else 0
        self.unk = tok.unk_id if self.fast else -1
        self.ids: Dict[str, int] = {}
        self.pieces: List[str] = []
        self.counts = np.zeros(1 + self.base, dtype=np.int64)

    def _id(self, piece: str) -> int:
        i = self.ids.get(piece)
        if i is None:
            i = self.ids[piece] = 1 + self.base + len(self.pieces)
            self.pieces.append(piece)
        return i

    def encode(self, lines: List[str], count: bool) -> Tuple[np.ndarray, np.ndarray]:
        """(ids of every line, each followed by 0) int32, and each line's size with that 0 (int32)."""
        if self.fast:
            rows = self.tok.encode_ids(lines)  # model ids, unk for a surface the model lacks
            for i, row in enumerate(rows):
                if self.unk in row:  # encode() keeps that surface: the dictionary may hold it
                    pieces = self.tok.encode(lines[i])
                    assert len(pieces) == len(row), "sentencepiece's ids and pieces disagree"
                    rows[i] = [self._id(p) - 1 if t == self.unk else t for t, p in zip(row, pieces)]
            shift = 1
        else:
            rows = [[self.ids.get(p) or self._id(p) for p in self.tok.encode(line)] for line in lines]
            shift = 0
        sizes = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows)) + 1  # (n,) with the end
        ends = np.cumsum(sizes) - 1  # (n,) where each line's 0 goes
        ids = np.zeros(int(ends[-1]) + 1 if len(ends) else 0, dtype=np.int32)
        body = np.ones(len(ids), dtype=bool)
        body[ends] = False
        ids[body] = np.fromiter(chain.from_iterable(rows), dtype=np.int32, count=len(ids) - len(rows)) + shift
        if count and len(ids):
            size = 1 + self.base + len(self.pieces)
            if len(self.counts) < size:
                self.counts = np.concatenate([self.counts, np.zeros(size - len(self.counts), np.int64)])
            self.counts += np.bincount(ids, minlength=size)
        return ids, sizes.astype(np.int32)


# Set before a pool starts: forked workers inherit it; spawned ones rebuild it from states.
_TOKENIZERS: Dict[str, Tokenizer] = {}


def _init_worker(tok_states: Optional[Dict[str, dict]] = None) -> None:
    # the parent turns SIGTERM into SystemExit (to remove its staging folder); a worker just ends
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if tok_states is not None:  # spawned: rebuild the tokenizers a forked worker inherits
        _TOKENIZERS.clear()
        _TOKENIZERS.update({lang: load_tokenizer(s) for lang, s in tok_states.items()})


def encode_range(task: Range) -> RangeResult:
    """Encode one range (see the module doc)."""
    langs = list(task.files)
    tables = {lang: PieceIds(_TOKENIZERS[lang]) for lang in langs}
    files, outs = [], []
    try:
        for lang, (path, offset) in task.files.items():
            files.append(open(path, "rb"))
            files[-1].seek(offset)
            outs.append((open(f"{task.prefix}.{lang}.ids", "wb"), open(f"{task.prefix}.{lang}.len", "wb")))
        rows = zip(*(islice(f, task.count) for f in files))  # the pairs, read together
        kept = words = 0
        while batch := list(islice(rows, BATCH_LINES)):
            cols = [[raw.decode("utf-8").rstrip("\r\n") for raw in col] for col in zip(*batch)]
            if task.skip_empty:
                keep = [i for i, row in enumerate(zip(*cols)) if all(s.strip() for s in row)]
                if len(keep) < len(batch):
                    cols = [[col[i] for i in keep] for col in cols]
            if task.words:
                words += sum(len(line.split()) + 1 for line in cols[0])
            for lang, lines, (f_ids, f_len) in zip(langs, cols, outs):
                ids, sizes = tables[lang].encode(lines, task.train)
                f_ids.write(ids.tobytes())
                f_len.write(sizes.tobytes())
            kept += len(cols[0])
    finally:
        for f in files + [f for pair in outs for f in pair]:
            f.close()
    return RangeResult(kept, {lang: t.pieces for lang, t in tables.items()},
                       {lang: t.counts if task.train else None for lang, t in tables.items()}, words)


def run_ranges(tasks: List[Range], workers: int, toks: Dict[str, Tokenizer]) -> List[RangeResult]:
    """:func:`encode_range` over ``tasks``, results in task order: here (workers=1) or in a pool."""
    _TOKENIZERS.clear()
    _TOKENIZERS.update(toks)
    if workers == 1 or len(tasks) <= 1:
        return [encode_range(t) for t in tasks]
    if "fork" in mp.get_all_start_methods():
        ctx, args = mp.get_context("fork"), ()
    else:  # pragma: no cover - no fork (Windows): rebuild from plain states
        ctx, args = mp.get_context("spawn"), ({k: t.state_dict() for k, t in toks.items()},)
    pool = ctx.Pool(min(workers, len(tasks)), _init_worker, args)
    try:
        results = pool.map(encode_range, tasks, chunksize=1)
        pool.close()  # the workers end on their own (terminate's SIGTERM could come while one blocks)
        return results
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()


def _base_pieces(tok: Tokenizer) -> List[str]:
    return tok.id_pieces() if PieceIds(tok).fast else []


def build_dictionaries(cfg: Any, langs: List[str], toks: Dict[str, Tokenizer], tasks: List[Range],
                       results: List[RangeResult]) -> Dict[str, Dictionary]:
    """lang -> Dictionary of the training split's pieces, as counting every line with the
    tokenizer did; the pieces it can emit that training never did get an id too (count 0)."""
    dicts: Dict[str, Dictionary] = {}
    for group in [langs] if cfg.joined_dictionary else [[lang] for lang in langs]:
        counts: Counter = Counter()
        for lang in group:
            base = _base_pieces(toks[lang])
            base_counts = np.zeros(1 + len(base), dtype=np.int64)
            for task, res in zip(tasks, results):
                if not task.train:
                    continue
                c = res.counts[lang]
                base_counts += c[: 1 + len(base)]
                for piece, n in zip(res.pieces[lang], c[1 + len(base):].tolist()):
                    counts[piece] += n
            for i in np.flatnonzero(base_counts[1:]).tolist():
                counts[base[i]] += int(base_counts[1 + i])
        for piece in getattr(toks[group[0]], "vocab_pieces", list)():
            counts.setdefault(piece, 0)
        is_src = cfg.source_lang in group  # joined: the source settings apply (as in fairseq)
        d = Dictionary.build(counts, threshold=cfg.thresholdsrc if is_src else cfg.thresholdtgt,
                             nwords=cfg.nwordssrc if is_src else cfg.nwordstgt)
        dicts.update({lang: d for lang in group})
    return dicts


def _read_int32(path: str) -> np.ndarray:
    return np.memmap(path, dtype=np.int32, mode="r") if os.path.getsize(path) else np.zeros(0, np.int32)


def merge(prefix: str, lang: str, parts: List[Tuple[Range, RangeResult]], tok: Tokenizer,
          d: Dictionary) -> Dict[str, int]:
    """Write ``prefix.bin/.idx`` from the ranges ``parts`` (in order), removing their files; their
    counts: sentences, tokens (without the ends), unk (tokens that became ``<unk>``), empty."""
    dtype = dtype_for_vocab(len(d))
    base = np.array([d.indices.get(p, d.unk_index) for p in _base_pieces(tok)], dtype=np.int64)
    sizes, unk = [], 0
    with open(prefix + ".bin", "wb") as out:
        for task, res in parts:
            extra = [d.indices.get(p, d.unk_index) for p in res.pieces[lang]]
            lut = np.concatenate([[d.eos_index], base, extra]).astype(dtype)  # provisional id -> final id
            with open(f"{task.prefix}.{lang}.ids", "rb") as f:  # read, not mapped: pages read stay off the RSS
                while block := f.read(4 * REMAP_CHUNK):
                    final = lut[np.frombuffer(block, dtype=np.int32)]
                    unk += int(np.count_nonzero(final == d.unk_index))
                    out.write(final.tobytes())
            sizes.append(_read_int32(f"{task.prefix}.{lang}.len"))
        out.flush()
        os.fsync(out.fileno())
    write_index(prefix + ".idx", dtype, sizes)
    n = sum(len(s) for s in sizes)
    stats = {"sentences": n, "tokens": sum(int(s.sum(dtype=np.int64)) for s in sizes) - n, "unk": unk,
             "empty": sum(int(np.count_nonzero(s == 1)) for s in sizes)}
    del sizes
    for task, _ in parts:
        for ext in ("ids", "len"):
            os.remove(f"{task.prefix}.{lang}.{ext}")
    return stats
