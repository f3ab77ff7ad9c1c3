"""``seqkit-preprocess task=classification``, streamed (issue 63): the folder the in-memory reader
wrote, byte for byte, in memory flat in the corpus size; each row encoded once.

**read**: the check pass of :mod:`seqkit.preprocess.stream` (UTF-8, a line at most 1 MB, line
counts, offsets) parses the rows of each block as it goes (:class:`TsvRows`, :class:`LabelLines`),
with the checks and messages of :mod:`seqkit.data.labelled_text`, and keeps per split its rows,
the lines that hold none (a TSV's header and blank lines), each label's first line and, for train,
a label code per row (a byte while there are under 256 labels) -> **carve**: carve_valid's rows,
``random.Random(seed).sample(range(n), k)`` as before, held as a sorted array; with
``carve_unit=sentence``, whole sentences held out and the rows found only inside them dropped
(:mod:`seqkit.preprocess.carve_stream`: three more passes over the training rows, ~10 bytes a row)
-> **labels**: those of the rows train keeps, sorted; one another split has that train lacks is
refused -> **learn the tokenizer** on a seeded sample of the kept training texts -> **encode** each
kept or held row once in ``workers`` processes over line ranges (:func:`encode_rows`: provisional ids
as :class:`seqkit.preprocess.encode.PieceIds` numbers them, the carved rows apart) -> the
**dictionary** from the kept rows' counts -> **binarize**: each split's parts remapped and merged in
file order, with its labels and its text.

``task=tagging`` streams on these pieces (its labels, their checks, the dictionary, the merge) with
a CoNLL check pass and sentence ranges of its own: :mod:`seqkit.preprocess.tagging_stream`.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from seqkit.core.errors import SeqkitError
from seqkit.core.io import atomic_write_text
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import dtype_for_vocab, write_index
from seqkit.data.labelled_dataset import FIRST_TAG
from seqkit.data.labelled_text import BOM, resolve_path
from seqkit.preprocess import encode
from seqkit.preprocess.carve import SENTENCE_DATA, held_rows
from seqkit.preprocess.carve_stream import carve_sentence_rows
from seqkit.preprocess.common import pretrained_vocabulary, save_torch, train_tokenizers
from seqkit.preprocess.encode import (_TOKENIZERS, REMAP_CHUNK, PieceIds, _read_lines, add_piece_counts,
                                     base_pieces, read_int32, remap, run_ranges)
from seqkit.preprocess.stream import MAX_LINE_BYTES, Scan, Split, cuts, lines_of_ranks, scan_file
from seqkit.tokenizers import Tokenizer

log = logging.getLogger("seqkit.preprocess")

KEY = "input"  # the tokenizer's "language" (encode's _TOKENIZERS key)


# ---------------------------------------------------------------------------------- check pass


def _readable(chunk: bytes) -> str:
    """The text of ``chunk``'s lines before the first one the scanner refuses (longer than 1 MB, or
    not UTF-8): those rows are parsed first, so their errors come first, as line by line."""
    arr = np.frombuffer(chunk, dtype=np.uint8)
    ends = np.flatnonzero(arr == 10)  # (n,)
    starts = np.concatenate(([0], ends[:-1] + 1))  # (n,)
    long = np.flatnonzero(ends - starts > MAX_LINE_BYTES)
    cut = int(starts[long[0]]) if len(long) else len(chunk)
    try:
        return chunk[:cut].decode("utf-8")
    except UnicodeDecodeError as e:
        return chunk[:chunk.rfind(b"\n", 0, e.start) + 1].decode("utf-8")


def _lines(chunk: bytes) -> List[str]:
    """The lines of a block as ``read_lines`` gives them (without ``\\r``/``\\n`` ends)."""
    text = _readable(chunk)
    lines = text.split("\n")[:-1]  # the text ends in "\n"
    return [line.rstrip("\r") for line in lines] if "\r" in text else lines


class Labels:
    """A split's labels as the check pass meets them: a code per distinct label (in order seen), its
    first line and, with ``per_row``, each row's code."""

    def __init__(self, per_row: bool):
        self.code: Dict[str, int] = {}
        self.first: Dict[str, int] = {}
        self.parts: Optional[List[np.ndarray]] = [] if per_row else None

    def add(self, labels: List[str], lines: List[int]) -> None:
        code, first = self.code, self.first
        codes = []
        for label, lineno in zip(labels, lines):
            c = code.get(label)
            if c is None:
                c = code[label] = len(code)
                first[label] = lineno
            codes.append(c)
        if self.parts is not None and codes:
            self.parts.append(np.array(codes, dtype=np.uint8 if len(code) <= 256 else np.int32))

    def seen(self) -> List[str]:
        """Labels by code."""
        return list(self.code)

    def codes(self) -> np.ndarray:
        """(rows,) each row's label code."""
        assert self.parts is not None
        return np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=np.uint8)


