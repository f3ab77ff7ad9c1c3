"""Reading side of the streamed ``seqkit-preprocess`` (translation, language_modeling): the check
pass over every input, the line ranges workers seek to, and the tokenizer's training sample.

No pass holds a file's lines. The check pass reads each file once in blocks of ``BLOCK_BYTES``
(numpy finds the line ends; one ``bytes.decode`` per block checks UTF-8) and keeps, per file, its
line count, the byte offset of every ``stride``-th line (at most ``2 * OFFSET_SLOTS`` of them: the
stride doubles as the file grows, as fairseq's ``find_offsets`` keeps one offset a worker) and, for
the training split, the numbers of its blank lines (what skip_empty drops). A ``.gz`` input cannot
be seeked: the check pass writes its decompressed bytes into the staging folder (``.work/``, gone
with it), and every later pass reads that copy, in as many workers as a plain file.

A line longer than ``MAX_LINE_BYTES`` (1 MB) is refused, naming the file and line: no sentence is
that long, and one such line (a file without newlines) would be held whole by a worker.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import os
import re
import sys
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Dict, List, Optional

import numpy as np

from seqkit.core.errors import SeqkitError

MAX_LINE_BYTES = 1 << 20
OFFSET_SLOTS = 4096
BLOCK_BYTES = 1 << 20  # a block and its copies stay a few MB
_CR_END = re.compile(rb"\r+\n")  # a line's \r ends, before its \n


@dataclass
class Scan:
    """What the check pass learned about one input file."""

    source: str  # the input as given (messages name it)
    path: str  # the plain file later passes read: ``source``, or a ``.gz`` input's decompressed copy
    lines: int = 0
    stride: int = 1  # offsets[i] is the byte where line i * stride starts
    offsets: List[int] = field(default_factory=list)
    blank: List[int] = field(default_factory=list)  # 0-based numbers of empty or whitespace-only lines

    def offset(self, line: int) -> int:
        """Byte offset where ``line`` starts (a multiple of ``stride``, below ``lines``)."""
        return self.offsets[line // self.stride]


@dataclass
class Split:
    """One split's files (lang -> :class:`Scan`, same line count) and the lines it leaves out."""

    name: str
    scans: Dict[str, Scan]
    lines: int
    dropped: np.ndarray  # (d,) sorted int64 line numbers skip_empty drops (train only)

    @property
    def stride(self) -> int:
        return max(s.stride for s in self.scans.values())

    def kept(self, a: int = 0, b: Optional[int] = None) -> int:
        """Pairs kept among lines ``[a, b)``."""
        b = self.lines if b is None else b
        return (b - a) - int(np.searchsorted(self.dropped, b) - np.searchsorted(self.dropped, a))


@functools.lru_cache(maxsize=None)
def _nonspace_bytes() -> np.ndarray:
    """(256,) uint8: 1 for a byte that no whitespace character's UTF-8 holds (a line holding one is
    not blank); what ``str.strip`` removes is ``str.isspace``."""
    space = {b for c in map(chr, range(sys.maxunicode + 1)) if c.isspace() for b in c.encode("utf-8")}
    table = np.ones(256, dtype=np.uint8)
    table[sorted(space)] = 0
    return table


def _too_long(source: str, lineno: int) -> SeqkitError:
    return SeqkitError(f"{source}:{lineno}: a line longer than 1 MB ({MAX_LINE_BYTES:,} bytes), more than any "
                       "sentence: split the file into lines, or drop that line")


class _Scanner:
    """Feeds whole lines (a bytes block ending in ``\\n``) into a :class:`Scan`."""

    def __init__(self, scan: Scan, want_blank: bool):
        self.scan, self.want_blank, self.pos = scan, want_blank, 0

    def feed(self, chunk: bytes, unterminated: bool = False) -> None:
        scan = self.scan
        arr = np.frombuffer(chunk, dtype=np.uint8)
        ends = np.flatnonzero(arr == 10)  # (n,) each line's "\n"
        starts = np.concatenate(([0], ends[:-1] + 1))  # (n,)
        too_long = np.flatnonzero(ends - starts > MAX_LINE_BYTES)
        if len(too_long):
            raise _too_long(scan.source, scan.lines + int(too_long[0]) + 1)
        try:  # an unterminated last line is checked without the "\n" added to it (as read_lines does)
            (chunk[:-1] if unterminated else chunk).decode("utf-8")
        except UnicodeDecodeError as e:
            i = int(np.searchsorted(ends, e.start))  # the line holding the bad byte
            raise SeqkitError(f"{scan.source}:{scan.lines + i + 1}: not valid UTF-8 ({e.reason} at byte "
                              f"{e.start - int(starts[i])})") from None
        if self.want_blank:
            # lines holding only bytes of whitespace characters are decoded to check: few in text
            nonspace = np.add.reduceat(_nonspace_bytes()[arr], starts, dtype=np.int64)  # (n,), "\n" included
            for i in np.flatnonzero(nonspace == 0).tolist():
                if not chunk[starts[i]:ends[i]].decode("utf-8").strip():
                    scan.blank.append(scan.lines + i)
        first = (-scan.lines) % scan.stride
        scan.offsets.extend((starts[first::scan.stride] + self.pos).tolist())
        while len(scan.offsets) > 2 * OFFSET_SLOTS:
            scan.offsets, scan.stride = scan.offsets[::2], scan.stride * 2
        scan.lines += len(ends)
        self.pos += len(chunk)


