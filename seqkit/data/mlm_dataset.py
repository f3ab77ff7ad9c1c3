"""Masked-LM samples over a language-modeling data folder's token stream (BERT, RoBERTa, ALBERT,
SpanBERT, ELECTRA).

A sample is a block of the stream (:func:`seqkit.data.lm_dataset.block_bounds`; each line ends
with ``</s>``) behind ``<s>``: ``<s> w w w </s> w w </s> ...``. With ``sentence_pairs`` the block is
cut at a line end (or, for a single long line, a random token) into ``A`` and ``B`` laid out as
the classification task lays out pairs, ``<s> A </s> B </s>`` with segment 0 up to A's ``</s>``:

- ``nsp`` (BERT): half of the samples keep the block's own B (label 1, "is next"), the others
  take the second half of another, random block (label 0);
- ``sop`` (ALBERT): half keep A then B (label 1), the others swap them (label 0).

Masking (:mod:`seqkit.data.noising`) is drawn per sample from ``default_rng([seed, epoch, i])``:
new masks every epoch (dynamic, RoBERTa) or, with ``mask_copies`` k >= 1, k fixed masked copies
of every block for the whole run (BERT's static masking, its data duplicated k times). Batches
carry ``masked_tokens`` ``(B, S)`` and the original ids of those positions as ``target`` ``(N,)``,
in row-major order, so models compute the vocabulary projection at the N masked positions only.

``dataset.pack`` trains on blocks of ``sample_break_mode`` eos or complete several to a row of one
length, each attending to itself only (:class:`seqkit.data.packing.PackedBlockDataset`; without
sentence pairs or span masking, whose labels and indices are kept per row).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import torch

from seqkit.core.errors import SeqkitError
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.data.lm_dataset import block_bounds
from seqkit.data.noising import NoiseSpecials, mask_tokens, span_mask_tokens
from seqkit.data.pair_dataset import EpochBatches

MASK = "<mask>"
PAIR_MODES = ("none", "nsp", "sop")
MASK_UNITS = ("token", "word", "span")


@dataclass
class MaskingOptions:
    """What :class:`MaskedLMDataset` needs of the task's config."""

    mask_prob: float = 0.15
    leave_unmasked_prob: float = 0.1
    random_token_prob: float = 0.1
    mask_unit: str = "token"  # token, word (whole-word masking) or span (SpanBERT)
    span_p: float = 0.2
    span_max: int = 10
    mask_copies: int = 0  # 0: dynamic masking; k: static, k fixed copies
    sentence_pairs: str = "none"  # none, nsp or sop


def word_start_table(dictionary: Dictionary, tokenizer_name: Optional[str]) -> np.ndarray:
    """``(V,)`` bool: does this symbol begin a word? sentencepiece pieces start a word with ``▁``,
    WordPiece continues one with ``##``, anything else (whitespace tokens) is a word of its own."""
    syms = dictionary.symbols
    if tokenizer_name and tokenizer_name.startswith("sentencepiece"):
        return np.array([s.startswith("\u2581") or i < 4 for i, s in enumerate(syms)])
    if tokenizer_name == "wordpiece":
        return np.array([not s.startswith("##") for s in syms])
    return np.ones(len(syms), dtype=bool)


