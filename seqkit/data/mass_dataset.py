"""MASS samples (Song et al. 2019): mask a contiguous span of a sentence, decode the span.

A sentence ``x_0 .. x_{n-1} </s>`` (one language's side of a parallel folder) becomes, with a span
of ``m = max(1, round(span_ratio * n))`` tokens starting at ``u`` (uniform over the places it fits,
``</s>`` never in it; drawn from ``default_rng([seed, epoch + 1, i])``):

- source: the sentence with ``x_u .. x_{u+m-1}`` replaced by ``<mask>``;
- decoder input (as long as the source): ``<mask>`` everywhere but the span, where it reads the
  span shifted right, ``<s> x_u .. x_{u+m-2}`` (the paper's Figure 1 masks the decoder's other
  positions the same way; its first span input is the token before the span, here ``<s>``, the
  token a translation decoder starts with);
- target: ``x_u .. x_{u+m-1}`` at the span's positions and padding elsewhere, so the loss (which
  skips padding) counts the span only.

Batches carry each row's language as ``src_langs`` and ``tgt_langs`` ``(B,)`` (the Transformer's
``model.num_langs`` table) and ``ntokens`` = the span tokens scored.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import numpy as np
import torch

from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.data.noising import NoiseSpecials
from seqkit.data.pair_dataset import EpochBatches


def mass_example(sentence: torch.Tensor, rng: np.random.Generator, sp: NoiseSpecials,
                 span_ratio: float = 0.5) -> Dict[str, Any]:
    """``source``, ``prev`` (decoder input), ``target`` ``(L,)`` and the span's ``start`` and
    ``length`` of one sentence ``(L,)`` ending with ``</s>``."""
    n = len(sentence) - 1 if len(sentence) > 1 else len(sentence)  # </s> stays out of the span (unless alone)
    m = min(n, max(1, int(round(span_ratio * n))))
    start = int(rng.integers(0, n - m + 1))
    end = start + m
    source = sentence.clone()
    source[start:end] = sp.mask
    prev = torch.full_like(sentence, sp.mask)
    prev[start] = sp.bos
    prev[start + 1 : end] = sentence[start : end - 1]
    target = torch.full_like(sentence, sp.pad)
    target[start:end] = sentence[start:end]
    return {"source": source, "prev": prev, "target": target, "start": start, "length": m}


class MassDataset(EpochBatches):
    """Every sentence of each language of ``langs`` (its side of the folder), MASS-masked on the fly."""

    def __init__(self, sides: Dict[str, IndexedDataset], langs: Sequence[str], specials: NoiseSpecials,
                 span_ratio: float = 0.5, seed: int = 1, static: bool = False):
        self.sides, self.langs, self.sp, self.span_ratio = sides, list(langs), specials, span_ratio
        self.seed, self.static, self.epoch = seed, static, 0
        self.lang = np.concatenate([np.full(len(sides[lang]), k) for k, lang in enumerate(self.langs)]).astype(np.int64)
        self.row = np.concatenate([np.arange(len(sides[lang])) for lang in self.langs]).astype(np.int64)
        self.src_sizes = np.concatenate([np.asarray(sides[lang].sizes, dtype=np.int64) for lang in self.langs])
        self.tgt_sizes = self.src_sizes

    def too_long(self, max_source: int, max_target: int) -> np.ndarray:
        return np.nonzero((self.src_sizes > max_source) | (self.src_sizes > max_target))[0]

    def packing_refusal(self) -> Optional[str]:
        return "MASS's samples carry one language per row"

    def example(self, i: int) -> Dict[str, Any]:
        rng = np.random.default_rng([self.seed, 0 if self.static else self.epoch + 1, i])
        sentence = self.sides[self.langs[int(self.lang[i])]][int(self.row[i])].long()
        return mass_example(sentence, rng, self.sp, self.span_ratio)

    def collate(self, indices: Sequence[int]) -> Dict[str, Any]:
        indices = [int(i) for i in indices]
        exs = [self.example(i) for i in indices]
        pad = self.sp.pad
        langs = torch.from_numpy(self.lang[indices])  # (B,)
        target = self.pad_batch([e["target"] for e in exs], pad)  # (B, T)
        net_input = {"src_tokens": self.pad_batch([e["source"] for e in exs], pad),
                     "src_lengths": torch.tensor([len(e["source"]) for e in exs]),
                     "prev_output_tokens": self.pad_batch([e["prev"] for e in exs], pad),
                     "src_langs": langs, "tgt_langs": langs}
        return {"id": torch.tensor(indices), "net_input": net_input, "target": target,
                "ntokens": int(sum(e["length"] for e in exs)), "nsentences": len(indices)}