class TsvRows:
    """``on_lines`` of a TSV's check pass: the header, then every row as ``_read_tsv`` checked it."""

    def __init__(self, path: str, text_columns: List[str], label_column: str, per_row: bool):
        self.path, self.columns, self.label_column = path, text_columns, label_column
        self.lineno = self.rows = 0
        self.header: Optional[List[str]] = None
        self.text_idx: List[int] = []
        self.label_idx: Optional[int] = None
        self.labels = Labels(per_row)

    def _read_header(self, line: str) -> None:
        header = self.header = line.lstrip(BOM).split("\t")
        missing = [c for c in self.columns if c not in header]
        if missing:
            raise SeqkitError(f"{self.path}:1: no column {', '.join(repr(c) for c in missing)} in the header "
                              f"(columns: {', '.join(header)}); set text_columns=[...]")
        self.text_idx = [header.index(c) for c in self.columns]
        self.label_idx = header.index(self.label_column) if self.label_column in header else None

    def __call__(self, chunk: bytes, unterminated: bool) -> None:
        lines = _lines(chunk)
        if self.header is None and lines:
            self.lineno += 1
            self._read_header(lines.pop(0))
        assert self.header is not None or not lines
        width, path, pair = len(self.header or []), self.path, len(self.columns) > 1
        labels, label_lines = [], []
        for line in lines:
            self.lineno += 1
            if not line.strip():
                continue  # a trailing blank line is common in TSV dumps
            cols = line.split("\t")
            if len(cols) != width:
                raise SeqkitError(f"{path}:{self.lineno}: {len(cols)} tab-separated columns, the header has {width}")
            for name, i in zip(self.columns, self.text_idx):
                if not cols[i].strip():
                    raise SeqkitError(f"{path}:{self.lineno}: empty {name!r}" +
                                      (" (a sentence pair needs both sentences)" if pair else ""))
            self.rows += 1
            if self.label_idx is not None:
                label = cols[self.label_idx].strip()
                if not label:
                    raise SeqkitError(f"{path}:{self.lineno}: empty label in column {self.label_column!r}")
                labels.append(label)
                label_lines.append(self.lineno)
        self.labels.add(labels, label_lines)

    def finish(self) -> None:
        if self.header is None:
            raise SeqkitError(f"{self.path}: empty file (expected a header line naming the columns)")
        if not self.rows:
            raise SeqkitError(f"{self.path}: no examples after the header")


class LabelLines:
    """``on_lines`` of a ``{pref}.label`` file's check pass: a label a line."""

    def __init__(self, per_row: bool):
        self.lineno = 0
        self.labels = Labels(per_row)

    def __call__(self, chunk: bytes, unterminated: bool) -> None:
        lines = [line.strip() for line in _lines(chunk)]
        self.labels.add(lines, list(range(self.lineno + 1, self.lineno + 1 + len(lines))))
        self.lineno += len(lines)


@dataclass
class Layout:
    """How a row's lines become its texts and label: a TSV line's columns, or one line of each file
    (``input0`` [``input1``] [``label``])."""

    tsv: bool
    text_idx: List[int]  # TSV: the text columns
    label_idx: Optional[int]  # TSV: the label column; plain: the label file's position (None: unlabelled)

    def parse(self, cols: List[List[str]]) -> Tuple[List[Tuple[str, ...]], Optional[List[str]]]:
        """(texts, labels) of the rows whose lines are ``cols`` (one list per file)."""
        if self.tsv:
            rows = [line.split("\t") for line in cols[0]]
            labels = None if self.label_idx is None else [r[self.label_idx].strip() for r in rows]
            return [tuple(r[i].strip() for i in self.text_idx) for r in rows], labels
        labels = None if self.label_idx is None else [x.strip() for x in cols[self.label_idx]]
        return list(zip(*[[t.strip() for t in cols[i]] for i in self.text_idx])), labels


