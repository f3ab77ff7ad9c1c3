"""Masking and noising transforms for masked-LM and denoising pretraining, one example at a time.

Each transform takes the 1-D LongTensor of ids of ONE example and an explicit
``numpy.random.Generator``, so an example's noise is a pure function of the seed: a collate calls
them with e.g. ``np.random.default_rng([seed, epoch, index])``. There is no global RNG use.

    mask_tokens        BERT / RoBERTa / ALBERT masking (80% <mask>, 10% random, 10% unchanged),
                       optionally whole-word (``word_starts``)
    span_mask_tokens   SpanBERT: geometric span lengths in words, plus span-boundary (SBO) indices
    token_mask, token_delete, text_infill, sentence_permute, document_rotate
                       BART's noises, composable (``compose``, ``BartNoise`` + ``bart_noise``)
    t5_span_corrupt    T5 span corruption with sentinels
    replaced_token_labels  ELECTRA's discriminator labels

Conventions:
- Counts are rounded half up, deterministically: ``_count(p, n) = floor(p * n + 0.5)``, at least 1
  when ``p > 0`` and ``n > 0`` (fairseq rounds probabilistically, ``int(p * n + rng.random())``;
  ours keeps the count a function of the length alone, which makes the rate exact per example).
- Masked-LM functions select only "real" symbols, ids in ``[first_real, vocab_size)``: never
  pad/bos/eos/unk (unk carries nothing to predict), ``<mask>`` or sentinels (appended to the
  dictionary after ``vocab_size``). Random replacements come from that same range.
- BART and T5 functions leave a leading bos and a trailing eos where they are and noise the body
  between them; inputs with an empty body come back unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from seqkit.core.errors import SeqkitError

Noise = Callable[[torch.Tensor, np.random.Generator], torch.Tensor]  # (tokens, rng) -> noised tokens


@dataclass(frozen=True)
class NoiseSpecials:
    """The ids the transforms need. Real symbols are ``[first_real, vocab_size)``."""

    mask: int  # <mask>, appended to the dictionary by the caller
    vocab_size: int  # end (exclusive) of the real symbols: len(dictionary) before <mask>/sentinels
    first_real: int = 4  # seqkit's Dictionary: pad=0, bos=1, eos=2, unk=3, then real symbols
    pad: int = 0
    bos: int = 1
    eos: int = 2
    sentinels: Tuple[int, ...] = ()  # T5's <extra_id_0>, <extra_id_1>, ...: sentinel k is sentinels[k]

    def __post_init__(self) -> None:
        if not 0 <= self.first_real < self.vocab_size:
            raise SeqkitError(f"need 0 <= first_real < vocab_size, got {self.first_real}, {self.vocab_size}")
        for name, i in [("mask", self.mask)] + [(f"sentinels[{k}]", s) for k, s in enumerate(self.sentinels)]:
            if self.first_real <= i < self.vocab_size:
                raise SeqkitError(f"{name}={i} lies among the real symbols [{self.first_real}, {self.vocab_size})")

    def is_real(self, tokens: torch.Tensor) -> torch.Tensor:
        """Bool, same shape: the positions that may be masked (and the ids random tokens come from)."""
        return (tokens >= self.first_real) & (tokens < self.vocab_size)


def _count(p: float, n: int) -> int:
    """``p * n`` rounded half up; at least 1 when both are positive."""
    if p <= 0 or n <= 0:
        return 0
    return min(n, max(1, math.floor(p * n + 0.5)))


def _random_real(rng: np.random.Generator, n: int, sp: NoiseSpecials) -> torch.Tensor:
    return torch.from_numpy(rng.integers(sp.first_real, sp.vocab_size, size=n, dtype=np.int64))


def word_starts_from_pieces(pieces: Sequence[str], *, wordpiece: bool = False) -> torch.Tensor:
    """Bool (len(pieces),): True where a word begins, for whole-word and span masking.

    sentencepiece (default): a piece starting with ``▁`` starts a word. WordPiece
    (``wordpiece=True``): every piece starts a word except ``##`` continuations. Either way the
    first piece, specials (``<...>``) and the piece after a special start words, so a special is
    never glued to its neighbours.
    """
    out: List[bool] = []
    prev_special = True
    for p in pieces:
        special = len(p) > 2 and p.startswith("<") and p.endswith(">")
        own = not p.startswith("##") if wordpiece else p.startswith("\u2581")
        out.append(special or prev_special or own)
        prev_special = special
    return torch.tensor(out, dtype=torch.bool)


def _units(tokens: torch.Tensor, sp: NoiseSpecials, word_starts: Optional[torch.Tensor]) -> Tuple[np.ndarray, int]:
    """Unit of each position (-1 where not maskable) and the number of units.

    A unit is one maskable token, or with ``word_starts`` one word (its maskable pieces).
    """
    maskable = sp.is_real(tokens).numpy()  # (T,)
    if word_starts is None:
        unit = np.cumsum(maskable) - 1
    else:
        if word_starts.shape != tokens.shape:
            raise SeqkitError(f"word_starts has shape {tuple(word_starts.shape)}, tokens {tuple(tokens.shape)}")
        word = np.cumsum(word_starts.numpy().astype(bool)) - 1  # (T,) leading continuations: word -1
        present = np.unique(word[maskable])  # words holding a maskable piece, sorted
        unit = np.searchsorted(present, word)
    unit = np.where(maskable, unit, -1)
    return unit, int(unit.max()) + 1 if maskable.any() else 0


def _per_position(per_unit: np.ndarray, unit: np.ndarray, fill: object) -> np.ndarray:
    """(T,) ``per_unit[unit]``, and ``fill`` where ``unit`` is -1."""
    if len(per_unit) == 0:
        return np.full(len(unit), fill, dtype=per_unit.dtype)
    return np.where(unit >= 0, per_unit[np.maximum(unit, 0)], fill)


def _corrupt(
    tokens: torch.Tensor,
    pos: np.ndarray,
    group: np.ndarray,
    rng: np.random.Generator,
    sp: NoiseSpecials,
    leave_unmasked_prob: float,
    random_token_prob: float,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """BERT's replacement at the selected ``pos``: one draw per ``group`` picks mask/random/keep.

    ``target`` holds the original id at ``pos`` and pad elsewhere, so the loss sees only those.
    """
    if leave_unmasked_prob < 0 or random_token_prob < 0 or leave_unmasked_prob + random_token_prob > 1:
        raise SeqkitError(f"bad leave_unmasked_prob={leave_unmasked_prob}, random_token_prob={random_token_prob}")
    p_mask = 1.0 - leave_unmasked_prob - random_token_prob
    u = rng.random(int(group.max()) + 1 if len(group) else 0)[group]  # (n_selected,)
    is_mask = u < p_mask
    is_rand = (u >= p_mask) & (u < p_mask + random_token_prob)
    inp = tokens.clone()
    idx = torch.from_numpy(pos)
    inp[idx[torch.from_numpy(is_mask)]] = sp.mask
    inp[idx[torch.from_numpy(is_rand)]] = _random_real(rng, int(is_rand.sum()), sp)
    target = torch.full_like(tokens, sp.pad)
    target[idx] = tokens[idx]
    return inp, target


def mask_tokens(
    tokens: torch.Tensor,
    rng: np.random.Generator,
    sp: NoiseSpecials,
    *,
    mask_prob: float = 0.15,
    leave_unmasked_prob: float = 0.1,
    random_token_prob: float = 0.1,
    word_starts: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """BERT masking: ``(input, target)``, both (T,).

    Exactly ``_count(mask_prob, units)`` units are selected, a unit being a maskable token, or a
    whole word with ``word_starts`` (then every maskable piece of a chosen word is selected). Each
    selected position independently becomes <mask> (1 - leave - random), a random real symbol
    (``random_token_prob``) or stays (``leave_unmasked_prob``).
    """
    unit, n_units = _units(tokens, sp, word_starts)
    chosen = np.zeros(n_units, dtype=bool)
    chosen[rng.choice(n_units, _count(mask_prob, n_units), replace=False)] = True
    pos = np.flatnonzero(_per_position(chosen, unit, False))
    return _corrupt(tokens, pos, np.arange(len(pos)), rng, sp, leave_unmasked_prob, random_token_prob)


@dataclass
class SpanMask:
    """SpanBERT's masked example. ``positions``, ``left``, ``right``, ``offset`` are (n_masked,).

    For the span-boundary objective a model reads the hidden states at ``left`` (just before the
    span) and ``right`` (just after) plus the embedding of ``offset`` (0-based place in the span)
    to predict ``target[positions]``. ``left`` is -1 / ``right`` is T only where a span touches the
    edge of an example without bos / eos.
    """

    input: torch.Tensor  # (T,)
    target: torch.Tensor  # (T,) original id where masked, pad elsewhere
    positions: torch.Tensor  # (n_masked,) the masked positions, increasing
    left: torch.Tensor  # (n_masked,)
    right: torch.Tensor  # (n_masked,)
    offset: torch.Tensor  # (n_masked,)


def span_lengths(rng: np.random.Generator, n: int, p: float = 0.2, max_len: int = 10) -> np.ndarray:
    """(n,) span lengths from Geometric(p) truncated to ``[1, max_len]`` and renormalised.

    This is SpanBERT's distribution (mean 3.8 for p=0.2, max 10); ``min(Geometric, max_len)``
    would instead pile the tail onto ``max_len`` (mean 4.46).
    """
    probs = p * (1 - p) ** np.arange(max_len)
    return rng.choice(np.arange(1, max_len + 1), size=n, p=probs / probs.sum())


def _fit_lengths(lens: np.ndarray, total: int) -> np.ndarray:
    """The shortest prefix of ``lens`` reaching ``total``, its last length cut so the sum is exact."""
    cum = np.cumsum(lens)
    m = int(np.searchsorted(cum, total)) + 1  # first index where cum >= total, plus one
    lens = lens[:m].copy()
    lens[-1] -= int(cum[m - 1]) - total
    return lens


def span_mask_tokens(
    tokens: torch.Tensor,
    rng: np.random.Generator,
    sp: NoiseSpecials,
    *,
    mask_prob: float = 0.15,
    leave_unmasked_prob: float = 0.1,
    random_token_prob: float = 0.1,
    word_starts: Optional[torch.Tensor] = None,
    p: float = 0.2,
    max_len: int = 10,
) -> SpanMask:
    """SpanBERT masking: spans of ``span_lengths`` units (words with ``word_starts``).

    ``_count(mask_prob, units)`` units are covered exactly: lengths are drawn until they reach it and
    the last is cut. Spans never overlap or touch (one unmasked unit at least between two), so
    every boundary is an unmasked token; they are placed uniformly among such arrangements. The
    80/10/10 choice is drawn once per span, as SpanBERT does (random tokens still per position).
    A non-maskable token inside a span (unk, a separator) stays as it is.
    """
    unit, n_units = _units(tokens, sp, word_starts)
    k = _count(mask_prob, n_units)
    span_of_unit = np.full(n_units, -1)
    if k:
        lens = rng.permutation(_fit_lengths(span_lengths(rng, k, p, max_len), k))  # cut one anywhere
        free = n_units - k
        if len(lens) > free + 1:  # too crowded to keep spans apart (mask_prob > ~0.5): merge the last
            lens = np.concatenate([lens[:free], [lens[free:].sum()]])
        gaps = np.sort(rng.choice(free + 1, len(lens), replace=False))  # free units before each span
        # distinct gap slots leave >= 1 free unit between consecutive spans
        starts = gaps + np.cumsum(lens) - lens
        span_of_unit[np.repeat(starts, lens) + _within(lens)] = np.repeat(np.arange(len(lens)), lens)
    span = _per_position(span_of_unit, unit, -1)  # (T,)
    pos = np.flatnonzero(span >= 0)  # (n_masked,)
    sid = span[pos]  # non-decreasing
    first = pos[np.searchsorted(sid, sid, side="left")]
    last = pos[np.searchsorted(sid, sid, side="right") - 1]
    inp, target = _corrupt(tokens, pos, sid, rng, sp, leave_unmasked_prob, random_token_prob)
    as_t = torch.from_numpy
    return SpanMask(inp, target, as_t(pos), as_t(first - 1), as_t(last + 1), as_t(pos - first))


def _within(lens: np.ndarray) -> np.ndarray:
    """(sum(lens),) each item's 0-based offset inside its run: lens [2, 3] -> [0, 1, 0, 1, 2]."""
    ends = np.cumsum(lens)
    return np.arange(int(ends[-1]) if len(lens) else 0) - np.repeat(ends - lens, lens)


