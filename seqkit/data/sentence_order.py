"""Sentences in document order, for the sentence-vector objectives (tasks ``skip_thought`` and
``quick_thought``, :mod:`seqkit.tasks.sentence_order`).

The data is an ordinary language-modeling folder (``seqkit-preprocess task=language_modeling``)
made from a text file that holds **one sentence per line, in document order, and an empty line
where a document ends**. Binarized, a sentence is a line of at least one piece plus its eos; an
empty line is a lone eos and only marks the boundary: sentences on either side of it are never
each other's neighbours. :func:`wikitext_sentences` writes WikiText in that layout.

Skip-thought (Kiros et al., 2015) reads triples: every sentence with a previous and a next sentence
in its own document is the centre of one example (the first and last sentence of a document are
only neighbours; a document of one or two sentences gives no example). Quick-thought (Logeswaran &
Lee, 2018) reads batches of contiguous sentences: each sentence's candidates are the other
sentences of its batch, and its targets those that are its previous or next sentence in the same
document.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence

import numpy as np
import torch

from seqkit.core.errors import SeqkitError
from seqkit.data.batching import batch_by_size, epoch_rng, token_budget_batches, without
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.data.pair_dataset import PaddedBatches

SENTENCE_ENDS = (".", "?", "!")


# -- text: WikiText -> one sentence per line ---------------------------------------------------------
def split_sentences(line: str) -> List[str]:
    """A tokenized line -> its sentences: a cut after every token ``.``, ``?`` or ``!`` (WikiText
    writes them apart, `` . ``; a decimal point is ``@.@`` and an abbreviation keeps its dot inside
    a token, so neither cuts); words after the last cut are a sentence of their own."""
    out: List[str] = []
    words: List[str] = []
    for word in line.split():
        words.append(word)
        if word in SENTENCE_ENDS:
            out.append(" ".join(words))
            words = []
    if words:
        out.append(" ".join(words))
    return out


def is_heading(line: str) -> bool:
    """`` = Title = `` (an article) or ``= = Section = =`` and deeper: a line between ``=`` marks."""
    s = line.strip()
    return len(s) > 4 and s.startswith("= ") and s.endswith(" =")


def wikitext_sentences(lines: Iterable[str]) -> Iterator[str]:
    """WikiText lines -> one sentence per line, ``""`` between articles.

    A document is an article: it starts at a `` = Title = `` line that stands between blank
    lines, as WikiText writes titles (a table legend such as `` = Goals ; A = `` sits between lines
    of text, and stays text): WikiText-2 then has 600, 60 and 60 articles in train, valid and
    test, its published counts. Titles and section headings (``= = ... = =``, also between blank
    lines) are dropped, not sentences; blank lines (paragraph breaks) are dropped too, so the
    paragraphs and sections of an article read as one run of sentences."""
    open_doc = False

    def emit(prev: str, line: str, nxt: str) -> Iterator[str]:
        nonlocal open_doc
        s = line.strip()
        if is_heading(s) and not prev.strip() and not nxt.strip():
            if not s.startswith("= =") and open_doc:  # an article's title: the document before it ends
                yield ""
                open_doc = False
            return
        for sentence in split_sentences(s):
            open_doc = True
            yield sentence

    prev, line = "", None  # each line is read with the one before and the one after it
    for nxt in lines:
        if line is not None:
            yield from emit(prev, line, nxt)
            prev = line
        line = nxt
    if line is not None:
        yield from emit(prev, line, "")


# -- the sentences of a binarized split ----------------------------------------------------------------
class SentenceIndex:
    """Which lines of a split are sentences (size > 1: pieces plus eos) and their documents.

    ``lines`` ``(N,)``: the line of each sentence; ``doc`` ``(N,)``: its document, counted by the
    empty lines before it; ``sizes`` ``(N,)``: its length in ids, eos included."""

    def __init__(self, sizes: np.ndarray):
        sizes = np.asarray(sizes, dtype=np.int64)
        sentence = sizes > 1
        self.lines = np.flatnonzero(sentence)  # (N,)
        self.doc = np.cumsum(~sentence)[self.lines]  # (N,) empty lines so far
        self.sizes = sizes[self.lines]  # (N,)

    def __len__(self) -> int:
        return len(self.lines)

    def neighbours(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Whether sentences ``i`` and ``j`` (arrays of positions, broadcast) follow each other in
        one document."""
        return (np.abs(i - j) == 1) & (self.doc[i] == self.doc[j])

    def centres(self) -> np.ndarray:
        """Positions of the sentences with a previous and a next one in their document ``(M,)``."""
        if len(self) < 3:
            return np.zeros(0, dtype=np.int64)
        mid = np.arange(1, len(self) - 1)
        return mid[(self.doc[mid - 1] == self.doc[mid]) & (self.doc[mid + 1] == self.doc[mid])]


def _no_examples(data: IndexedDataset, what: str) -> SeqkitError:
    return SeqkitError(f"{data.prefix}: {what}; the text must hold one sentence per line in document order, an "
                       "empty line between documents (examples/sentence_vectors/prepare.py writes WikiText so)")