def scan_file(source: str, copy_to: Optional[str], want_blank: bool,
              on_lines: Optional[Callable[[bytes, bool], None]] = None) -> Scan:
    """The check pass over one file: UTF-8, line lengths, line count, offsets (and blank lines if
    ``want_blank``); a ``.gz`` file's bytes are written to ``copy_to`` as they are read.
    ``on_lines(block, unterminated)``, if given, sees each block of whole lines before it is checked
    (classification parses its rows there: :mod:`seqkit.preprocess.labelled_stream`)."""
    gz = source.endswith(".gz")
    scan = Scan(source, copy_to if gz else source)
    scanner = _Scanner(scan, want_blank)

    def feed(chunk: bytes, unterminated: bool = False) -> None:
        if on_lines is not None:
            on_lines(chunk, unterminated)
        scanner.feed(chunk, unterminated)

    try:
        with (gzip.open(source, "rb") if gz else open(source, "rb")) as f, \
                (open(copy_to, "wb") if gz else contextlib.nullcontext()) as copy:
            tail = b""
            while block := f.read(BLOCK_BYTES):
                if copy is not None:
                    copy.write(block)
                data = tail + block
                cut = data.rfind(b"\n") + 1
                if cut:
                    feed(data[:cut])
                tail = data[cut:]
                if len(tail) > MAX_LINE_BYTES:
                    raise _too_long(source, scan.lines + 1)
            if tail:
                feed(tail + b"\n", True)
    except (OSError, EOFError) as e:
        raise SeqkitError(f"{source}: cannot read ({e})") from None
    return scan


def scan_inputs(paths: Dict[str, Dict[str, str]], work: str, skip_empty: bool) -> Dict[str, Split]:
    """split -> :class:`Split` for ``paths`` (split -> lang -> file); the two sides of a split must
    have as many lines. Training pairs with a blank side are dropped when ``skip_empty``."""
    out: Dict[str, Split] = {}
    for split, by_lang in paths.items():
        scans = {lang: scan_file(p, os.path.join(work, f"{split}.{lang}"), want_blank=split == "train")
                 for lang, p in by_lang.items()}
        if len(scans) == 2:
            (pa, na), (pb, nb) = ((s.source, s.lines) for s in scans.values())
            if na != nb:
                raise SeqkitError(f"line counts differ: {pa} has {na} lines, {pb} has {nb}: the sides disagree from "
                                  f"line {min(na, nb) + 1} (one has no partner there); align the two files")
        dropped = np.zeros(0, dtype=np.int64)
        if split == "train" and skip_empty:
            dropped = functools.reduce(np.union1d, [np.asarray(s.blank, dtype=np.int64) for s in scans.values()])
        out[split] = Split(split, scans, next(iter(scans.values())).lines, dropped)
    return out


def lines_of_ranks(ranks: np.ndarray, dropped: np.ndarray) -> np.ndarray:
    """Line numbers of the kept pairs ``ranks`` (0 = the first pair skip_empty keeps)."""
    shifted = dropped - np.arange(len(dropped))  # (d,) non-decreasing: kept lines before each dropped one
    return ranks + np.searchsorted(shifted, ranks, side="right")


def _copy_lines(f: BinaryIO, out: BinaryIO) -> None:
    """Every line of ``f`` into ``out`` as ``raw.rstrip(b"\\r\\n") + b"\\n"`` would write it, a block
    of whole lines at a time."""
    tail = b""
    while block := f.read(BLOCK_BYTES):
        data = tail + block
        cut = data.rfind(b"\n") + 1
        out.write(_CR_END.sub(b"\n", data[:cut]) if b"\r" in data[:cut] else data[:cut])
        tail = data[cut:]
    if tail:
        out.write(tail.rstrip(b"\r") + b"\n")


class TrainFiles:
    """The training split as :class:`seqkit.preprocess.common.TrainText`: its files, streamed."""

    def __init__(self, split: Split):
        self.split = split
        self.pairs = split.kept()

    def write(self, lang: str, ranks: Optional[np.ndarray], path: str) -> None:
        dropped = self.split.dropped.tolist()
        wanted = None if ranks is None else lines_of_ranks(ranks, self.split.dropped).tolist()
        with open(self.split.scans[lang].path, "rb") as f, open(path, "wb") as out:
            if wanted is None and not dropped:  # every line, as read before: copied by blocks
                _copy_lines(f, out)
                return
            if wanted is None:  # every line but the dropped ones, in order: the lines as read before
                skip = iter(dropped)
                nxt = next(skip, -1)
                for i, raw in enumerate(f):
                    if i == nxt:
                        nxt = next(skip, -1)
                        continue
                    out.write(raw.rstrip(b"\r\n") + b"\n")
                return
            take = iter(wanted)
            nxt = next(take, None)
            for i, raw in enumerate(f):
                if nxt is None:
                    break
                if i == nxt:
                    out.write(raw.rstrip(b"\r\n") + b"\n")
                    nxt = next(take, None)


def cuts(split: Split, parts: int, shards: int) -> List[List[int]]:
    """Per shard, the line numbers that cut it into up to ``parts`` worker ranges: ``[a, ..., b]``.
    Shards hold near-equal numbers of kept pairs; every cut but the ends is a multiple of the
    split's offset stride (where a worker can seek)."""
    n, stride = split.lines, split.stride

    def snap(line: int) -> int:
        return line if line >= n else (line // stride) * stride

    kept = split.kept()
    bounds = [0]
    for k in range(1, shards):
        bounds.append(snap(int(lines_of_ranks(np.array([k * kept // shards]), split.dropped)[0])))
    bounds.append(n)
    out = []
    for a, b in zip(bounds, bounds[1:]):
        inner = sorted({snap(a + i * (b - a) // parts) for i in range(1, parts)} - {a, b})
        out.append([a, *[c for c in inner if a < c < b], b])
    return out