@dataclass
class Source:
    """One split's inputs, checked: its files (a :class:`Split`: role -> :class:`Scan`; ``dropped``
    = the lines that hold no row), how rows are read, and its labels."""

    name: str
    path: str  # the file messages and preprocess.json name
    label_path: str  # the file messages on labels name
    split: Split
    layout: Layout
    labels: Optional[Labels]  # None: an unlabelled split

    @property
    def rows(self) -> int:
        return self.split.kept()

    def line_of(self, row: int) -> int:
        """1-based line number of ``row`` (0-based) in its file."""
        return int(lines_of_ranks(np.array([row]), self.split.dropped)[0]) + 1


def _check_tsv(name: str, path: str, columns: List[str], label_column: str, work: str) -> Source:
    rows = TsvRows(path, columns, label_column, per_row=name == "train")
    scan = scan_file(path, os.path.join(work, f"{name}.tsv"), True, rows)
    rows.finish()
    dropped = np.union1d(np.zeros(1, dtype=np.int64), np.asarray(scan.blank, dtype=np.int64))  # header, blanks
    split = Split(name, {"tsv": scan}, scan.lines, dropped)
    assert split.kept() == rows.rows
    labelled = rows.label_idx is not None
    return Source(name, path, path, split, Layout(True, rows.text_idx, rows.label_idx),
                  rows.labels if labelled else None)


def _check_plain(name: str, pref: str, n_inputs: int, work: str) -> Source:
    names = [pref + ".input"] if n_inputs == 1 and not os.path.isfile(pref + ".input0") else \
        [f"{pref}.input{i}" for i in range(n_inputs)]
    if n_inputs == 1 and os.path.isfile(pref + ".input1"):  # else the second sentences would be dropped silently
        raise SeqkitError(f"{pref}.input1 exists: sentence pairs need two text_columns (text_columns=[input0,input1])")
    scans: Dict[str, Scan] = {}
    for i, path in enumerate(names):
        if not os.path.isfile(path):
            raise SeqkitError(f"file not found: {path} (text_columns names {n_inputs} inputs)")
        scans[f"input{i}"] = scan_file(path, os.path.join(work, f"{name}.input{i}"), True)
    label_path = pref + ".label"
    labels = LabelLines(per_row=name == "train") if os.path.isfile(label_path) else None
    if labels is not None:
        scans["label"] = scan_file(label_path, os.path.join(work, f"{name}.label"), True, labels)
    first = scans["input0"].lines
    for path, scan in zip(names[1:] + [label_path], list(scans.values())[1:]):
        if scan.lines != first:
            raise SeqkitError(f"line counts differ: {names[0]} has {first} lines, {path} has {scan.lines}")
    blanks = [(scan.blank[0], k) for k, scan in enumerate(scans.values()) if scan.blank]
    if blanks:  # the first empty line, row by row: its texts, then its label
        line, k = min(blanks)
        if k < len(names):
            raise SeqkitError(f"{names[k]}:{line + 1}: empty line" +
                              (" (a sentence pair needs both sentences)" if n_inputs > 1 else ""))
        raise SeqkitError(f"{label_path}:{line + 1}: empty label")
    if not first:
        raise SeqkitError(f"{names[0]}: no examples")
    split = Split(name, scans, first, np.zeros(0, dtype=np.int64))
    return Source(name, names[0], label_path, split,
                  Layout(False, list(range(n_inputs)), n_inputs if labels is not None else None),
                  labels.labels if labels is not None else None)


def check_source(name: str, pref: str, columns: List[str], label_column: str, work: str) -> Source:
    """The check pass over one split: a TSV with a header (``pref``, ``pref.tsv``), or GLUE's plain
    files ``pref.input0`` [``pref.input1``] + ``pref.label`` (see ``read_classification``)."""
    if os.path.isfile(pref) or os.path.isfile(pref + ".tsv"):
        return _check_tsv(name, resolve_path(pref, [".tsv"]), columns, label_column, work)
    if os.path.isfile(pref + ".input0") or os.path.isfile(pref + ".input"):
        return _check_plain(name, pref, len(columns), work)
    raise SeqkitError(f"file not found: {pref} (tried {pref}, {pref}.tsv, {pref}.input0 + {pref}.label)")


