"""``seqkit-preprocess task=tagging``, streamed (issue 63): the folder the in-memory reader
(:func:`seqkit.preprocess.labelled.preprocess_in_memory`) writes, byte for byte, in memory flat in
the corpus size; each sentence encoded once.

**read**: the check pass of :mod:`seqkit.preprocess.stream` (UTF-8, a line at most 1 MB) parses the
CoNLL lines of each block as it goes (:class:`ConllLines`: ``read_conll``'s checks and messages)
and keeps per split its sentence count, each tag's first line and count, and where every
``every``-th sentence starts (line and byte: at most ``2 * OFFSET_SLOTS`` of them, ``every``
doubling as the file grows) -> **carve**: carve_valid's sentences,
``random.Random(seed).sample(range(n), k)`` as before, held as a sorted array; one more pass over
train counts their tags -> **labels**: those of the sentences train keeps, sorted; a tag another
split has that train lacks is refused, naming its first line -> **learn the tokenizer** on a seeded
sample of the kept training sentences (their words joined by spaces) -> **encode** each sentence
once in ``workers`` processes over line ranges that start where a sentence starts, so a worker
reads whole sentences (:func:`encode_sentences`: each word on its own to provisional ids, its tag on
its first piece) -> the **dictionary** from the kept sentences' counts -> **binarize**: each split's
parts remapped and merged in file order (:func:`seqkit.preprocess.labelled_stream.merge`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from seqkit.core.errors import SeqkitError
from seqkit.data.dictionary import Dictionary
from seqkit.data.labelled_dataset import FIRST_TAG, NOT_A_WORD_START, UNLABELLED_WORD_START
from seqkit.data.labelled_text import resolve_path
from seqkit.preprocess import encode, stream
from seqkit.preprocess.common import split_names
from seqkit.preprocess.encode import _TOKENIZERS, PieceIds, _read_lines, run_ranges
from seqkit.preprocess.labelled_stream import (BOS, KEY, PARTS, UNK_WORD, Labels, RowResult, _lines, carve_rows,
                                               check_known, write_folder)
from seqkit.preprocess.stream import Scan, scan_file
from seqkit.tokenizers import Tokenizer

log = logging.getLogger("seqkit.preprocess")

DOCSTART = "-DOCSTART-"


# ---------------------------------------------------------------------------------- check pass


class ConllLines:
    """``on_lines`` of a CoNLL file's check pass: ``read_conll``'s checks, in file order; the
    sentences, where every ``every``-th one starts, each tag's first line and count."""

    def __init__(self, path: str, word_column: int, tag_column: int):
        self.path, self.word_column, self.tag_column = path, word_column, tag_column
        self.lineno = self.pos = self.sentences = 0
        self.ncols: Optional[int] = None
        self.labelled = True  # until the first token line says otherwise
        self.inside = False  # the last line read was a token line
        self.every = 1
        self.marks: List[Tuple[int, int]] = []  # (0-based line, byte) where sentence i * every starts
        self.labels = Labels(per_row=False)
        self.counts: Counter = Counter()

    def _first_token_line(self, cols: List[str], lineno: int) -> None:
        ncols = self.ncols = len(cols)
        for name, c in (("word_column", self.word_column), ("tag_column", self.tag_column)):
            if not -ncols <= c < ncols:
                raise SeqkitError(f"{self.path}:{lineno}: {name}={c} but the file has {ncols} column(s)")
        if ncols == 1 or self.word_column % ncols == self.tag_column % ncols:
            self.labelled = False  # words only: a split to predict

    def _mark(self, line: int, byte: int) -> None:
        if self.sentences % self.every == 0:
            self.marks.append((line, byte))
            if len(self.marks) > 2 * stream.OFFSET_SLOTS:
                self.marks, self.every = self.marks[::2], self.every * 2
        self.sentences += 1

    def __call__(self, chunk: bytes, unterminated: bool) -> None:
        lines = _lines(chunk)
        arr = np.frombuffer(chunk, dtype=np.uint8)
        starts = np.concatenate(([0], np.flatnonzero(arr == 10)[:-1] + 1))  # (n,) each line's first byte
        tags: List[str] = []
        tag_lines: List[int] = []
        for i, line in enumerate(lines):
            cols = line.split()
            if not cols or cols[0] == DOCSTART:
                self.inside = False
                continue
            lineno = self.lineno + i + 1
            if self.ncols is None:
                self._first_token_line(cols, lineno)
            elif len(cols) != self.ncols:
                raise SeqkitError(f"{self.path}:{lineno}: {len(cols)} columns, earlier lines have {self.ncols}")
            if not self.inside:
                self.inside = True
                self._mark(lineno - 1, self.pos + int(starts[i]))
            if self.labelled:
                tags.append(cols[self.tag_column])
                tag_lines.append(lineno)
        self.labels.add(tags, tag_lines)
        self.counts.update(tags)
        self.lineno += len(lines)
        self.pos += len(chunk)