class MaskedLMDataset(EpochBatches):
    """Blocks of ``data`` masked on the fly; see the module docstring for the layout."""

    def __init__(self, data: IndexedDataset, dictionary: Dictionary, specials: NoiseSpecials, tokens_per_sample: int,
                 break_mode: str, opts: MaskingOptions, word_starts: Optional[np.ndarray] = None, seed: int = 1):
        if opts.mask_unit not in MASK_UNITS:
            raise SeqkitError(f"task.mask_unit={opts.mask_unit!r}; valid: {', '.join(MASK_UNITS)}")
        if opts.sentence_pairs not in PAIR_MODES:
            raise SeqkitError(f"task.sentence_pairs={opts.sentence_pairs!r}; valid: {', '.join(PAIR_MODES)}")
        budget = tokens_per_sample - (3 if opts.sentence_pairs != "none" else 1)  # <s> (and two </s> for pairs)
        if budget < 2:
            raise SeqkitError(f"task.tokens_per_sample={tokens_per_sample} is too small for a masked-LM sample")
        self.data, self.dictionary, self.sp, self.opts = data, dictionary, specials, opts
        self.stream = data.tokens
        self.starts, self.ends = block_bounds(data.sizes, budget, break_mode)
        self.break_mode = break_mode  # dataset.pack: "none" blocks are rows of one length already, others are packed
        self.line_ends = np.asarray(data.offsets[1:], dtype=np.int64)  # stream positions after each line's eos
        self.word_starts = word_starts
        self.seed, self.epoch = seed, 0
        copies = max(1, opts.mask_copies)
        self.src_sizes = np.tile(self.ends - self.starts + (3 if opts.sentence_pairs != "none" else 1), copies)
        self.tgt_sizes = None

    # -- one sample ------------------------------------------------------------------------------
    def _rng(self, i: int) -> np.random.Generator:
        n = len(self.starts)
        if self.opts.mask_copies:  # static: copy i // n of block i % n, the same every epoch
            return np.random.default_rng([self.seed, 0, i // n, i % n])
        return np.random.default_rng([self.seed, self.epoch + 1, i])

    def _tokens(self, a: int, b: int) -> torch.Tensor:
        return torch.from_numpy(self.stream[a:b].astype(np.int64))

    def _pair(self, i: int, rng: np.random.Generator) -> Tuple[torch.Tensor, torch.Tensor, int]:
        """``<s> A </s> B </s>`` of block ``i``, its segments and the sentence label."""
        a, b = int(self.starts[i]), int(self.ends[i])
        inner = self.line_ends[(self.line_ends > a) & (self.line_ends < b)]  # line ends inside the block
        cut = int(rng.choice(inner)) if len(inner) else int(rng.integers(a + 1, b)) if b - a > 1 else b
        first, second = self._tokens(a, cut), self._tokens(cut, b)
        label = 1
        if self.opts.sentence_pairs == "nsp" and rng.random() < 0.5 and len(self.starts) > 1:
            j = int(rng.integers(len(self.starts) - 1))
            j += j >= i  # another block
            ja, jb = int(self.starts[j]), int(self.ends[j])
            second = self._tokens(ja + (jb - ja) // 2, jb)[: max(1, b - cut)]
            label = 0
        elif self.opts.sentence_pairs == "sop" and rng.random() < 0.5 and len(second):
            first, second, label = second, first, 0
        eos = torch.tensor([self.sp.eos])
        parts = [torch.tensor([self.sp.bos]), first]
        if not len(first) or int(first[-1]) != self.sp.eos:
            parts.append(eos)
        n_first = sum(len(p) for p in parts)
        parts.append(second)
        if not len(second) or int(second[-1]) != self.sp.eos:
            parts.append(eos)
        tokens = torch.cat(parts)
        segments = torch.zeros_like(tokens)
        segments[n_first:] = 1
        return tokens, segments, label

    def example(self, i: int) -> Dict[str, Any]:
        """Sample ``i`` before batching: ``input``, ``target`` (pad where not masked), segments,
        sentence label, and for span masking the span-boundary indices of each masked position."""
        rng = self._rng(i)
        block = i % len(self.starts)
        segments, label = None, None
        if self.opts.sentence_pairs != "none":
            tokens, segments, label = self._pair(block, rng)
        else:
            a, b = int(self.starts[block]), int(self.ends[block])
            tokens = torch.cat([torch.tensor([self.sp.bos]), self._tokens(a, b)])
        ws = None
        if self.opts.mask_unit in ("word", "span") and self.word_starts is not None:
            ws = torch.from_numpy(self.word_starts[tokens.numpy()])
        o = self.opts
        out: Dict[str, Any] = {"segments": segments, "label": label}
        if o.mask_unit == "span":
            m = span_mask_tokens(tokens, rng, self.sp, mask_prob=o.mask_prob, leave_unmasked_prob=o.leave_unmasked_prob,
                                 random_token_prob=o.random_token_prob, word_starts=ws, p=o.span_p, max_len=o.span_max)
            out.update(input=m.input, target=m.target, left=m.left, right=m.right, offset=m.offset)
        else:
            out["input"], out["target"] = mask_tokens(tokens, rng, self.sp, mask_prob=o.mask_prob,
                                                      leave_unmasked_prob=o.leave_unmasked_prob,
                                                      random_token_prob=o.random_token_prob, word_starts=ws)
        return out

    # -- packed rows (dataset.pack, seqkit.data.packing.PackedBlockDataset) -------------------------
    masked_lm = True  # packed rows carry masked_tokens (B, L) and the masked positions' ids (N,)

    @property
    def pad(self) -> int:
        return self.sp.pad

    def packing_refusal(self) -> Optional[str]:
        """Why these samples cannot be packed several to a row, or None."""
        if self.opts.sentence_pairs != "none":
            return f"task.sentence_pairs={self.opts.sentence_pairs} labels each row's pair (one pair a row)"
        if self.opts.mask_unit == "span":
            return "span masking's boundary indices are kept per row (task.mask_unit=span)"
        return None

    def flat_blocks(self, ids: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`example` of each index ``(B,)`` (sentence_pairs none, token or word masking), back to
        back: inputs and targets (``pad`` where not masked) ``(sum L,)`` int64 and the lengths ``(B,)``."""
        exs = [self.example(int(i)) for i in ids]
        lengths = np.array([len(e["input"]) for e in exs], dtype=np.int64)
        if not exs:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), lengths
        return torch.cat([e["input"] for e in exs]).numpy(), torch.cat([e["target"] for e in exs]).numpy(), lengths

    def collate(self, indices: Sequence[int]) -> Dict[str, Any]:
        """``src_tokens`` ``(B, S)``, ``masked_tokens`` ``(B, S)``, ``target`` ``(N,)`` (original ids of
        the masked positions, row-major), ``segments`` ``(B, S)`` and ``sentence_target`` ``(B,)`` for
        pairs, and for span masking ``sbo_left`` / ``sbo_right`` ``(N,)`` (flat indices into B * S,
        clamped into the row) and ``sbo_offset`` ``(N,)``."""
        indices = [int(i) for i in indices]
        exs = [self.example(i) for i in indices]
        pad = self.sp.pad
        src = self.pad_batch([e["input"] for e in exs], pad)  # (B, S)
        full_target = self.pad_batch([e["target"] for e in exs], pad)  # (B, S)
        masked = full_target.ne(pad)
        net_input: Dict[str, Any] = {"src_tokens": src, "src_lengths": torch.tensor([len(e["input"]) for e in exs]),
                                     "masked_tokens": masked}
        sample: Dict[str, Any] = {"id": torch.tensor(indices), "net_input": net_input, "target": full_target[masked],
                                  "nsentences": len(indices)}
        if self.opts.sentence_pairs != "none":
            net_input["segments"] = self.pad_batch([e["segments"] for e in exs], 0)
            sample["sentence_target"] = torch.tensor([e["label"] for e in exs])
        if self.opts.mask_unit == "span":
            S = src.size(1)
            for key in ("left", "right"):
                flat = [r * S + e[key].clamp(0, len(e["input"]) - 1) for r, e in enumerate(exs)]
                net_input[f"sbo_{key}"] = torch.cat(flat)  # (N,), in the same order as target
            net_input["sbo_offset"] = torch.cat([e["offset"] for e in exs])
        n = int(masked.sum())
        sample["ntokens"] = int(net_input["src_lengths"].sum())  # throughput: input tokens
        sample["sample_size"] = n  # the loss is per masked token
        return sample