def kept_labels(train: Source, held: np.ndarray, dropped: np.ndarray) -> Tuple[List[str], Dict[str, int]]:
    """(the labels of the rows train keeps, sorted; label -> its count there). A label that only
    carved rows have is refused, naming the first such row, as the carved split's check did; the
    dropped rows' labels count nowhere."""
    assert train.labels is not None
    seen, codes = train.labels.seen(), train.labels.codes()
    held_codes = codes[held]  # (k,)
    kept = (np.bincount(codes, minlength=len(seen)) - np.bincount(held_codes, minlength=len(seen)) -
            np.bincount(codes[dropped], minlength=len(seen)))  # (labels,)
    labels = sorted(seen[c] for c in np.flatnonzero(kept).tolist())
    alone = np.flatnonzero(kept[held_codes] == 0)
    if len(alone):
        j = int(alone[0])
        raise SeqkitError(f"{train.label_path}:{train.line_of(int(held[j]))}: label {seen[held_codes[j]]!r} in valid "
                          f"never occurs in train (train has: {', '.join(labels)})")
    return labels, {seen[c]: int(kept[c]) for c in np.flatnonzero(kept).tolist()}


def check_known(src: Source, name: str, known: List[str]) -> None:
    """A label of ``src`` that train lacks: one line naming its first row (``check_known_labels``)."""
    if src.labels is None:
        return
    known_set = set(known)
    unknown = [label for label in src.labels.first if label not in known_set]
    if unknown:
        label = min(unknown, key=src.labels.first.__getitem__)
        raise SeqkitError(f"{src.label_path}:{src.labels.first[label]}: label {label!r} in {name} never occurs in "
                          f"train (train has: {', '.join(known)})")


# ------------------------------------------------------------------------------------- reading rows


@dataclass
class Rows:
    """Lines ``[a, a + count)`` of a split's files, as rows: ``files`` (path, byte offset of line a)
    per file; ``drop``: the numbers (0 = line a) of the lines that hold no row; ``first_row``: the
    number of the first row there."""

    files: List[Tuple[str, int]]
    count: int
    drop: np.ndarray
    first_row: int
    layout: Layout


def rows_of(src: Source, a: int, b: int) -> Rows:
    dropped = src.split.dropped
    lo, hi = np.searchsorted(dropped, a), np.searchsorted(dropped, b)
    return Rows([(s.path, s.offset(a)) for s in src.split.scans.values()], b - a, dropped[lo:hi] - a,
                int(a - lo), src.layout)


def row_batches(rows: Rows) -> Iterator[Tuple[int, List[Tuple[str, ...]], Optional[List[str]]]]:
    """(number of the first row, texts, labels or None) of each batch of up to ``encode.BATCH_LINES``
    lines (read when called: tests set it small)."""
    files = []
    try:
        for path, offset in rows.files:
            files.append(open(path, "rb"))
            files[-1].seek(offset)
        row = rows.first_row
        batch = encode.BATCH_LINES
        for start in range(0, rows.count, batch):
            n = min(batch, rows.count - start)
            cols = [_read_lines(f, n) for f in files]
            gone = rows.drop[np.searchsorted(rows.drop, start):np.searchsorted(rows.drop, start + n)] - start
            if len(gone):
                keep = np.setdiff1d(np.arange(len(cols[0])), gone).tolist()
                cols = [[col[i] for i in keep] for col in cols]
            texts, labels = rows.layout.parse(cols)
            yield row, texts, labels
            row += len(texts)
    finally:
        for f in files:
            f.close()


def sentence_texts(src: Source) -> Any:
    """A fresh pass over ``src``'s texts (single sentences), a batch at a time: what
    :func:`seqkit.preprocess.carve_stream.carve_sentence_rows` reads."""
    return lambda: ([t[0] for t in texts] for _, texts, _ in row_batches(rows_of(src, 0, src.split.lines)))


class KeptTexts:
    """:class:`seqkit.preprocess.common.TrainText` over the texts of the rows train keeps (``held``:
    the rows it does not keep, sorted), each text of a pair on a line of its own (what the
    tokenizer learns from)."""

    def __init__(self, train: Source, held: np.ndarray, width: int):
        self.train, self.held, self.width = train, held, width
        self.pairs = (train.rows - len(held)) * width

    def write(self, lang: str, ranks: Optional[np.ndarray], path: str) -> None:
        done = 0  # texts of kept rows so far
        with open(path, "wb") as out:
            for row, texts, _ in row_batches(rows_of(self.train, 0, self.train.split.lines)):
                h = set((self.held[np.searchsorted(self.held, row):np.searchsorted(self.held, row + len(texts))]
                         - row).tolist())
                flat = [t for i, row_texts in enumerate(texts) if i not in h for t in row_texts]
                if ranks is not None:
                    at = ranks[np.searchsorted(ranks, done):np.searchsorted(ranks, done + len(flat))] - done
                    done += len(flat)
                    flat = [flat[i] for i in at.tolist()]
                if flat:
                    out.write(("\n".join(flat) + "\n").encode("utf-8"))


