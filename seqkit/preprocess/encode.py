"""Encoding side of the streamed ``seqkit-preprocess``: each line encoded once, in workers over line
ranges, to provisional ids; the dictionary from their piece counts; the shards remapped and merged.

A worker (:func:`encode_range`) seeks every language's file to its range, reads a batch of lines of
each (one decode a batch), leaves out the pairs skip_empty drops (the check pass found them),
encodes each line once and writes, per language, ``.ids`` (int32 provisional ids, each line followed
by 0 for its end) and ``.len`` (int32, each line's size with that end). Provisional ids
(:class:`PieceIds`): 0 = end of line, then the tokenizer's own ids + 1 where it has them
(sentencepiece encodes a whole batch in C++; a BPE model whose ids of a line are its words' encodes
each distinct word once, kept in a bounded cache), then the pieces it lacks (a sentencepiece surface
outside the model, every piece of other tokenizers) numbered as the worker first sees them. It
returns those pieces, and on the training split their counts.

Then :func:`build_dictionaries` sums the training counts into the dictionary exactly as counting
every line did (``Dictionary.build`` orders by count, then by symbol), and :func:`merge` sends each
range's ids through a lookup table (provisional -> dictionary id; a piece outside it -> ``<unk>``)
into the final ``.bin``, in range order, and writes the ``.idx`` from the ``.len`` files.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from array import array
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain, islice, repeat
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np

from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import dtype_for_vocab, write_index
from seqkit.tokenizers import Tokenizer, load_tokenizer

BATCH_LINES = 2048
CACHE_WORDS = 1 << 17  # words whose ids a worker keeps, per language (emptied when full; ~15 MB)
CACHE_WORD_CHARS = 40  # longer words are not kept
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
    drop: List[int]  # sorted numbers (0 = the range's first line) of the pairs skip_empty drops
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
        # word -> its model ids, where a line's ids are its words' (sentencepiece BPE: see words_apart)
        apart = self.fast and callable(getattr(tok, "words_apart", None)) and tok.words_apart()
        self.words: Optional[Dict[str, bytes]] = {} if apart else None
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
        if self.words is not None:
            flat, sizes = self._word_ids(lines)
        else:
            if self.fast:
                rows = self.tok.encode_ids(lines)  # model ids, unk for a surface the model lacks
            else:
                rows = [[self.ids.get(p) or self._id(p) for p in self.tok.encode(line)] for line in lines]
            sizes = np.fromiter(map(len, rows), dtype=np.int32, count=len(rows))  # (n,) without the end
            flat = np.fromiter(chain.from_iterable(rows), dtype=np.int32, count=int(sizes.sum(dtype=np.int64)))
        shift = 1 if self.fast else 0
        if self.fast and self.unk >= 0:
            self._keep_surfaces(lines, sizes, flat)
        sizes += 1  # with the end
        ids = np.zeros(len(flat) + len(lines), dtype=np.int32)  # the ends stay 0
        ids[np.arange(len(flat)) + np.repeat(np.arange(len(lines)), sizes - 1)] = flat + shift
        if count and len(ids):
            size = 1 + self.base + len(self.pieces)
            if len(self.counts) < size:
                self.counts = np.concatenate([self.counts, np.zeros(size - len(self.counts), np.int64)])
            self.counts += np.bincount(ids, minlength=size)
        return ids, sizes

    def _word_ids(self, lines: List[str]) -> Tuple[np.ndarray, np.ndarray]:
        """The model ids of ``lines`` (flat, int32) and each line's count, from its words' ids (kept
        as int32 bytes): the words not in the cache are encoded together in one call."""
        cache = self.words
        assert cache is not None
        words = " ".join(lines).split(" ")  # every line's words, one after the other
        spaces = np.fromiter(map(str.count, lines, repeat(" ")), dtype=np.int64, count=len(lines))  # (n,)
        new = set(words).difference(cache)
        if len(cache) + len(new) > CACHE_WORDS:
            cache.clear()
            new = set(words)
        if new:
            new_words = list(new)  # "" (a run of spaces) -> no ids
            cache.update(zip(new_words, (array("i", ids).tobytes() for ids in self.tok.encode_ids(new_words))))
        ids = list(map(cache.__getitem__, words))
        for word in new:
            if len(word) > CACHE_WORD_CHARS:  # kept for this batch only: a text without spaces is one "word" a line
                del cache[word]
        per_word = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids)) // 4  # (w,)
        ends = np.cumsum(spaces + 1)  # (n,) words so far: a line of k spaces holds k + 1 words
        total = np.concatenate([[0], np.cumsum(per_word)])  # (w + 1,) ids so far
        sizes = np.diff(total[ends], prepend=0).astype(np.int32)  # (n,) ids per line
        return np.frombuffer(b"".join(ids), dtype=np.int32).copy(), sizes

    def _keep_surfaces(self, lines: List[str], sizes: np.ndarray, flat: np.ndarray) -> None:
        """In ``flat`` (the model ids of ``lines``, in place): each unk becomes the provisional id - 1
        of the surface ``encode()`` keeps there (the dictionary may hold it)."""
        at = np.flatnonzero(flat == self.unk)
        if not len(at):
            return
        starts = np.cumsum(sizes, dtype=np.int64) - sizes  # (n,) where each line's ids start in flat
        for i in np.unique(np.searchsorted(starts, at, side="right") - 1).tolist():
            row = flat[starts[i]:starts[i] + sizes[i]]
            pieces = self.tok.encode(lines[i])
            assert len(pieces) == len(row), "sentencepiece's ids and pieces disagree"
            row[:] = [self._id(p) - 1 if t == self.unk else t for t, p in zip(row.tolist(), pieces)]


# Set before a pool starts: forked workers inherit it; spawned ones rebuild it from states.
_TOKENIZERS: Dict[str, Tokenizer] = {}


def _init_worker(tok_states: Optional[Dict[str, dict]] = None) -> None:
    # the parent turns SIGTERM into SystemExit (to remove its staging folder); a worker just ends
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if tok_states is not None:  # spawned: rebuild the tokenizers a forked worker inherits
        _TOKENIZERS.clear()
        _TOKENIZERS.update({lang: load_tokenizer(s) for lang, s in tok_states.items()})


def _read_lines(lines: Iterator[bytes], n: int) -> List[str]:
    """The next ``n`` lines (fewer at the end) of a binary file's line iterator, decoded, without
    their ``\r``/``\n`` ends: one decode and one split for them all."""
    raw = list(islice(lines, n))
    text = b"".join(raw).decode("utf-8")
    out = text.split("\n")[: len(raw)]  # each raw line holds one "\n", at its end (the last may lack it)
    return [line.rstrip("\r") for line in out] if "\r" in text else out


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
        drop = np.asarray(task.drop, dtype=np.int64)
        kept = words = 0
        for start in range(0, task.count, BATCH_LINES):
            n = min(BATCH_LINES, task.count - start)
            cols = [_read_lines(f, n) for f in files]
            gone = drop[np.searchsorted(drop, start):np.searchsorted(drop, start + n)] - start
            if len(gone):
                keep = np.setdiff1d(np.arange(len(cols[0])), gone).tolist()
                cols = [[col[i] for i in keep] for col in cols]
            if task.words:  # whitespace words of each line, and its end
                words += len("\n".join(cols[0]).split()) + len(cols[0])
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


def run_ranges(tasks: List[Any], workers: int, toks: Dict[str, Tokenizer],
               fn: Callable[[Any], Any] = encode_range) -> List[Any]:
    """``fn`` (:func:`encode_range`, or classification's rows) over ``tasks``, results in task order:
    here (workers=1) or in a pool whose workers see ``toks`` in ``_TOKENIZERS``."""
    _TOKENIZERS.clear()
    _TOKENIZERS.update(toks)
    if workers == 1 or len(tasks) <= 1:
        return [fn(t) for t in tasks]
    if "fork" in mp.get_all_start_methods():
        ctx, args = mp.get_context("fork"), ()
    else:  # pragma: no cover - no fork (Windows): rebuild from plain states
        ctx, args = mp.get_context("spawn"), ({k: t.state_dict() for k, t in toks.items()},)
    pool = ctx.Pool(min(workers, len(tasks)), _init_worker, args)
    try:
        results = pool.map(fn, tasks, chunksize=1)
        pool.close()  # the workers end on their own (terminate's SIGTERM could come while one blocks)
        return results
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()


def base_pieces(tok: Tokenizer) -> List[str]:
    """The pieces of the tokenizer's own ids that :class:`PieceIds` numbers first (none when it is not fast)."""
    return tok.id_pieces() if PieceIds(tok).fast else []


def add_piece_counts(counts: Counter, tok: Tokenizer, parts: Iterable[Tuple[List[str], np.ndarray]]) -> None:
    """Add to ``counts`` the pieces of ``parts`` (each range's extra pieces and its count per
    provisional id): the extra pieces in order, then the tokenizer's own that occurred."""
    base = base_pieces(tok)
    base_counts = np.zeros(1 + len(base), dtype=np.int64)
    for pieces, c in parts:
        base_counts += c[: 1 + len(base)]
        for piece, n in zip(pieces, c[1 + len(base):].tolist()):
            counts[piece] += n
    for i in np.flatnonzero(base_counts[1:]).tolist():
        counts[base[i]] += int(base_counts[1 + i])


def remap(path: str, lut: np.ndarray, out: Any, unk_index: int) -> int:
    """Write the provisional ids of ``path`` to ``out`` as final ids (``lut[id]``), a chunk at a time,
    read and not mapped (pages read stay off the RSS); the number that became ``<unk>``."""
    unk = 0
    with open(path, "rb") as f:
        while block := f.read(4 * REMAP_CHUNK):
            final = lut[np.frombuffer(block, dtype=np.int32)]
            unk += int(np.count_nonzero(final == unk_index))
            out.write(final.tobytes())
    return unk


def build_dictionaries(cfg: Any, langs: List[str], toks: Dict[str, Tokenizer], tasks: List[Range],
                       results: List[RangeResult]) -> Dict[str, Dictionary]:
    """lang -> Dictionary of the training split's pieces, as counting every line with the
    tokenizer did; the pieces it can emit that training never did get an id too (count 0)."""
    dicts: Dict[str, Dictionary] = {}
    for group in [langs] if cfg.joined_dictionary else [[lang] for lang in langs]:
        counts: Counter = Counter()
        for lang in group:
            add_piece_counts(counts, toks[lang], [(res.pieces[lang], res.counts[lang])
                                                  for task, res in zip(tasks, results) if task.train])
        for piece in getattr(toks[group[0]], "vocab_pieces", list)():
            counts.setdefault(piece, 0)
        is_src = cfg.source_lang in group  # joined: the source settings apply (as in fairseq)
        d = Dictionary.build(counts, threshold=cfg.thresholdsrc if is_src else cfg.thresholdtgt,
                             nwords=cfg.nwordssrc if is_src else cfg.nwordstgt)
        dicts.update({lang: d for lang in group})
    return dicts


def read_int32(path: str) -> np.ndarray:
    return np.memmap(path, dtype=np.int32, mode="r") if os.path.getsize(path) else np.zeros(0, np.int32)


def merge(prefix: str, lang: str, parts: List[Tuple[Range, RangeResult]], tok: Tokenizer,
          d: Dictionary) -> Dict[str, int]:
    """Write ``prefix.bin/.idx`` from the ranges ``parts`` (in order), removing their files; their
    counts: sentences, tokens (without the ends), unk (tokens that became ``<unk>``), empty."""
    dtype = dtype_for_vocab(len(d))
    base = np.array([d.indices.get(p, d.unk_index) for p in base_pieces(tok)], dtype=np.int64)
    sizes, unk = [], 0
    with open(prefix + ".bin", "wb") as out:
        for task, res in parts:
            extra = [d.indices.get(p, d.unk_index) for p in res.pieces[lang]]
            lut = np.concatenate([[d.eos_index], base, extra]).astype(dtype)  # provisional id -> final id
            unk += remap(f"{task.prefix}.{lang}.ids", lut, out, d.unk_index)
            sizes.append(read_int32(f"{task.prefix}.{lang}.len"))
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