class SkipThoughtDataset(PaddedBatches):
    """Examples: every sentence with both neighbours (:meth:`SentenceIndex.centres`).

    ``collate``: ``src_tokens`` ``(B, S)`` the centre sentences; ``target`` ``(B, 2, T)`` the previous
    (``[:, 0]``) and the next sentence (``[:, 1]``), each ending with eos, padded to one length T;
    ``prev_output_tokens`` ``(B, 2, T)`` the same shifted right after ``<s>`` (teacher forcing)."""

    def __init__(self, data: IndexedDataset, dictionary: Dictionary):
        self.data, self.index = data, SentenceIndex(data.sizes)
        self.centre = self.index.centres()  # (M,) sentence positions
        if not len(self.centre):
            raise _no_examples(data, "no sentence has a previous and a next sentence in its document")
        self.pad, self.bos = dictionary.pad(), dictionary.bos()
        sizes = self.index.sizes
        self.src_sizes = sizes[self.centre]  # (M,)
        self.tgt_sizes = np.maximum(sizes[self.centre - 1], sizes[self.centre + 1])  # (M,) the longer neighbour

    def __len__(self) -> int:
        return len(self.centre)

    def too_long(self, max_source: int, max_target: int) -> np.ndarray:
        """Examples whose centre or a neighbour (plus the decoder's leading ``<s>``) is too long."""
        return np.nonzero((self.src_sizes > max_source) | (self.tgt_sizes + 1 > max_target))[0]

    def batches(self, max_tokens: int, max_sentences: int = 0, seed: int = 1, epoch: int = 0,
                shuffle: bool = True, exclude: Optional[np.ndarray] = None) -> List[np.ndarray]:
        """Token-budget batches, the cost of an example being its longest sentence (a decoder reads T + 1)."""
        cost = np.maximum(self.src_sizes, self.tgt_sizes + 1)
        return token_budget_batches(cost, max_tokens, max_sentences, seed, epoch, shuffle, exclude)

    def collate(self, indices: Sequence[int]) -> Dict[str, Any]:
        ids = np.array(indices, dtype=np.int64).reshape(-1)  # (B,)
        c = self.centre[ids]  # (B,) sentence positions
        flat, lengths = self.data.gather(self.index.lines[c])
        src = self.pad_flat(flat, lengths, self.pad)  # (B, S)
        sides = np.stack([c - 1, c + 1], axis=1).reshape(-1)  # (2B,) prev0, next0, prev1, ...
        flat, tlen = self.data.gather(self.index.lines[sides])  # (sum T_i,), (2B,)
        target = self.pad_flat(flat, tlen, self.pad)  # (2B, T)
        keep = np.ones(len(flat), dtype=bool)
        keep[np.cumsum(tlen) - 1] = False  # each row's final eos is never an input
        prev = self.pad_flat(flat[keep], tlen - 1, self.pad, prepend=self.bos)  # (2B, T)
        B = len(ids)
        return {
            "id": torch.from_numpy(ids),
            "net_input": {"src_tokens": src, "src_lengths": torch.from_numpy(lengths),
                          "prev_output_tokens": prev.view(B, 2, -1)},
            "target": target.view(B, 2, -1),  # (B, 2, T)
            "ntokens": int(tlen.sum()),
            "nsentences": B,
        }


class QuickThoughtDataset(PaddedBatches):
    """Examples: every sentence; a batch is a run of contiguous sentences (its candidates).

    ``collate``: ``src_tokens`` ``(B, S)``; ``target`` ``(B, B)`` bool, ``target[r, c]``: sentence c
    is the previous or the next sentence of sentence r in its document (the diagonal is False)."""

    def __init__(self, data: IndexedDataset, dictionary: Dictionary):
        self.data, self.index = data, SentenceIndex(data.sizes)
        if len(self.index) < 2:
            raise _no_examples(data, f"{len(self.index)} sentence(s): quick-thought needs neighbours")
        self.pad = dictionary.pad()
        self.src_sizes = self.index.sizes  # (N,)
        self.tgt_sizes = None

    def __len__(self) -> int:
        return len(self.index)

    def too_long(self, max_source: int, max_target: int) -> np.ndarray:
        return np.nonzero(self.src_sizes > max_source)[0]

    def batches(self, max_tokens: int, max_sentences: int = 0, seed: int = 1, epoch: int = 0,
                shuffle: bool = True, exclude: Optional[np.ndarray] = None) -> List[np.ndarray]:
        """Runs of consecutive sentences (in document order, ``exclude`` left out) cut by the token
        budget (count x longest) and ``max_sentences``; the runs' order is shuffled per epoch."""
        order = without(np.arange(len(self), dtype=np.int64), exclude, len(self))
        runs = batch_by_size(order, self.src_sizes, max_tokens, max_sentences)
        if shuffle:
            epoch_rng(seed, epoch).shuffle(runs)
        return runs

    def targets(self, ids: np.ndarray) -> torch.Tensor:
        """``(B, B)`` bool: which sentences of the batch ``ids`` are each one's neighbours."""
        return torch.from_numpy(self.index.neighbours(ids[:, None], ids[None, :]))

    def collate(self, indices: Sequence[int]) -> Dict[str, Any]:
        ids = np.array(indices, dtype=np.int64).reshape(-1)  # (B,)
        flat, lengths = self.data.gather(self.index.lines[ids])
        target = self.targets(ids)  # (B, B)
        return {
            "id": torch.from_numpy(ids),
            "net_input": {"src_tokens": self.pad_flat(flat, lengths, self.pad),  # (B, S)
                          "src_lengths": torch.from_numpy(lengths)},
            "target": target,
            "ntokens": int(lengths.sum()),
            "nsentences": len(ids),
            "sample_size": int(target.sum()),  # the loss is summed over (sentence, neighbour) pairs
        }