# ----------------------------------------------------------------------------------------- encoding


@dataclass
class RowRange:
    """One worker's rows: ``rows``; ``held``, the numbers of those carve_valid holds out (sorted);
    ``label_id`` (None: no labels); its files PREFIX.{kept,held}.{ids,len,lab,txt}; ``dropped``, the
    numbers of the rows in neither part (sorted: carve_unit=sentence's)."""

    split: str
    rows: Rows
    held: np.ndarray
    label_id: Optional[Dict[str, int]]
    prefix: str
    count: bool  # count the kept rows' pieces (the dictionary is built from these)
    dropped: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


@dataclass
class RowResult:
    pieces: List[str]  # the pieces numbered past the tokenizer's own ids
    counts: Optional[np.ndarray]  # count per provisional id (kept rows, when counted)
    rows: Dict[str, int] = field(default_factory=dict)  # part -> rows written


PARTS = ("kept", "held")
BOS = -1  # provisional id of <s>: the last entry of the merge's lookup table
UNK_WORD = -2  # provisional id of <unk> (tagging: a word the tokenizer gives no piece keeps a position)


def _write_part(table: PieceIds, texts: List[Tuple[str, ...]], labels: Optional[List[str]], task: RowRange,
                files: Dict[str, Any], count: bool) -> None:
    """Provisional ids ``<s> a </s> [b </s>]`` of each row, its size, label id and text line."""
    width = len(texts[0])
    ids, sizes = table.encode([t for row in texts for t in row], count)  # each text's ids and its end
    per_row = sizes.reshape(-1, width).sum(axis=1, dtype=np.int64)  # (m,) without <s>
    ids = np.insert(ids, np.cumsum(per_row) - per_row, BOS)
    files["ids"].write(ids.astype(np.int32).tobytes())
    files["len"].write((per_row + 1).astype(np.int32).tobytes())
    if labels is not None and task.label_id is not None:
        files["lab"].write(np.array([task.label_id[x] for x in labels], dtype=np.int32).tobytes())
    files["txt"].write("".join("\t".join(row) + "\n" for row in texts).encode("utf-8"))


def encode_rows(task: RowRange) -> RowResult:
    """Encode one range's rows once (the worker's side; see the module doc)."""
    table = PieceIds(_TOKENIZERS[KEY])
    files = {part: {ext: open(f"{task.prefix}.{part}.{ext}", "wb") for ext in ("ids", "len", "lab", "txt")}
             for part in PARTS}
    written = dict.fromkeys(PARTS, 0)
    try:
        for row, texts, labels in row_batches(task.rows):
            fate = np.zeros(len(texts), dtype=np.int8)  # 0 kept, 1 held, 2 dropped
            for code, rows in ((1, task.held), (2, task.dropped)):
                fate[rows[np.searchsorted(rows, row):np.searchsorted(rows, row + len(texts))] - row] = code
            for part, take in zip(PARTS, (np.flatnonzero(fate == 0).tolist(), np.flatnonzero(fate == 1).tolist())):
                if take:
                    _write_part(table, [texts[i] for i in take], None if labels is None else [labels[i] for i in take],
                                task, files[part], task.count and part == "kept")
                    written[part] += len(take)
    finally:
        for by_ext in files.values():
            for f in by_ext.values():
                f.close()
    return RowResult(table.pieces, table.counts if task.count else None, written)