@dataclass
class Conll:
    """One split's CoNLL file, checked (``labels`` and ``counts``: of its tags; None and empty for a
    split without a tag column)."""

    name: str
    path: str  # the file messages and preprocess.json name
    scan: Scan
    sentences: int
    marks: List[Tuple[int, int]]
    every: int
    labels: Optional[Labels]
    counts: Counter
    word_column: int
    tag_column: int

    @property
    def label_path(self) -> str:  # where check_known's messages point
        return self.path


def check_conll(name: str, pref: str, word_column: int, tag_column: int, work: str) -> Conll:
    """The check pass over one split's CoNLL file (``pref``, ``pref.conll``, ``pref.txt``)."""
    path = resolve_path(pref, [".conll", ".txt"])
    lines = ConllLines(path, word_column, tag_column)
    scan = scan_file(path, os.path.join(work, f"{name}.conll"), False, lines)
    if not lines.sentences:
        raise SeqkitError(f"{path}: no sentences")
    return Conll(name, path, scan, lines.sentences, lines.marks, lines.every,
                 lines.labels if lines.labelled else None, lines.counts if lines.labelled else Counter(),
                 word_column, tag_column)


# ------------------------------------------------------------------------------ reading sentences


@dataclass
class Span:
    """Lines ``[line, line + lines)`` of a CoNLL file (``offset``: the byte where ``line`` starts), the
    first of them a sentence's first line or the file's; ``tagged``: read the tag column."""

    path: str
    offset: int
    line: int
    lines: int
    word_column: int
    tag_column: int
    tagged: bool


def whole(src: Conll) -> Span:
    return Span(src.scan.path, 0, 0, src.scan.lines, src.word_column, src.tag_column, src.labels is not None)


def read_sentences(span: Span) -> Iterator[Tuple[int, List[str], Optional[List[str]]]]:
    """(1-based line of its first word, words, tags or None) of each sentence of ``span``, reading a
    batch of ``BATCH_LINES`` lines at a time; the lines were checked by the check pass."""
    words: List[str] = []
    tags: List[str] = []
    start, lineno = 0, span.line
    with open(span.path, "rb") as f:
        f.seek(span.offset)
        for done in range(0, span.lines, encode.BATCH_LINES):
            for line in _read_lines(f, min(encode.BATCH_LINES, span.lines - done)):
                lineno += 1
                cols = line.split()
                if not cols or cols[0] == DOCSTART:
                    if words:
                        yield start, words, tags if span.tagged else None
                        words, tags = [], []
                    continue
                if not words:
                    start = lineno
                words.append(cols[span.word_column])
                if span.tagged:
                    tags.append(cols[span.tag_column])
    if words:
        yield start, words, tags if span.tagged else None


def held_tags(train: Conll, held: np.ndarray) -> Conll:
    """The tags of the sentences carve_valid holds out (their first lines and counts), as a split."""
    labels, counts = Labels(per_row=False), Counter()
    at = 0
    for number, (start, _, tags) in enumerate(read_sentences(whole(train))):
        if at == len(held):
            break
        if held[at] == number:
            at += 1
            labels.add(tags, list(range(start, start + len(tags))))  # no blank line inside a sentence
            counts.update(tags)
    return dataclasses.replace(train, labels=labels, counts=counts)


def kept_tags(train: Conll, held: Optional[Conll]) -> Tuple[List[str], Dict[str, int]]:
    """(the tags of the sentences train keeps, sorted; tag -> its count there). A tag that only
    carved sentences have is refused, naming its first line, as the carved split's check did."""
    kept = Counter(train.counts)
    if held is not None:
        kept.subtract(held.counts)
    labels = sorted(t for t, n in kept.items() if n > 0)
    if held is not None:
        check_known(held, "valid", labels)
    return labels, {t: kept[t] for t in labels}


