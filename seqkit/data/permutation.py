"""Permutation-LM samples (XLNet, Yang et al. 2019) over a language-modeling folder's token stream.

A sample is a block of the stream (:func:`seqkit.data.lm_dataset.block_bounds`; each line ends with
``</s>``) behind ``<s>``, as the masked LM's are: ``<s> w w w </s> w w </s>``, n tokens. Fine-tuning
reads a sentence as ``<s> a </s>``, the last ``</s>`` standing where XLNet puts ``<cls>``.

Its factorisation order (section 2.2): ``<s>`` first, then a random permutation of positions
1..n-1, drawn from ``default_rng([seed, epoch + 1, i])`` for training (a new order every epoch) and
``default_rng([seed, 0, i])`` for the other splits (the same at every validation). ``rank[p]`` is
the place of position p in the order. ``<s>`` leads it because it is the same symbol at the same
place in every sample: predicting it would teach nothing, and every position may read it.

Partial prediction (section 2.3): only the last ``c = max(1, (n - 1) // K)`` positions of the order
are predicted (``rank >= n - c``), each from the positions before it in the order; the first ones
serve as context only. K is 6 or 7 in the paper (``task.partial_prediction``).

Batches (:meth:`PermutationLMDataset.collate`): ``src_tokens`` ``(B, S)``, ``src_lengths`` ``(B,)``,
``perm_rank`` ``(B, S)`` int64 (padding: S, after every real position), ``target_positions``
``(B, S)`` bool and ``target`` ``(N,)``, the predicted positions' ids in row-major order.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import numpy as np
import torch

from seqkit.core.errors import SeqkitError
from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.data.lm_dataset import block_bounds
from seqkit.data.pair_dataset import EpochBatches


def factorization_rank(n: int, rng: np.random.Generator) -> np.ndarray:
    """``(n,)`` int64: each position's place in a random order of ``n`` positions that starts with
    position 0 (``<s>``)."""
    order = np.concatenate([[0], 1 + rng.permutation(n - 1)]).astype(np.int64)  # order[k]: the k-th position
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    return rank


def predicted_positions(rank: np.ndarray, k: int) -> np.ndarray:
    """``(n,)`` bool: the last ``max(1, (n - 1) // k)`` positions of the order ``rank`` (partial prediction)."""
    n = len(rank)
    return rank >= n - max(1, (n - 1) // k)


class PermutationLMDataset(EpochBatches):
    """Blocks of ``data`` with a seeded factorisation order each; see the module docstring."""

    def __init__(self, data: IndexedDataset, bos: int, pad: int, tokens_per_sample: int, break_mode: str,
                 partial_prediction: int, seed: int = 1, fixed_orders: bool = False):
        """``fixed_orders``: the same order at every pass (validation); else a new one each epoch."""
        if tokens_per_sample < 3:
            raise SeqkitError(f"task.tokens_per_sample={tokens_per_sample} is too small for a permutation-LM sample "
                              "(<s> and at least two tokens)")
        self.stream, self.bos, self.pad = data.tokens, bos, pad
        self.starts, self.ends = block_bounds(data.sizes, tokens_per_sample - 1, break_mode)  # <s> takes one
        self.break_mode = break_mode  # dataset.pack: "none" blocks are rows of one length already
        self.k, self.seed, self.fixed, self.epoch = partial_prediction, seed, fixed_orders, 0
        self.src_sizes = self.ends - self.starts + 1
        self.tgt_sizes = None

    def example(self, i: int) -> Dict[str, torch.Tensor]:
        """Sample ``i``: ``tokens`` ``(n,)``, ``rank`` ``(n,)`` and ``predicted`` ``(n,)`` bool."""
        a, b = int(self.starts[i]), int(self.ends[i])
        tokens = np.concatenate([[self.bos], self.stream[a:b].astype(np.int64)])
        rng = np.random.default_rng([self.seed, 0 if self.fixed else self.epoch + 1, i])
        rank = factorization_rank(len(tokens), rng)
        return {"tokens": torch.from_numpy(tokens), "rank": torch.from_numpy(rank),
                "predicted": torch.from_numpy(predicted_positions(rank, self.k))}

    def collate(self, indices: Sequence[int]) -> Dict[str, Any]:
        """The batch of the module docstring; ``sample_size`` is N, the predicted tokens."""
        indices = [int(i) for i in indices]
        exs = [self.example(i) for i in indices]
        src = self.pad_batch([e["tokens"] for e in exs], self.pad)  # (B, S)
        S = src.size(1)
        rank = self.pad_batch([e["rank"] for e in exs], S)  # (B, S): padding after every real position
        predicted = self.pad_batch([e["predicted"].long() for e in exs], 0).bool()  # (B, S)
        lengths = torch.tensor([len(e["tokens"]) for e in exs])
        net_input = {"src_tokens": src, "src_lengths": lengths, "perm_rank": rank, "target_positions": predicted}
        target = src[predicted]  # (N,)
        return {"id": torch.tensor(indices), "net_input": net_input, "target": target, "nsentences": len(indices),
                "ntokens": int(lengths.sum()), "sample_size": int(target.numel())}

    def packing_refusal(self) -> Optional[str]:
        """Why these samples cannot be packed several to a row, or None."""
        return "each row holds one sample's factorisation order (sample_break_mode=none blocks are rows of one length)"
