"""``carve_unit=sentence`` on streamed rows: the rows :func:`seqkit.preprocess.carve.carve_sentences`
holds out, keeps and drops (the same seeded choice), in memory of a few bytes per row.

A row is its whitespace tokens (``text.split()``). Each token is hashed to 64 bits (blake2b: the
same on every run, unlike ``hash()``), a run of tokens to the polynomial ``sum t[k] B^k`` mod 2^64
(numpy's uint64 arithmetic wraps), so every span of a row comes from its prefix sums, vectorised:
``H(i..j) = (Q[j] - Q[i]) * B^-i`` (B odd, so invertible mod 2^64). Three passes over the rows:

1. each row's key (``(n,)`` uint64: 8 bytes a row); the distinct keys, sorted;
2. each distinct row's proper spans looked up among the distinct keys (``np.searchsorted``): the
   keys found are the rows inside another row; the others are the sentences;
3. the sentences' tokens: their order (``sorted()`` of the token tuples, which :func:`sort_key`'s
   bytes give), the seeded pick, and the keys of every span of a kept sentence.

Then a row is held (its key a held sentence's), kept (a span of a kept sentence) or dropped.

Two different token runs share a key with odds of about 2^-64 a comparison (the token hashes act as
random numbers); a crafted pair (the Thue-Morse rows of two alternating words, 2,048 tokens and
longer) defeats any polynomial hash mod 2^64, which no phrase corpus holds.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Callable, Dict, Iterable, Iterator, List, Tuple

import numpy as np

from seqkit.preprocess.carve import held_rows

log = logging.getLogger("seqkit.preprocess")

BASE = 0x9E3779B97F4A7C15  # odd: invertible mod 2^64
BASE_INV = pow(BASE, -1, 1 << 64)
HELD, KEPT, DROPPED = 0, 1, 2  # a row's fate
CHUNK = 1 << 20  # rows classified at a time at the end

Texts = Callable[[], Iterable[List[str]]]  # a fresh pass over the rows' texts, a batch at a time, in order


def sort_key(tokens: List[str]) -> bytes:
    """Bytes that sort as the tuple of ``tokens`` does: UTF-8 keeps the code points' order, and the
    tokens are joined by ``\\0\\0``, below any character (a NUL inside a token is ``\\0\\1``)."""
    return "\0\0".join(t.replace("\0", "\0\1") for t in tokens).encode("utf-8")


def _powers(base: int, n: int) -> np.ndarray:
    """``(n + 1,)`` uint64: base^0 .. base^n mod 2^64."""
    out = np.ones(n + 1, dtype=np.uint64)
    np.cumprod(np.full(n, base, dtype=np.uint64), out=out[1:])
    return out


def token_hashes(token_rows: List[List[str]]) -> Tuple[np.ndarray, np.ndarray]:
    """``(T,)`` uint64 the rows' token hashes one row after another, ``(r,)`` int64 their lengths."""
    codes: Dict[str, int] = {}  # each distinct token of the batch hashed once
    ids = [codes.setdefault(t, len(codes)) for row in token_rows for t in row]
    hashes = np.fromiter((int.from_bytes(hashlib.blake2b(t.encode("utf-8"), digest_size=8).digest(), "little")
                          for t in codes), dtype=np.uint64, count=len(codes))
    return (hashes[np.asarray(ids, dtype=np.int64)],
            np.fromiter((len(row) for row in token_rows), dtype=np.int64, count=len(token_rows)))


class Batch:
    """Rows' tokens as hashes: ``values`` ``(T,)`` the rows' token hashes one row after another,
    ``starts``/``lengths`` ``(r,)`` each row's, and the prefix sums that give any span's key."""

    def __init__(self, values: np.ndarray, lengths: np.ndarray):
        self.values, self.lengths = values, lengths  # (T,) uint64, (r,) int64
        self.starts = np.cumsum(lengths) - lengths  # (r,)
        n = len(values)
        self.prefix = np.zeros(n + 1, dtype=np.uint64)  # (T + 1,) sum of t[k] B^k over k < g
        np.cumsum(values * _powers(BASE, n)[:n], out=self.prefix[1:])
        self.inverse = _powers(BASE_INV, n)  # (T + 1,)

    @classmethod
    def of(cls, token_rows: List[List[str]]) -> "Batch":
        return cls(*token_hashes(token_rows))

    def keys(self, start: np.ndarray, length: np.ndarray) -> np.ndarray:
        """The keys of the spans ``[start, start + length)`` (flat positions)."""
        return (self.prefix[start + length] - self.prefix[start]) * self.inverse[start]

    def spans(self, rows: np.ndarray, proper: bool) -> Iterator[np.ndarray]:
        """The keys of every span of ``rows`` (those shorter than their row only, with ``proper``), a
        span length at a time: ``sum(L(L+1)/2)`` keys in all."""
        lengths = self.lengths[rows]
        start = np.repeat(self.starts[rows], lengths) + (np.arange(lengths.sum()) -
                                                         np.repeat(np.cumsum(lengths) - lengths, lengths))
        left = np.repeat(self.starts[rows] + lengths, lengths) - start  # tokens from start to its row's end
        full = np.repeat(lengths, lengths)
        m = 1
        while True:
            take = (left >= m) & (full > m) if proper else left >= m
            start, left, full = start[take], left[take], full[take]
            if not len(start):
                return
            yield self.keys(start, np.full(len(start), m))
            m += 1