class KeptSentences:
    """:class:`seqkit.preprocess.common.TrainText` over the sentences train keeps, each as its
    words joined by spaces (what the tokenizer learns from)."""

    def __init__(self, train: Conll, held: np.ndarray):
        self.train, self.held = train, held
        self.pairs = train.sentences - len(held)

    def write(self, lang: str, ranks: Optional[np.ndarray], path: str) -> None:
        held, want = self.held.tolist(), None if ranks is None else ranks.tolist()
        at = kept = taken = 0
        lines: List[str] = []
        with open(path, "wb") as out:
            for number, (_, words, _) in enumerate(read_sentences(whole(self.train))):
                if at < len(held) and held[at] == number:
                    at += 1
                    continue
                if want is None or (taken < len(want) and want[taken] == kept):
                    lines.append(" ".join(words) + "\n")
                    taken += 1
                kept += 1
                if len(lines) >= encode.BATCH_LINES:
                    out.write("".join(lines).encode("utf-8"))
                    lines = []
            out.write("".join(lines).encode("utf-8"))


# ----------------------------------------------------------------------------------------- encoding


@dataclass
class SentenceRange:
    """One worker's sentences: ``span``, the first numbered ``first``; ``held``, the numbers of those
    carve_valid holds out (sorted); ``label_id`` (None: no tags); its files
    PREFIX.{kept,held}.{ids,len,lab,txt}."""

    split: str
    span: Span
    first: int
    held: np.ndarray
    label_id: Optional[Dict[str, int]]
    prefix: str
    count: bool  # count the kept sentences' pieces (the dictionary is built from these)


def _write_sentences(table: PieceIds, sents: List[Tuple[List[str], Optional[List[str]]]], task: SentenceRange,
                     files: Dict[str, Any], count: bool) -> None:
    """Provisional ids ``<s> w1 ... wn </s>`` of each sentence (a word its pieces, ``UNK_WORD`` for
    none), its size, its stored tags (each word's on its first piece) and its text line."""
    words = [w for ws, _ in sents for w in ws]
    ids, sizes = table.encode(words, count)  # each word's ids, then 0
    ends = np.cumsum(sizes, dtype=np.int64) - 1  # (w,) each word's 0
    empty = sizes == 1
    ids[ends[empty]] = UNK_WORD  # a word always keeps a position
    flat = np.delete(ids, ends[~empty])  # (p,) the words' ids, one after the other
    per_word = np.maximum(sizes - 1, 1).astype(np.int64)  # (w,)
    nwords = np.array([len(ws) for ws, _ in sents], dtype=np.int64)  # (m,)
    word_sent = np.repeat(np.arange(len(sents)), nwords)  # (w,) each word's sentence
    per_sent = np.add.reduceat(per_word, np.cumsum(nwords) - nwords)  # (m,) pieces of each sentence
    # sentence s starts after the pieces of those before it and their 2 ends: its piece j (of flat) at j + 1 + 2s
    out = np.zeros(len(flat) + 2 * len(sents), dtype=np.int32)  # 0 -> </s>
    out[np.cumsum(per_sent + 2) - per_sent - 2] = BOS
    out[np.arange(len(flat)) + 1 + 2 * np.repeat(np.arange(len(sents)), per_sent)] = flat
    files["ids"].write(out.tobytes())
    files["len"].write((per_sent + 2).astype(np.int32).tobytes())
    stored = np.full(len(out), NOT_A_WORD_START, dtype=np.int32)
    first_piece = np.cumsum(per_word) - per_word + 1 + 2 * word_sent  # (w,) where each word starts in out
    if task.label_id is None:
        stored[first_piece] = UNLABELLED_WORD_START
    else:
        label_id = task.label_id
        stored[first_piece] = [FIRST_TAG + label_id[t] for _, ts in sents for t in ts]
    files["lab"].write(stored.tobytes())
    files["txt"].write("".join(" ".join(ws) + "\n" for ws, _ in sents).encode("utf-8"))