# ---------------------------------------------------------------- BART


def _split(tokens: torch.Tensor, sp: NoiseSpecials) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(head, body, tail)``: the leading bos and trailing eos (each maybe empty) and what lies between."""
    a = 1 if len(tokens) and int(tokens[0]) == sp.bos else 0
    b = len(tokens) - 1 if len(tokens) > a and int(tokens[-1]) == sp.eos else len(tokens)
    return tokens[:a], tokens[a:b], tokens[b:]


def token_mask(tokens: torch.Tensor, rng: np.random.Generator, sp: NoiseSpecials, p: float) -> torch.Tensor:
    """BART token masking: each body token independently becomes <mask> with probability ``p``."""
    head, body, tail = _split(tokens, sp)
    body = body.masked_fill(torch.from_numpy(rng.random(len(body)) < p), sp.mask)
    return torch.cat([head, body, tail])


def token_delete(tokens: torch.Tensor, rng: np.random.Generator, sp: NoiseSpecials, p: float) -> torch.Tensor:
    """BART token deletion: each body token is independently dropped with probability ``p``."""
    head, body, tail = _split(tokens, sp)
    return torch.cat([head, body[torch.from_numpy(rng.random(len(body)) >= p)], tail])


def text_infill(
    tokens: torch.Tensor, rng: np.random.Generator, sp: NoiseSpecials, p: float = 0.3, poisson_lambda: float = 3.0
) -> torch.Tensor:
    """BART text infilling: spans with Poisson(``poisson_lambda``) lengths, each replaced by ONE <mask>.

    Spans cover exactly ``_count(p, body)`` tokens (lengths drawn until they reach it, the last
    cut). A length-0 span inserts a <mask> (as fairseq turns them into insertion noise), so the
    model also learns how many tokens are missing. Spans are placed uniformly at random among
    the kept tokens; two may abut, giving two <mask> in a row.
    """
    head, body, tail = _split(tokens, sp)
    n = len(body)
    k = _count(p, n)
    if k == 0:
        return tokens.clone()
    drawn = rng.poisson(poisson_lambda, size=k)
    while drawn.sum() < k:  # zeros are possible, so k draws may fall short
        drawn = np.concatenate([drawn, rng.poisson(poisson_lambda, size=k)])
    lens = _fit_lengths(drawn, k)  # (m,) the last is > 0
    m = len(lens)
    # m spans and n - k kept tokens in a uniformly random order: each item emits one token
    is_span = np.zeros(n - k + m, dtype=bool)
    is_span[rng.choice(n - k + m, m, replace=False)] = True
    used = np.ones(n - k + m, dtype=np.int64)
    used[is_span] = lens  # body tokens each item consumes
    start = torch.from_numpy(np.cumsum(used) - used)
    out = torch.where(torch.from_numpy(is_span), torch.tensor(sp.mask), body[start.clamp(max=n - 1)])
    return torch.cat([head, out, tail])


def sentence_permute(
    tokens: torch.Tensor, rng: np.random.Generator, sp: NoiseSpecials, full_stop_ids: Sequence[int]
) -> torch.Tensor:
    """BART sentence permutation: the body cut after each full stop, sentences shuffled.

    A trailing piece without a full stop counts as a sentence too.
    """
    head, body, tail = _split(tokens, sp)
    stops = torch.isin(body, torch.tensor(list(full_stop_ids), dtype=body.dtype)).numpy()
    ends = np.flatnonzero(stops) + 1
    if len(ends) == 0 or ends[-1] != len(body):
        ends = np.concatenate([ends, [len(body)]])
    sizes = np.diff(np.concatenate([[0], ends])).tolist()
    sents = torch.split(body, sizes)
    return torch.cat([head, *[sents[i] for i in rng.permutation(len(sents))], tail])


def document_rotate(tokens: torch.Tensor, rng: np.random.Generator, sp: NoiseSpecials) -> torch.Tensor:
    """BART document rotation: the body starts at a uniformly random token of it (maybe the first)."""
    head, body, tail = _split(tokens, sp)
    if len(body) == 0:
        return tokens.clone()
    return torch.cat([head, torch.roll(body, -int(rng.integers(len(body)))), tail])


def compose(*fns: Noise) -> Noise:
    """One noise applying ``fns`` left to right with the same rng (bind options with ``functools.partial``)."""

    def apply(tokens: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        for fn in fns:
            tokens = fn(tokens, rng)
        return tokens

    return apply


@dataclass(frozen=True)
class BartNoise:
    """BART's noises; the paper's best setting is ``permute_sentences=True, infill_ratio=0.3``."""

    permute_sentences: bool = False  # shuffle sentences (needs full_stop_ids)
    full_stop_ids: Tuple[int, ...] = ()  # ids that end a sentence, e.g. the id of "."
    mask_ratio: float = 0.0  # token masking probability
    delete_ratio: float = 0.0  # token deletion probability
    infill_ratio: float = 0.0  # fraction of tokens text infilling covers
    poisson_lambda: float = 3.0  # mean infilled span length
    rotate: bool = False  # document rotation


def bart_noise(tokens: torch.Tensor, rng: np.random.Generator, sp: NoiseSpecials, cfg: BartNoise) -> torch.Tensor:
    """``cfg``'s noises in fairseq DenoisingDataset's order: permute sentences, then masking /
    deletion / infilling (its ``add_whole_word_mask`` with insertions), then rotation."""
    if cfg.permute_sentences and not cfg.full_stop_ids:
        raise SeqkitError("BartNoise.permute_sentences needs full_stop_ids")
    fns: List[Noise] = []
    if cfg.permute_sentences:
        fns.append(lambda t, r: sentence_permute(t, r, sp, cfg.full_stop_ids))
    if cfg.mask_ratio > 0:
        fns.append(lambda t, r: token_mask(t, r, sp, cfg.mask_ratio))
    if cfg.delete_ratio > 0:
        fns.append(lambda t, r: token_delete(t, r, sp, cfg.delete_ratio))
    if cfg.infill_ratio > 0:
        fns.append(lambda t, r: text_infill(t, r, sp, cfg.infill_ratio, cfg.poisson_lambda))
    if cfg.rotate:
        fns.append(lambda t, r: document_rotate(t, r, sp))
    return compose(*fns)(tokens, rng)


# ---------------------------------------------------------------- T5


def _segment(rng: np.random.Generator, items: int, parts: int) -> np.ndarray:
    """(parts,) positive lengths summing to ``items``, uniform over such compositions (T5's
    ``_random_segmentation``: ``parts - 1`` distinct cut points among the ``items - 1`` gaps)."""
    cuts = np.sort(rng.choice(items - 1, parts - 1, replace=False)) + 1
    return np.diff(np.concatenate([[0], cuts, [items]]))


def t5_span_corrupt(
    tokens: torch.Tensor,
    rng: np.random.Generator,
    sp: NoiseSpecials,
    noise_density: float = 0.15,
    mean_span_length: float = 3.0,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """T5 span corruption: ``(input, target)``.

    Over the body of n tokens: ``noise = _count(noise_density, n)`` clipped to ``[1, n - 1]``,
    ``spans = max(1, round_half_up(noise / mean_span_length))`` (at most min(noise, n - noise,
    len(sentinels))); noise and kept lengths are each split into ``spans`` positive parts and
    interleaved starting with kept tokens, as T5's ``random_spans_noise_mask``.
    input = bos? kept0 <s0> kept1 <s1> ... eos?; target = <s0> span0 <s1> span1 ... eos.
    A body shorter than 2 tokens comes back unchanged with target ``[eos]``.
    """
    if not sp.sentinels:
        raise SeqkitError("t5_span_corrupt needs NoiseSpecials.sentinels")
    head, body, tail = _split(tokens, sp)
    n = len(body)
    eos = torch.tensor([sp.eos])
    if n < 2:
        return tokens.clone(), eos
    noise = min(max(_count(noise_density, n), 1), n - 1)
    spans = min(max(1, math.floor(noise / mean_span_length + 0.5)), noise, n - noise, len(sp.sentinels))
    lens = np.stack([_segment(rng, n - noise, spans), _segment(rng, noise, spans)], 1).reshape(-1)  # (2*spans,)
    starts = np.cumsum(lens) - lens  # kept0, noise0, kept1, noise1, ...
    is_noise = torch.from_numpy(np.repeat(np.tile([False, True], spans), lens))  # (n,)
    sentinel = torch.tensor(sp.sentinels[:spans], dtype=body.dtype)
    kept_starts, noise_starts = torch.from_numpy(starts[0::2]), torch.from_numpy(starts[1::2])
    # input: each noise span's first token becomes its sentinel, the rest of the span goes
    inp = body.clone()
    inp[noise_starts] = sentinel
    keep = ~is_noise
    keep[noise_starts] = True
    # target: the mirror image, each kept run's first token becomes the next span's sentinel
    tgt = body.clone()
    tgt[kept_starts] = sentinel
    take = is_noise.clone()
    take[kept_starts] = True
    return torch.cat([head, inp[keep], tail]), torch.cat([tgt[take], eos])


# ---------------------------------------------------------------- ELECTRA


def replaced_token_labels(original: torch.Tensor, corrupted: torch.Tensor, pad: int) -> torch.Tensor:
    """Bool, same shape: True where ``corrupted`` differs from ``original`` (never at pads).

    ELECTRA's discriminator target: a generator sample that happens to equal the original
    counts as original, so labels come from comparing ids, not from where masks were.
    """
    if original.shape != corrupted.shape:
        raise SeqkitError(f"shapes differ: {tuple(original.shape)} vs {tuple(corrupted.shape)}")
    return (original != corrupted) & (original != pad)