def _found(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The positions in ``keys`` (sorted, unique) of those of ``wanted`` it holds."""
    wanted = np.sort(wanted)  # sorted queries: ~6x faster than as they come
    at = np.searchsorted(keys, wanted)
    at[at == len(keys)] = 0
    return at[keys[at] == wanted]


def _batches(texts: Texts) -> Iterator[Tuple[int, List[List[str]]]]:
    """(number of the first row, each row's tokens) a batch at a time."""
    row = 0
    for batch in texts():
        yield row, [text.split() for text in batch]
        row += len(batch)


def _row_keys(texts: Texts, n: int) -> np.ndarray:
    """Pass 1: ``(n,)`` each row's key."""
    keys = np.empty(n, dtype=np.uint64)
    for row, tokens in _batches(texts):
        b = Batch.of(tokens)
        keys[row:row + len(tokens)] = b.keys(b.starts, b.lengths)
    return keys


def _inside(texts: Texts, first: np.ndarray, distinct: np.ndarray) -> np.ndarray:
    """Pass 2: ``(u,)`` bool, the distinct rows that are a proper span of another (each distinct
    row's spans looked up once, at its first row ``first``)."""
    inside = np.zeros(len(distinct), dtype=bool)
    for row, tokens in _batches(texts):
        b = Batch.of([tokens[i] for i in np.flatnonzero(first[row:row + len(tokens)]).tolist()])
        for keys in b.spans(np.arange(len(b.lengths)), proper=True):
            inside[_found(distinct, keys)] = True
    return inside


def _sentences(texts: Texts, first: np.ndarray, row_keys: np.ndarray,
               sentence_keys: np.ndarray) -> Tuple[List[bytes], Batch, np.ndarray]:
    """Pass 3: the sentences, in the order first met: each one's :func:`sort_key`, their tokens'
    hashes (a :class:`Batch`) and keys. Held in memory: the sentences only (a tenth of the rows in a
    phrase corpus such as SST-2; where every row is a sentence, the text's size plus ~8 bytes a token
    and ~60 a row)."""
    order: List[bytes] = []
    values: List[np.ndarray] = []
    lengths: List[np.ndarray] = []
    keys: List[np.ndarray] = []
    for row, tokens in _batches(texts):
        mine = np.flatnonzero(first[row:row + len(tokens)])
        mine = mine[np.isin(row_keys[row + mine], sentence_keys)].tolist()
        v, n = token_hashes([tokens[i] for i in mine])
        order.extend(sort_key(tokens[i]) for i in mine)
        values.append(v)
        lengths.append(n)
        keys.append(row_keys[row + np.asarray(mine, dtype=np.int64)])
    return order, Batch(np.concatenate(values), np.concatenate(lengths)), np.concatenate(keys)


def carve_sentence_rows(texts: Texts, n: int, share: float, seed: int) -> Tuple[np.ndarray, np.ndarray, Dict[str, int]]:
    """(held rows, dropped rows: sorted int64 row numbers; the summary for preprocess.json) of the
    ``n`` rows ``texts`` gives, as :func:`seqkit.preprocess.carve.carve_sentences` chooses them."""
    row_keys = _row_keys(texts, n)
    distinct, first_rows = np.unique(row_keys, return_index=True)
    first = np.zeros(n, dtype=bool)
    first[first_rows] = True
    del first_rows
    sentence_keys = distinct[~_inside(texts, first, distinct)]
    picked = held_rows(len(sentence_keys), share, seed, "sentences (rows no other row contains)")
    order, sentences, keys = _sentences(texts, first, row_keys, sentence_keys)
    ranked = sorted(range(len(order)), key=order.__getitem__)  # rank -> sentence, as sorted() of the tuples
    del order
    is_held = np.zeros(len(keys), dtype=bool)
    is_held[np.asarray(ranked, dtype=np.int64)[picked]] = True
    held_keys = np.sort(keys[is_held])
    kept = np.zeros(len(distinct), dtype=bool)  # the distinct rows inside (or equal to) a kept sentence
    for span_keys in sentences.spans(np.flatnonzero(~is_held), proper=False):
        kept[_found(distinct, span_keys)] = True
    fate = np.empty(n, dtype=np.int8)
    for a in range(0, n, CHUNK):
        k = row_keys[a:a + CHUNK]
        fate[a:a + CHUNK] = np.where(np.isin(k, held_keys), HELD,
                                     np.where(kept[np.searchsorted(distinct, k)], KEPT, DROPPED))
    held, dropped = np.flatnonzero(fate == HELD), np.flatnonzero(fate == DROPPED)
    log.info("carve_valid=%g carve_unit=sentence carve_seed=%d: %d of %d sentences held out as split valid "
             "(%d rows); %d rows found only inside them left train; %d training rows stay",
             share, seed, len(held_keys), len(sentence_keys), len(held), len(dropped), n - len(held) - len(dropped))
    return held, dropped, {"sentences": len(sentence_keys), "dropped": len(dropped)}