def encode_sentences(task: SentenceRange) -> RowResult:
    """Encode one range's sentences once (the worker's side; see the module doc)."""
    table = PieceIds(_TOKENIZERS[KEY])
    files = {part: {ext: open(f"{task.prefix}.{part}.{ext}", "wb") for ext in ("ids", "len", "lab", "txt")}
             for part in PARTS}
    batch: Dict[str, List[Tuple[List[str], Optional[List[str]]]]] = {part: [] for part in PARTS}
    size = dict.fromkeys(PARTS, 0)
    written = dict.fromkeys(PARTS, 0)

    def flush(part: str) -> None:
        if batch[part]:
            _write_sentences(table, batch[part], task, files[part], task.count and part == "kept")
            written[part] += len(batch[part])
            batch[part], size[part] = [], 0

    held, at = task.held.tolist(), 0
    try:
        for number, (_, words, tags) in enumerate(read_sentences(task.span), task.first):
            part = "kept"
            if at < len(held) and held[at] == number:
                part, at = "held", at + 1
            batch[part].append((words, tags))
            size[part] += len(words)
            if size[part] >= encode.BATCH_LINES:
                flush(part)
        for part in PARTS:
            flush(part)
    finally:
        for by_ext in files.values():
            for f in by_ext.values():
                f.close()
    return RowResult(table.pieces, table.counts if task.count else None, written)


def plan(sources: Dict[str, Conll], held: np.ndarray, label_id: Dict[str, int], workers: int, work: str,
         count: bool) -> List[SentenceRange]:
    """Each split cut into up to ``workers`` ranges of near-equal sentence counts, each starting
    where a sentence starts (a check-pass mark), in order."""
    tasks: List[SentenceRange] = []
    for src in sources.values():
        starts = [(0, 0, 0)]  # (sentence number, line, byte) where each range starts
        for i in range(1, workers):
            k = i * src.sentences // workers // src.every
            if k * src.every > starts[-1][0]:
                starts.append((k * src.every, *src.marks[k]))
        ends = [(s, line) for s, line, _ in starts[1:]] + [(src.sentences, src.scan.lines)]
        for (first, line, byte), (last, end) in zip(starts, ends):
            span = Span(src.scan.path, byte, line, end - line, src.word_column, src.tag_column, src.labels is not None)
            mine = held[np.searchsorted(held, first):np.searchsorted(held, last)] if src.name == "train" else held[:0]
            tasks.append(SentenceRange(src.name, span, first, mine, label_id if src.labels is not None else None,
                                       os.path.join(work, f"{src.name}.{len(tasks)}"), count and src.name == "train"))
    return tasks


def stream_tagging(cfg: Any, tok_cfg: Any,
                   out: str) -> Tuple[Any, Dictionary, List[str], Dict[str, Any], Dict[str, Any]]:
    """Every file of the folder but preprocess.json into ``out`` (the staging folder): (the
    tokenizer's config, dictionary, labels, each split's stats, what carve_valid did)."""
    work = os.path.join(out, ".work")  # the workers' files and .gz inputs' plain copies
    os.makedirs(work)
    sources = {split: check_conll(split, pref, cfg.word_column, cfg.tag_column, work)
               for split, pref in split_names(cfg)}
    train = sources["train"]
    if train.labels is None:
        raise SeqkitError(f"{train.path}: the training split has no labels (tag column)")
    held, carved = carve_rows(cfg, train.sentences, train.path)
    held_part = held_tags(train, held) if carved else None
    labels, label_counts = kept_tags(train, held_part)
    for split, src in sources.items():
        if split != "train":
            check_known(src, split, labels)
    rows = {"train": train.sentences - len(held), **({"valid": len(held)} if carved else {}),
            **{split: src.sentences for split, src in sources.items() if split != "train"}}
    log.info("read %s: %s", ", ".join(f"{s} {n}" for s, n in rows.items()), f"{len(labels)} labels")

    tok_cfg, d, stats = write_folder(cfg, tok_cfg, out, work, sources, held, labels, label_counts, bool(carved),
                                     KeptSentences(train, held), plan, encode_all, per_token=True)
    return tok_cfg, d, labels, stats, carved


def encode_all(tasks: List[SentenceRange], workers: int, tok: Tokenizer) -> List[RowResult]:
    return run_ranges(tasks, workers, {KEY: tok}, encode_sentences)
