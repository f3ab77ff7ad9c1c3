"""Language-model samples: a split's token stream cut into blocks (fairseq's TokenBlockDataset).

The stream is every line's ids back to back, each line ending with eos (an empty line is a lone
eos). A block scores the stream's tokens ``[a, b)`` and reads each one's predecessor: input
``stream[a-1 : b-1]`` (eos stands before the split's first token, as after any line), target
``stream[a : b]``. So a model sees ``</s>`` where a line starts, and a prompt is ``</s> w1 ... wn``.
Without ``eos_prefix`` (an imported GPT-2) nothing stands before the split's first token, which is
then read but not scored, as ``transformers`` scores a text.

``sample_break_mode``:
    none      blocks of exactly ``tokens_per_sample`` tokens, across line ends (the last may be shorter)
    eos       one line per block (a line longer than ``tokens_per_sample`` is cut into several)
    complete  as many whole lines as fit in ``tokens_per_sample`` (a longer line is cut, alone)

``dataset.pack`` trains on ``eos`` and ``complete`` blocks several to a row of one length, each
block attending to itself only (:class:`seqkit.data.packing.PackedBlockDataset`).

``context_window`` (evaluation): each block's input also reads up to that many tokens before the
block, whose targets are not scored (``pad``): every token is scored once, with at least
``context_window`` tokens of left context where the stream has them.

``prefix_length`` K (a prefix LM, T5's objective; Raffel et al., 2020): a block's first K tokens are
read, not scored; only the continuation after them is (a block of L tokens scores its last
``L - K``). ``prefix_random``: each block's K is drawn instead, uniformly from ``1 .. L - 1`` (a
random split point), from ``default_rng([seed, epoch])``: new splits every epoch, the same again
on a resumed epoch. With ``bidirectional``, ``collate`` also gives each row's leading positions that
read one another, ``src_bidirectional`` ``(B,)``: every input position before the first scored
target's and that one itself (context, the predecessor of the block and its prefix), so the
position that predicts the first continuation token has read the whole prefix and nothing after it.
Without it the same tokens are scored, the prefix read causally: the causal LM's side of the
comparison.

``streams`` S > 0 (Transformer-XL's order, ``task.stream_batches``; fairseq's and Dai et al.'s): the
blocks (``none`` mode: consecutive pieces of the stream) are laid out as S streams of ``ceil(N / S)``
consecutive blocks, the last stream shorter, and batch k takes block k of every stream that has
one (:func:`stream_batches`), in order, whatever the epoch: each row continues the row of the batch
before, so a model can carry memory across batches. ``collate`` then adds ``src_blocks`` ``(B,)``,
each row's block index. Every block is read once per epoch.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from seqkit.core.errors import SeqkitError
from seqkit.data.batching import token_budget_batches
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset, flat_ranges
from seqkit.data.pair_dataset import PaddedBatches

BREAK_MODES = ("none", "eos", "complete")


def stream_batches(blocks: int, streams: int) -> List[np.ndarray]:
    """Batches of ``blocks`` block indices in ``streams`` streams: stream s holds blocks
    ``[s * n, (s + 1) * n)`` with ``n = ceil(blocks / streams)``; batch k is block k of each stream
    that has one (the last stream may be shorter; it is always the last row)."""
    n = -(-blocks // max(streams, 1))
    starts = np.arange(0, blocks, max(n, 1), dtype=np.int64)  # (S,) each stream's first block
    return [starts[starts + k < np.minimum(starts + n, blocks)] + k for k in range(n)]


def block_bounds(sizes: np.ndarray, block: int, mode: str) -> Tuple[np.ndarray, np.ndarray]:
    """``(starts, ends)`` in the stream of the lines ``sizes``: each block is ``[start, end)``."""
    if block < 1:
        raise SeqkitError(f"task.tokens_per_sample must be >= 1, got {block}")
    sizes = np.asarray(sizes, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    total = int(offsets[-1])
    if mode == "none":
        starts = np.arange(0, total, block, dtype=np.int64)
        return starts, np.minimum(starts + block, total)
    if mode == "eos":  # line i gives ceil(size_i / block) blocks
        n = -(-sizes // block)  # (lines,)
        first = np.repeat(offsets[:-1], n)
        within = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
        starts = first + within * block
        return starts, np.minimum(starts + block, np.repeat(offsets[1:], n))
    if mode != "complete":
        raise SeqkitError(f"task.sample_break_mode={mode!r}; valid: {', '.join(BREAK_MODES)}")
    starts_l: List[int] = []
    ends_l: List[int] = []
    start = end = 0
    for size in sizes.tolist():  # greedy: whole lines while they fit
        if end > start and end - start + size > block:
            starts_l.append(start)
            ends_l.append(end)
            start = end
        if size > block:  # a line longer than a block: cut alone
            for a in range(end, end + size, block):
                starts_l.append(a)
                ends_l.append(min(a + block, end + size))
            start = end = end + size
        else:
            end += size
    if end > start:
        starts_l.append(start)
        ends_l.append(end)
    return np.asarray(starts_l, dtype=np.int64), np.asarray(ends_l, dtype=np.int64)


class TokenBlockDataset(PaddedBatches):
    """Blocks of a split's token stream; ``collate`` makes ``src_tokens`` ``(B, L)`` (inputs),
    ``target`` ``(B, L)`` (next tokens, ``pad`` where not scored) and the scored-token counts."""

    def __init__(self, data: IndexedDataset, dictionary: Dictionary, tokens_per_sample: int,
                 break_mode: str = "none", context_window: int = 0, eos_prefix: bool = True,
                 prefix_length: int = 0, prefix_random: bool = False, bidirectional: bool = False,
                 streams: int = 0):
        if prefix_length >= tokens_per_sample:
            raise SeqkitError(f"prefix_length={prefix_length} leaves no token of a block of tokens_per_sample="
                              f"{tokens_per_sample} to score; keep it below {tokens_per_sample}")
        self.data, self.dictionary = data, dictionary
        self.stream = data.tokens  # memory-mapped, all lines back to back
        self.starts, self.ends = block_bounds(data.sizes, tokens_per_sample, break_mode)
        self.break_mode = break_mode  # dataset.pack: "none" blocks are rows of one length already, others are packed
        self.input_starts = np.maximum(self.starts - context_window, 0)
        self.src_sizes = self.ends - self.input_starts  # (N,) input length of each block
        self.tgt_sizes = None
        self.pad, self.eos = dictionary.pad(), dictionary.eos()
        self.eos_prefix = eos_prefix
        self.prefix_length, self.prefix_random, self.bidirectional = prefix_length, prefix_random, bidirectional
        self._draws = self._draw(1, 0)
        self.streams = streams
        if streams and (break_mode != "none" or context_window or prefix_length or prefix_random or not eos_prefix):
            raise SeqkitError("task.stream_batches reads the stream as consecutive blocks: it needs "
                              "sample_break_mode=none, no context_window, no prefix_length or prefix_random and "
                              "eos_prefix=true; drop those or task.stream_batches")

    def _draw(self, seed: int, epoch: int) -> np.ndarray:
        """One uniform ``[0, 1)`` per block ``(N,)`` for the random prefixes of ``epoch`` (empty when fixed)."""
        return np.random.default_rng([seed, epoch]).random(len(self)) if self.prefix_random else np.zeros(0)

    def prefixes(self, ids: np.ndarray) -> np.ndarray:
        """Prefix length K of each block ``ids`` ``(B,)``: ``prefix_length``, or drawn from ``1 .. L - 1``."""
        if not self.prefix_random:
            return np.full(len(ids), self.prefix_length, dtype=np.int64)
        L = self.ends[ids] - self.starts[ids]  # (B,)
        return np.minimum(1 + (self._draws[ids] * (L - 1)).astype(np.int64), np.maximum(L - 1, 0))

    def packing_refusal(self) -> Optional[str]:
        """Why these blocks cannot be packed several to a row (``dataset.pack``), or None."""
        if self.streams:
            return "task.stream_batches rows continue one another batch after batch; drop dataset.pack"
        if self.prefix_length or self.prefix_random:
            return ("a prefix LM's rows hold one block each (its mask reads the block's prefix both ways); "
                    "use sample_break_mode=none, whose blocks are rows of one length already")
        return None

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def num_scored(self) -> int:
        """Tokens scored over the whole dataset: the stream's length, less each block's prefix (fixed prefixes)."""
        first = self.starts if self.eos_prefix else np.maximum(self.starts, 1)  # stream[0]: read, not scored
        return int(np.maximum(self.ends - first - self.prefix_length, 0).sum())

    def too_long(self, max_source: int, max_target: int) -> np.ndarray:
        """Blocks whose input exceeds the model's positions."""
        return np.nonzero(self.src_sizes > max_source)[0]

    def batches(self, max_tokens: int, max_sentences: int = 0, seed: int = 1, epoch: int = 0,
                shuffle: bool = True, exclude: Optional[np.ndarray] = None) -> List[np.ndarray]:
        """Token-budget batches of block indices; seeded per epoch when ``shuffle``. Also draws the
        epoch's random prefixes (``prefix_random``), which ``collate`` then reads."""
        self._draws = self._draw(seed, epoch)
        if self.streams:  # the same order every epoch; the budget is the streams' count
            return stream_batches(len(self), self.streams)
        return token_budget_batches(self.src_sizes, max_tokens, max_sentences, seed, epoch, shuffle, exclude)

    def block(self, i: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Input and target ids of block ``i`` ``(L,)``; unscored context targets are ``pad``."""
        s, a, b = int(self.input_starts[i]), int(self.starts[i]), int(self.ends[i])
        target = torch.from_numpy(self.stream[s:b].astype(np.int64))
        before = self.eos if s == 0 else int(self.stream[s - 1])
        inputs = torch.cat([torch.tensor([before]), target[:-1]])
        first = max(a, 1) if s == 0 and not self.eos_prefix else a  # stream[0] is never scored then
        target[: first - s + int(self.prefixes(np.array([i]))[0])] = self.pad  # context and prefix
        if s == 0 and not self.eos_prefix and len(target) > 1:  # no </s> before the first token: read, not scored
            return inputs[1:], target[1:]
        if s == 0 and not self.eos_prefix:
            target[0] = self.pad
        return inputs, target

    def flat_blocks(self, ids: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`block` of each index ``(B,)``, back to back: inputs and targets ``(sum L,)`` int64
        and the lengths ``(B,)``, vectorised (one read of the stream for the targets, one for the
        inputs, no row loop). What :meth:`collate` pads and packed rows
        (:class:`seqkit.data.packing.PackedBlockDataset`) lay out."""
        s, a, b = self.spans(ids)
        lengths = b - s  # (B,)
        pos = flat_ranges(s, lengths)  # (sum L,) stream positions of the targets
        target = self.stream[pos].astype(np.int64)  # (sum L,) stream positions pos
        target[pos < np.repeat(a, lengths)] = self.pad  # context and prefix: read, not scored
        inputs = self.stream[np.maximum(pos - 1, 0)].astype(np.int64)  # each token's predecessor
        inputs[pos == 0] = self.eos  # eos stands before the split's first token
        return inputs, target, lengths

    def spans(self, ids: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Stream positions of blocks ``ids`` ``(B,)``: the first target read, the first scored (after
        any context and prefix) and the end, each ``(B,)``."""
        s, a, b = self.input_starts[ids], self.starts[ids], self.ends[ids]  # (B,) each
        if not self.eos_prefix:  # nothing before the stream's first token: read, not scored (see block)
            first = s == 0
            a = np.where(first, np.maximum(a, 1), a)
            s = np.where(first & (b > 1), 1, s)
        return s, np.minimum(a + self.prefixes(ids), b), b

    def collate(self, indices: Sequence[int]) -> Dict[str, Any]:
        """:meth:`block` of each index, padded: ``src_tokens`` and ``target`` ``(B, L)``."""
        ids = np.array(indices, dtype=np.int64).reshape(-1)  # (B,)
        inputs, target, lengths = self.flat_blocks(ids)
        target_m = self.pad_flat(target, lengths, self.pad)  # (B, L)
        scored = int((target != self.pad).sum())
        net_input = {
            "src_tokens": self.pad_flat(inputs, lengths, self.pad),  # (B, L)
            "src_lengths": torch.from_numpy(lengths),
        }
        if self.bidirectional:  # (B,) up to and including the position predicting the first scored token
            s, a, _ = self.spans(ids)
            net_input["src_bidirectional"] = torch.from_numpy(np.minimum(a - s + 1, lengths))
        if self.streams:  # (B,) which block of the stream each row is: a memory reads on where it left off
            net_input["src_blocks"] = torch.from_numpy(ids.copy())
        return {
            "id": torch.from_numpy(ids),
            "net_input": net_input,
            "target": target_m,
            "ntokens": scored,
            "sample_size": scored,
            "nsentences": len(ids),
        }