def plan(sources: Dict[str, Source], held: np.ndarray, label_id: Dict[str, int], workers: int, work: str,
         count: bool, dropped: Optional[np.ndarray] = None) -> List[RowRange]:
    """Each split's lines cut into up to ``workers`` ranges (at offsets a worker can seek), in order;
    ``dropped``: the training rows that go to no split (sorted)."""
    dropped = held[:0] if dropped is None else dropped
    tasks: List[RowRange] = []
    for src in sources.values():
        cut = cuts(src.split, workers, 1)[0]
        for a, b in zip(cut, cut[1:]):
            rows = rows_of(src, a, b)
            last = rows.first_row + src.split.kept(a, b)
            mine = [x[np.searchsorted(x, rows.first_row):np.searchsorted(x, last)] if src.name == "train" else x[:0]
                    for x in (held, dropped)]
            tasks.append(RowRange(src.name, rows, mine[0], label_id if src.labels is not None else None,
                                  os.path.join(work, f"{src.name}.{len(tasks)}"), count and src.name == "train",
                                  mine[1]))
    return tasks


def encode_all(tasks: List[RowRange], workers: int, tok: Tokenizer) -> List[RowResult]:
    return run_ranges(tasks, workers, {KEY: tok}, encode_rows)


def build_dictionary(tok: Tokenizer, results: List[RowResult], threshold: int, nwords: int) -> Dictionary:
    """The dictionary of the kept training rows' pieces, as counting every text with the tokenizer
    did; the pieces it can emit that training never did get an id too (count 0)."""
    counts: Counter = Counter()
    add_piece_counts(counts, tok, [(res.pieces, res.counts) for res in results if res.counts is not None])
    counts = +counts  # without the pieces a range met only in rows it did not count (held out, dropped)
    for piece in getattr(tok, "vocab_pieces", list)():
        counts.setdefault(piece, 0)
    return Dictionary.build(counts, threshold=threshold, nwords=nwords)


def merge(out: str, split: str, parts: List[Tuple[Any, RowResult, str]], tok: Tokenizer, d: Dictionary,
          n_labels: Optional[int], per_token: bool = False) -> Dict[str, Any]:
    """``{split}.input.bin/.idx``, ``{split}.label.bin/.idx`` (``n_labels`` given: a label a row, or
    with ``per_token`` one a position, as tagging stores them) and ``{split}.text.txt`` from
    ``parts`` (a range with a ``prefix``, its result, part) in order; their files removed. The
    split's stats as preprocess.json holds them."""
    dtype, label_dtype = dtype_for_vocab(len(d)), dtype_for_vocab((n_labels or 0) + FIRST_TAG)
    base = np.array([d.indices.get(p, d.unk_index) for p in base_pieces(tok)], dtype=np.int64)
    sizes, unk = [], 0
    prefix = os.path.join(out, split)
    with open(f"{prefix}.input.bin", "wb") as f_bin, open(f"{prefix}.text.txt", "wb") as f_txt, \
            open(f"{prefix}.label.bin", "wb") as f_lab:
        for task, res, part in parts:
            extra = [d.indices.get(p, d.unk_index) for p in res.pieces]
            # provisional id -> final id: 0 (end) -> </s>, the model's ids, the other pieces, -2 -> <unk>, -1 -> <s>
            lut = np.concatenate([[d.eos_index], base, extra, [d.unk_index, d.bos_index]]).astype(dtype)
            name = f"{task.prefix}.{part}"
            unk += remap(f"{name}.ids", lut, f_bin, d.unk_index)
            with open(f"{name}.lab", "rb") as f:
                while block := f.read(4 * REMAP_CHUNK):
                    f_lab.write(np.frombuffer(block, dtype=np.int32).astype(label_dtype).tobytes())
            with open(f"{name}.txt", "rb") as f:
                shutil.copyfileobj(f, f_txt)
            sizes.append(read_int32(f"{name}.len"))
    write_index(f"{prefix}.input.idx", dtype, sizes)
    n = sum(len(s) for s in sizes)
    ntok = sum(int(s.sum(dtype=np.int64)) for s in sizes)
    if n_labels is None:
        os.remove(f"{prefix}.label.bin")
    else:  # one label a row (sizes of 1, never held), or one a position (the inputs' sizes)
        write_index(f"{prefix}.label.idx", label_dtype, sizes if per_token else [np.broadcast_to(np.int32(1), (n,))])
    del sizes
    for task, _, part in parts:
        for ext in ("ids", "len", "lab", "txt"):
            os.remove(f"{task.prefix}.{part}.{ext}")
    return {"examples": n, "labelled": n_labels is not None, "tokens": ntok,
            "unk_pct": round(100.0 * unk / max(ntok, 1), 3)}


