"""Word2vec's training pairs (Mikolov et al., 2013), drawn from a language-modeling folder as the C
code and gensim draw them from text; the task is :mod:`seqkit.tasks.word2vec`.

The words are the folder's dictionary (``seqkit-preprocess task=language_modeling
tokenizer=space``; its ``thresholdsrc=N`` is word2vec's ``min_count``: rarer words became
``<unk>``). What a batch does with its text, in order:

1. **pieces**: every line is a sentence, cut into pieces of at most ``max_sentence_length``
   words; a window never crosses a line end or a cut. ``<unk>`` and the other specials are
   dropped before anything else, as the C code drops the words below ``min_count`` (so a window
   spans over them).
2. **subsampling** (``sample`` = t): a word of corpus frequency f is kept with probability
   ``min(1, (sqrt(f / t) + 1) * t / f)``, the C code's and gensim's formula
   (:func:`keep_probabilities`); f counts the training split's words.
3. **dynamic window**: each kept centre word draws its window b uniformly from 1..``window``; its
   contexts are the kept words at most b positions before or after it in its piece
   (:func:`window_pairs`).
4. **predictions**: ``skipgram``: every (centre, context) pair is one prediction, the context
   word's input vector scoring the centre word (as the C code orders them); ``cbow``: one per
   centre word, the mean of its contexts' input vectors scoring it.
5. **noise**: ``negative`` words per prediction from the unigram distribution raised to 0.75
   (:func:`noise_distribution`), drawn by the alias method (:func:`alias_table`); a noise word
   equal to the true one is not scored (the criterion masks it, as the C code skips it).

Every draw comes from ``numpy.random.default_rng([seed, epoch, first piece of the batch])``: a
batch is a pure function of its pieces, the run's seed and the epoch (exact resume, prefetching
changes nothing).

A batch: ``net_input.context`` ``(P, C)`` the input words of each of P predictions (C = 1 for
skip-gram; CBOW: 2 x window columns, ``<pad>`` where a centre has fewer contexts), ``target``
``(P, 1 + negative)`` the true word then the noise words, ``ntokens`` the centre words kept
(gensim's "effective words", what the train log's ``tokens_per_s`` counts), ``raw_words`` the
words before subsampling, and ``sample_size`` 1: the update is the *sum* of the predictions'
gradients, each stepping with ``optimizer.lr`` as every pair steps with alpha in the C code
(the criterion logs the loss per prediction).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from seqkit.core.errors import SeqkitError
from seqkit.data.batching import token_budget_batches
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset, flat_ranges

MODES = ("skipgram", "cbow")
NOISE_POWER = 0.75  # Mikolov et al.'s exponent of the unigram counts (gensim's ns_exponent)
SPECIALS = len(Dictionary())  # <pad> <s> </s> <unk>: ids below this are never words


def word_counts(data: IndexedDataset, vocab_size: int) -> np.ndarray:
    """``(V,)`` int64: how often each word occurs in ``data``; the specials (``<unk>``, ``</s>``...)
    count 0: they are never words."""
    counts = np.bincount(np.asarray(data.tokens), minlength=vocab_size).astype(np.int64)
    counts[:SPECIALS] = 0
    return counts


def keep_probabilities(counts: np.ndarray, sample: float) -> np.ndarray:
    """``(V,)``: the probability that subsampling keeps an occurrence of each word,
    ``min(1, (sqrt(f / t) + 1) * t / f)`` with f = count / total and t = ``sample`` (the C code's
    and gensim's formula); 1 for every word when ``sample`` is 0, 0 for a word never seen."""
    counts = np.asarray(counts, dtype=np.float64)
    seen = counts > 0
    if sample <= 0:
        return seen.astype(np.float64)
    f = np.where(seen, counts / max(counts.sum(), 1.0), 1.0)
    keep = (np.sqrt(f / sample) + 1.0) * sample / f
    return np.where(seen, np.minimum(keep, 1.0), 0.0)


def noise_distribution(counts: np.ndarray, power: float = NOISE_POWER) -> np.ndarray:
    """``(V,)``: the noise words' distribution, ``count ** power`` normalized (0 for a word never seen)."""
    weights = np.where(counts > 0, np.asarray(counts, dtype=np.float64) ** power, 0.0)
    total = weights.sum()
    if total <= 0:
        raise SeqkitError("the training split holds no word of the dictionary: nothing to draw noise words from")
    return weights / total


def alias_table(p: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Walker's alias method (Vose's construction) for distribution ``p`` ``(V,)``: (``prob``
    ``(V,)``, ``alias`` ``(V,)``) such that drawing i uniformly, then keeping i with probability
    ``prob[i]`` or else taking ``alias[i]``, draws from ``p`` exactly, in O(1) per draw."""
    n = len(p)
    scaled = np.asarray(p, dtype=np.float64) * n
    prob, alias = np.ones(n), np.arange(n, dtype=np.int64)
    small = [i for i in range(n) if scaled[i] < 1.0]
    large = [i for i in range(n) if scaled[i] >= 1.0]
    while small and large:
        s, g = small.pop(), large.pop()
        prob[s], alias[s] = scaled[s], g  # column s: s itself, topped up by g
        scaled[g] -= 1.0 - scaled[s]
        (small if scaled[g] < 1.0 else large).append(g)
    return prob, alias  # the columns left over hold exactly 1 (rounding aside): prob 1


def window_pairs(pieces: np.ndarray, windows: np.ndarray, window: int) -> Tuple[np.ndarray, np.ndarray]:
    """(centres, contexts) ``(P,)`` each: positions of every pair, for words of pieces ``pieces``
    ``(n,)`` (a word's piece; a piece is a run of positions) whose own windows are ``windows``
    ``(n,)`` in 1..``window``; ordered by centre, then by offset from -b to b."""
    n = len(pieces)
    offsets = np.concatenate([np.arange(-window, 0), np.arange(1, window + 1)])  # (2W,)
    pos = np.arange(n)[:, None] + offsets[None, :]  # (n, 2W)
    inside = np.clip(pos, 0, max(n - 1, 0))
    ok = (np.abs(offsets)[None, :] <= windows[:, None]) & (pos == inside)
    if n:
        ok &= pieces[inside] == pieces[:, None]
    centres, cols = np.nonzero(ok)  # row-major: by centre, then by offset
    return centres, pos[centres, cols]


class Word2VecDataset:
    """Pieces of a split's lines (the examples); :meth:`collate` draws a batch's predictions."""

    def __init__(self, data: IndexedDataset, counts: np.ndarray, pad: int, mode: str, window: int, negative: int,
                 sample: float, max_sentence_length: int):
        if mode not in MODES:
            raise SeqkitError(f"task.mode={mode!r}; valid: {', '.join(MODES)}")
        self.data, self.pad, self.mode = data, pad, mode
        self.window, self.negative = window, negative
        self.keep = keep_probabilities(counts, sample)  # (V,) 0 for the specials: they are dropped
        self.noise_prob, self.noise_alias = alias_table(noise_distribution(counts))  # (V,) each
        self.starts, self.src_sizes = self._pieces(data, max_sentence_length)
        if not len(self.starts):
            raise SeqkitError(f"{data.prefix}: no line holds a word: nothing to train word vectors on")
        self.tgt_sizes = None
        self.seed, self.epoch = 1, 0

    @staticmethod
    def _pieces(data: IndexedDataset, limit: int) -> Tuple[np.ndarray, np.ndarray]:
        """(stream start, words) ``(M,)`` of each piece: each line without its final ``</s>``, cut
        every ``limit`` words."""
        words = np.asarray(data.sizes, dtype=np.int64) - 1  # a line's final </s> is no word
        lines = np.flatnonzero(words > 0)
        count = -(-words[lines] // limit)  # (L,) pieces per line
        first = np.repeat(np.cumsum(count) - count, count)  # each piece's line's first piece
        k = np.arange(int(count.sum())) - first  # which piece of its line
        line = np.repeat(lines, count)
        starts = np.asarray(data.offsets[line], dtype=np.int64) + k * limit
        return starts, np.minimum(words[line] - k * limit, limit)

    def __len__(self) -> int:
        return len(self.starts)

    def too_long(self, max_source: int, max_target: int) -> np.ndarray:
        """None: a piece is at most ``max_sentence_length`` words by construction."""
        return np.zeros(0, dtype=np.int64)

    def batches(self, max_tokens: int, max_sentences: int = 0, seed: int = 1, epoch: int = 0,
                shuffle: bool = True, exclude: Optional[np.ndarray] = None) -> List[np.ndarray]:
        """Pieces up to ``max_tokens`` words a batch (length-bucketed); also sets the seed and the
        epoch whose draws :meth:`collate` makes."""
        self.seed, self.epoch = seed, epoch
        return token_budget_batches(self.src_sizes, max_tokens, max_sentences, seed, epoch, shuffle, exclude)

    def collate(self, indices: Sequence[int]) -> Dict[str, Any]:
        ids = np.asarray(indices, dtype=np.int64).reshape(-1)  # (B,) pieces
        rng = np.random.default_rng([self.seed, self.epoch, int(ids[0]) if len(ids) else 0])
        lengths = self.src_sizes[ids]
        words = np.asarray(self.data.tokens[flat_ranges(self.starts[ids], lengths)], dtype=np.int64)  # (N,)
        piece = np.repeat(np.arange(len(ids)), lengths)  # (N,)
        kept = self.keep[words] > rng.random(len(words))  # subsampling; the specials' keep is 0
        words, piece = words[kept], piece[kept]  # (n,)
        windows = rng.integers(1, self.window + 1, size=len(words))  # (n,) each centre's b
        centres, contexts = window_pairs(piece, windows, self.window)
        if self.mode == "skipgram":
            context = words[contexts][:, None]  # (P, 1)
            true = words[centres]  # (P,)
        else:
            context, true = self._cbow(words, centres, contexts)
        noise = self.noise(rng, (len(true), self.negative))  # (P, k)
        return {
            "id": torch.from_numpy(ids),
            "net_input": {"context": torch.from_numpy(context)},
            "target": torch.from_numpy(np.concatenate([true[:, None], noise], axis=1)),  # (P, 1 + k)
            "ntokens": len(words),
            "nsentences": len(ids),
            "raw_words": int(lengths.sum()),
            "sample_size": 1,  # the gradient is the sum over predictions (see the module docstring)
        }

    def noise(self, rng: np.random.Generator, shape: Tuple[int, ...]) -> np.ndarray:
        """Noise words of ``shape`` from the unigram distribution raised to 0.75 (alias method)."""
        column = rng.integers(0, len(self.noise_prob), size=shape)
        return np.where(rng.random(shape) < self.noise_prob[column], column, self.noise_alias[column])

    def _cbow(self, words: np.ndarray, centres: np.ndarray, contexts: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """(contexts ``(P, 2W)`` padded with ``<pad>``, centre words ``(P,)``): one row per centre
        word with at least one context, its contexts in window order."""
        first = np.flatnonzero(np.diff(centres, prepend=-1))  # centres come sorted: each one's first pair
        rows = centres[first]  # (P,) np.unique(centres) without its sort
        count = np.diff(np.append(first, len(centres)))  # (P,)
        col = np.arange(len(centres)) - np.repeat(first, count)
        out = np.full((len(rows), 2 * self.window), self.pad, dtype=np.int64)
        out[np.repeat(np.arange(len(rows)), count), col] = words[contexts]
        return out, words[rows]
