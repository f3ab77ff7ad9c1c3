"""Holding out a validation split from the training examples (``carve_valid=``), for tasks whose
official dev split is the one reported (GLUE: choose on the carved split, report dev once).

Two units (``carve_unit=``):
- ``example``: a seeded share of the training rows, picked one by one.
- ``sentence``: for phrase corpora such as SST-2, whose training rows are every phrase of each
  training sentence (67,349 rows from 6,885 sentences). Picking rows one by one would hold out
  phrases whose sentence, and most of whose other phrases, stay in train, so the held-out score
  runs far above dev's. Here the unit is a sentence: a row that no other row contains (as a run of
  whitespace tokens). A seeded share of the sentences is held out, whole sentences only (as dev
  is), and every row found only inside held-out sentences leaves train; a phrase that is also
  inside a kept sentence stays in train, since a kept sentence would have given it anyway.

:func:`carve_sentences` holds every row's tokens; ``seqkit-preprocess`` streams its training rows and
makes the same choice in a few bytes a row (:mod:`seqkit.preprocess.carve_stream`).
"""

from __future__ import annotations

import logging
import random
from typing import Dict, List, Set, Tuple

import numpy as np

from seqkit.core.errors import SeqkitError
from seqkit.data.labelled_text import LabelledSplit

log = logging.getLogger("seqkit.preprocess")

Tokens = Tuple[str, ...]
SENTENCE_DATA = ("carve_unit=sentence is for single-sentence classification data (phrase corpora such as SST-2); "
                 "this data has sentence pairs or tagged words: use carve_unit=example")


def subset(split: LabelledSplit, idx: List[int]) -> LabelledSplit:
    """The rows ``idx`` of ``split``, in the order given."""
    return LabelledSplit(split.path, [split.texts[i] for i in idx], [split.labels[i] for i in idx],
                         [split.lines[i] for i in idx] if split.lines else [], split.label_path)


def held_rows(n: int, share: float, seed: int, what: str) -> np.ndarray:
    """round(share x n) of range(n), picked by ``seed``: ``(k,)`` int64, sorted (the streamed
    classification holds these, not a set of millions of ints)."""
    k = round(share * n)
    if not 0 < k < n:
        raise SeqkitError(f"carve_valid={share} holds out {k} of {n} training {what}: choose a share that "
                          "leaves both splits non-empty")
    return np.sort(np.fromiter(random.Random(seed).sample(range(n), k), dtype=np.int64, count=k))


def pick(n: int, share: float, seed: int, what: str) -> Set[int]:
    """:func:`held_rows` as a set."""
    return set(held_rows(n, share, seed, what).tolist())


def carve_examples(train: LabelledSplit, share: float, seed: int) -> Tuple[LabelledSplit, LabelledSplit, Dict]:
    """(rest, held out, summary): a seeded share of the rows, both parts in file order."""
    n = len(train.texts)
    held = pick(n, share, seed, "examples")
    log.info("carve_valid=%g carve_seed=%d: %d of %d training examples held out as split valid",
             share, seed, len(held), n)
    return (subset(train, [i for i in range(n) if i not in held]), subset(train, sorted(held)), {})


def spans(tokens: Tokens) -> Set[Tokens]:
    """Every contiguous run of ``tokens``, itself included."""
    n = len(tokens)
    return {tokens[i:j] for i in range(n) for j in range(i + 1, n + 1)}


def carve_sentences(train: LabelledSplit, share: float, seed: int) -> Tuple[LabelledSplit, LabelledSplit, Dict]:
    """(rest, held out, summary): a seeded share of the sentences (rows no other row contains) held
    out whole; the rows found only inside them are dropped from train."""
    if any(len(t) != 1 for t in train.texts):
        raise SeqkitError(SENTENCE_DATA)
    tokens: List[Tokens] = [tuple(t[0].split()) for t in train.texts]
    rows = set(tokens)
    inside = set()  # rows that are a proper part of another row
    for row in rows:
        inside.update(s for s in spans(row) if s != row and s in rows)
    sentences = sorted(rows - inside)  # sorted: the seed alone decides, not the hash order
    held_ids = pick(len(sentences), share, seed, "sentences (rows no other row contains)")
    held = {sentences[i] for i in held_ids}
    kept: Set[Tokens] = set()
    for i, sentence in enumerate(sentences):
        if i not in held_ids:
            kept.update(s for s in spans(sentence) if s in rows)
    rest = [i for i, t in enumerate(tokens) if t not in held and t in kept]
    valid = [i for i, t in enumerate(tokens) if t in held]
    dropped = len(tokens) - len(rest) - len(valid)
    log.info("carve_valid=%g carve_unit=sentence carve_seed=%d: %d of %d sentences held out as split valid "
             "(%d rows); %d rows found only inside them left train; %d training rows stay",
             share, seed, len(held), len(sentences), len(valid), dropped, len(rest))
    return subset(train, rest), subset(train, valid), {"sentences": len(sentences), "dropped": dropped}


UNITS = {"example": carve_examples, "sentence": carve_sentences}


def check_known_unit(unit: str) -> None:
    """Refuse a unit that is not one of :data:`UNITS`."""
    if unit not in UNITS:
        raise SeqkitError(f"carve_unit={unit!r}: choose one of {', '.join(UNITS)}")


def check_unit(unit: str, share: float) -> None:
    """Refuse an unknown unit, and a unit other than the default when nothing is carved (it would
    be ignored)."""
    check_known_unit(unit)
    if unit != "example" and share <= 0:
        raise SeqkitError(f"carve_unit={unit} applies to what carve_valid holds out, and carve_valid=0 holds out "
                          "nothing: set carve_valid (e.g. 0.1) or leave carve_unit out")


def carve(train: LabelledSplit, share: float, seed: int, unit: str = "example") -> Tuple[LabelledSplit, LabelledSplit, Dict]:
    """(rest, held out, summary for preprocess.json) by ``unit`` (see the module's doc)."""
    check_unit(unit, share)
    return UNITS[unit](train, share, seed)
