"""Readers for labelled text: classification TSV (or text + label files) and CoNLL columns.

Every reader checks its input and raises one ``SeqkitError`` line naming the file and line of the
first problem (a missing column, a sentence pair with no second sentence, a CoNLL line with the
wrong number of columns). Readers return plain Python lists; tokenizing and binarizing happen in
:mod:`seqkit.preprocess.labelled`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from seqkit.core.errors import SeqkitError
from seqkit.core.io import read_lines

BOM = "\ufeff"


@dataclass
class LabelledSplit:
    """One split: ``texts[i]`` is a tuple of 1 (single) or 2 (pair) sentences, or the words of a
    tagged sentence; ``labels[i]`` is a label (classification), a tag list (tagging) or None when
    the split has no labels; ``lines[i]`` is where example i starts in ``path`` (1-based), and where
    its label is in ``label_path`` when the labels have a file of their own."""

    path: str
    texts: List[Tuple[str, ...]] = field(default_factory=list)
    labels: Optional[list] = None
    lines: List[int] = field(default_factory=list)
    label_path: Optional[str] = None


def resolve_path(pref: str, suffixes: Sequence[str]) -> str:
    """``pref`` itself if it is a file, else the first ``pref + suffix`` that exists."""
    if os.path.isfile(pref):
        return pref
    for s in suffixes:
        if os.path.isfile(pref + s):
            return pref + s
    tried = ", ".join([pref] + [pref + s for s in suffixes])
    raise SeqkitError(f"file not found: {pref} (tried {tried})")


# ------------------------------------------------------------------------------ classification


def read_classification(pref: str, text_columns: Sequence[str], label_column: str) -> LabelledSplit:
    """A TSV file with a header (``pref``, ``pref.tsv``), or fairseq's GLUE layout of plain text
    files ``pref.input0`` [``pref.input1``] + ``pref.label``. A file without the label column (or
    without ``pref.label``) gives an unlabelled split (prediction only)."""
    if os.path.isfile(pref) or os.path.isfile(pref + ".tsv"):
        return _read_tsv(resolve_path(pref, [".tsv"]), text_columns, label_column)
    if os.path.isfile(pref + ".input0") or os.path.isfile(pref + ".input"):
        return _read_plain(pref, len(text_columns))
    raise SeqkitError(f"file not found: {pref} (tried {pref}, {pref}.tsv, {pref}.input0 + {pref}.label)")


def _read_tsv(path: str, text_columns: Sequence[str], label_column: str) -> LabelledSplit:
    rows = read_lines(path)
    header_line = next(rows, None)
    if header_line is None:
        raise SeqkitError(f"{path}: empty file (expected a header line naming the columns)")
    header = header_line.lstrip(BOM).split("\t")
    missing = [c for c in text_columns if c not in header]
    if missing:
        raise SeqkitError(f"{path}:1: no column {', '.join(repr(c) for c in missing)} in the header "
                          f"(columns: {', '.join(header)}); set text_columns=[...]")
    text_idx = [header.index(c) for c in text_columns]
    label_idx = header.index(label_column) if label_column in header else None
    out = LabelledSplit(path, labels=[] if label_idx is not None else None)
    for lineno, line in enumerate(rows, 2):
        if not line.strip():
            continue  # a trailing blank line is common in TSV dumps
        cols = line.split("\t")
        if len(cols) != len(header):
            raise SeqkitError(f"{path}:{lineno}: {len(cols)} tab-separated columns, the header has {len(header)}")
        texts = tuple(cols[i].strip() for i in text_idx)
        for name, t in zip(text_columns, texts):
            if not t:
                raise SeqkitError(f"{path}:{lineno}: empty {name!r}" +
                                  (" (a sentence pair needs both sentences)" if len(texts) > 1 else ""))
        out.texts.append(texts)
        out.lines.append(lineno)
        if label_idx is not None:
            label = cols[label_idx].strip()
            if not label:
                raise SeqkitError(f"{path}:{lineno}: empty label in column {label_column!r}")
            out.labels.append(label)
    if not out.texts:
        raise SeqkitError(f"{path}: no examples after the header")
    return out


def _read_plain(pref: str, n_inputs: int) -> LabelledSplit:
    names = [pref + ".input"] if n_inputs == 1 and not os.path.isfile(pref + ".input0") else \
        [f"{pref}.input{i}" for i in range(n_inputs)]
    if n_inputs == 1 and os.path.isfile(pref + ".input1"):  # else the second sentences would be dropped silently
        raise SeqkitError(f"{pref}.input1 exists: sentence pairs need two text_columns (text_columns=[input0,input1])")
    columns = []
    for name in names:
        if not os.path.isfile(name):
            raise SeqkitError(f"file not found: {name} (text_columns names {n_inputs} inputs)")
        columns.append(list(read_lines(name)))
    label_path = pref + ".label"
    labels = list(read_lines(label_path)) if os.path.isfile(label_path) else None
    for name, col in zip(names[1:] + ([label_path] if labels is not None else []), columns[1:] + [labels or []]):
        if len(col) != len(columns[0]):
            raise SeqkitError(f"line counts differ: {names[0]} has {len(columns[0])} lines, {name} has {len(col)}")
    out = LabelledSplit(names[0], labels=[] if labels is not None else None, label_path=label_path)
    for i, texts in enumerate(zip(*columns)):
        texts = tuple(t.strip() for t in texts)
        for name, t in zip(names, texts):
            if not t:
                raise SeqkitError(f"{name}:{i + 1}: empty line" +
                                  (" (a sentence pair needs both sentences)" if n_inputs > 1 else ""))
        out.texts.append(texts)
        out.lines.append(i + 1)
        if labels is not None:
            if not labels[i].strip():
                raise SeqkitError(f"{label_path}:{i + 1}: empty label")
            out.labels.append(labels[i].strip())
    if not out.texts:
        raise SeqkitError(f"{names[0]}: no examples")
    return out


# ------------------------------------------------------------------------------------- tagging


def read_conll(pref: str, word_column: int = 0, tag_column: int = -1, labelled: bool = True) -> LabelledSplit:
    """CoNLL columns (``pref`` or ``pref.conll``): one token per line, whitespace-separated
    columns, a blank line between sentences, ``-DOCSTART-`` lines skipped. Every token line of the
    file must have as many columns as the first one. With ``labelled`` false, or a file of one
    column, the split has no tags."""
    path = resolve_path(pref, [".conll", ".txt"])
    out = LabelledSplit(path, labels=[] if labelled else None)
    ncols: Optional[int] = None
    words: List[str] = []
    tags: List[str] = []
    start = 0

    def flush() -> None:
        if words:
            out.texts.append(tuple(words))
            out.lines.append(start)
            if out.labels is not None:
                out.labels.append(list(tags))
        words.clear()
        tags.clear()

    for lineno, line in enumerate(read_lines(path), 1):
        cols = line.split()
        if not cols:
            flush()
            continue
        if cols[0] == "-DOCSTART-":
            flush()
            continue
        if ncols is None:
            ncols = len(cols)
            for name, c in (("word_column", word_column), ("tag_column", tag_column)):
                if not -ncols <= c < ncols:
                    raise SeqkitError(f"{path}:{lineno}: {name}={c} but the file has {ncols} column(s)")
            if ncols == 1 or word_column % ncols == tag_column % ncols:
                out.labels = None  # words only: a split to predict
        elif len(cols) != ncols:
            raise SeqkitError(f"{path}:{lineno}: {len(cols)} columns, earlier lines have {ncols}")
        if not words:
            start = lineno
        words.append(cols[word_column])
        if out.labels is not None:
            tags.append(cols[tag_column])
    flush()
    if not out.texts:
        raise SeqkitError(f"{path}: no sentences")
    return out


def check_known_labels(split: LabelledSplit, name: str, known: Sequence[str]) -> None:
    """A label in a dev/test split that training never saw is an error naming it and its line."""
    if split.labels is None:
        return
    known_set = set(known)
    path = split.label_path or split.path
    for labels, line in zip(split.labels, split.lines):
        # a tagged sentence's j-th tag is on the j-th line from its start (no blank line inside)
        for j, label in enumerate(labels if isinstance(labels, list) else [labels]):
            if label not in known_set:
                raise SeqkitError(f"{path}:{line + j}: label {label!r} in {name} never occurs in train "
                                  f"(train has: {', '.join(known)})")