def _record(cfg: Any, path: str) -> Dict[str, Any]:
    return {"split": "valid", "share": cfg.carve_valid, "seed": cfg.carve_seed, "unit": cfg.carve_unit, "from": path}


def carve_rows(cfg: Any, n: int, path: str) -> Tuple[np.ndarray, Dict[str, Any]]:
    """``(held, carved)``: the training rows ``carve_valid`` holds out of ``n`` (sorted; none when 0)
    and preprocess.json's record of the carve (empty when nothing is carved). carve_unit=sentence
    is refused here (sentence pairs, tagged sentences): :func:`carve_train` carves single sentences."""
    if cfg.carve_valid <= 0:
        return np.zeros(0, dtype=np.int64), {}
    if cfg.carve_unit == "sentence":
        raise SeqkitError(SENTENCE_DATA)
    held = held_rows(n, cfg.carve_valid, cfg.carve_seed, "examples")
    log.info("carve_valid=%g carve_seed=%d: %d of %d training examples held out as split valid",
             cfg.carve_valid, cfg.carve_seed, len(held), n)
    return held, _record(cfg, path)


def carve_train(cfg: Any, train: Source) -> Tuple[np.ndarray, np.ndarray, Dict[str, Any]]:
    """``(held, dropped, carved)``: :func:`carve_rows`, or with carve_unit=sentence on single
    sentences the rows :func:`seqkit.preprocess.carve.carve_sentences` holds out and drops."""
    if cfg.carve_valid > 0 and cfg.carve_unit == "sentence" and len(train.layout.text_idx) == 1:
        held, dropped, summary = carve_sentence_rows(sentence_texts(train), train.rows, cfg.carve_valid,
                                                     cfg.carve_seed)
        return held, dropped, {**_record(cfg, train.path), **summary}
    held, carved = carve_rows(cfg, train.rows, train.path)
    return held, held[:0], carved


def write_folder(cfg: Any, tok_cfg: Any, out: str, work: str, sources: Dict[str, Any], held: np.ndarray,
                 labels: List[str], label_counts: Counter, carved: bool, tokenizer_texts: Any, plan_fn: Any,
                 encode_fn: Any, per_token: bool = False) -> Tuple[Any, Dictionary, Dict[str, Dict[str, Any]]]:
    """The steps after the check pass, for classification and tagging alike: the tokenizer (learnt
    from ``tokenizer_texts``, or ``cfg.vocab_from``'s with its dictionary), ``plan_fn``'s ranges
    encoded by ``encode_fn`` in ``cfg.workers`` processes, the dictionary from their counts, the
    dictionaries and tokenizer saved, each split merged (the held-out rows as split valid when
    ``carved``; ``per_token``: a label a position, an untagged split's file holding word starts);
    the work folder removed. ``(tokenizer config, dictionary, each split's stats)``."""
    pretrained = pretrained_vocabulary(cfg.vocab_from) if cfg.vocab_from else None
    if pretrained is not None:
        tok, d = pretrained
        tok_cfg = tok.cfg
    else:
        tok = train_tokenizers(tok_cfg, True, [KEY], tokenizer_texts)[KEY]
    tasks = plan_fn(sources, held, {x: i for i, x in enumerate(labels)}, cfg.workers, work, pretrained is None)
    results = encode_fn(tasks, cfg.workers, tok)
    if pretrained is None:
        d = build_dictionary(tok, results, cfg.thresholdsrc, cfg.nwordssrc)
    d.save(os.path.join(out, "dict.input.txt"))
    save_torch(tok.state_dict(), os.path.join(out, "tokenizer.input.pt"))
    atomic_write_text(os.path.join(out, "dict.label.txt"), "".join(f"{x} {label_counts[x]}\n" for x in labels))
    splits = dict.fromkeys(["train"] + (["valid"] if carved else []) + [split for split in sources if split != "train"])
    stats = {}
    for split in splits:
        part = "held" if carved and split == "valid" else "kept"
        src = sources["train" if part == "held" else split]
        parts = [(t, r, part) for t, r in zip(tasks, results) if t.split == src.name]
        n_labels = len(labels) if per_token or src.labels is not None else None
        stats[split] = merge(out, split, parts, tok, d, n_labels, per_token=per_token)
        if per_token:
            stats[split]["labelled"] = src.labels is not None  # an untagged split's label file: word starts only
    shutil.rmtree(work)
    return tok_cfg, d, stats
