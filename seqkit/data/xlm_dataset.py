"""Cross-lingual masked-LM samples (XLM, Lample & Conneau 2019) over the two sides of a parallel folder.

Two kinds of sample, mixed in one dataset (token-budget batches draw from both):

- MLM: one sentence of one language, ``<s> w w w </s>``, positions 0.., every token's language id
  that language's;
- TLM: a pair laid out as one stream, ``<s> src </s> <s> tgt </s>``: positions restart at 0 at
  the target's ``<s>`` and the language ids switch there (the paper's Figure 1), so the model can
  attend to the other language to fill a mask.

Masking (:func:`seqkit.data.noising.mask_tokens`, BERT's): ``mask_prob`` of the real tokens (on
both sides of a TLM stream), of which ``1 - leave - random`` become ``<mask>``, ``random`` a random
real symbol and ``leave`` stay; drawn from ``default_rng([seed, epoch + 1, i])`` (new masks each
epoch; ``static``: the same every time, for validation). Batches carry the language ids as the
encoder's ``segments`` ``(B, S)`` (a BERT-family model's segment table, one row per language),
``src_positions`` ``(B, S)``, ``masked_tokens`` ``(B, S)`` and ``target`` ``(N,)``, as
:mod:`seqkit.data.mlm_dataset` does.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import torch

from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.data.noising import NoiseSpecials, mask_tokens
from seqkit.data.pair_dataset import EpochBatches

MLM, TLM = 0, 1


class XLMDataset(EpochBatches):
    """MLM samples of each language in ``mlm``, then TLM samples of the pairs ``tlm`` (source, target)."""

    def __init__(self, sides: Dict[str, IndexedDataset], langs: Sequence[str], mlm: Sequence[str],
                 tlm: Optional[Tuple[str, str]], specials: NoiseSpecials, mask_prob: float = 0.15,
                 leave_unmasked_prob: float = 0.1, random_token_prob: float = 0.1, seed: int = 1, static: bool = False):
        self.sides, self.langs, self.tlm, self.sp = sides, list(langs), tlm, specials
        self.probs = (mask_prob, leave_unmasked_prob, random_token_prob)
        self.seed, self.static, self.epoch = seed, static, 0
        kinds, langs_of, rows, sizes = [], [], [], []
        for lang in mlm:
            n = len(sides[lang])
            kinds.append(np.full(n, MLM)), langs_of.append(np.full(n, self.langs.index(lang)))
            rows.append(np.arange(n)), sizes.append(np.asarray(sides[lang].sizes, dtype=np.int64) + 1)
        if tlm is not None:
            src, tgt = sides[tlm[0]], sides[tlm[1]]
            n = len(src)
            kinds.append(np.full(n, TLM)), langs_of.append(np.full(n, self.langs.index(tlm[0])))
            rows.append(np.arange(n))
            sizes.append(np.asarray(src.sizes, dtype=np.int64) + np.asarray(tgt.sizes, dtype=np.int64) + 2)
        self.kind, self.lang, self.row = (np.concatenate(a).astype(np.int64) for a in (kinds, langs_of, rows))
        self.src_sizes = np.concatenate(sizes).astype(np.int64)
        self.tgt_sizes = None

    def packing_refusal(self) -> Optional[str]:
        return "XLM's samples carry language ids and restarting positions per row"

    def _sentence(self, lang: str, row: int) -> torch.Tensor:
        """``<s>`` + sentence ``row`` of ``lang`` (ending with ``</s>``)."""
        ids = self.sides[lang][row].long()
        return torch.cat([torch.tensor([self.sp.bos]), ids])

    def stream(self, i: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample ``i`` before masking: tokens, language ids and positions, each ``(L,)``."""
        row = int(self.row[i])
        if self.kind[i] == MLM:
            tokens = self._sentence(self.langs[int(self.lang[i])], row)
            return tokens, torch.full_like(tokens, int(self.lang[i])), torch.arange(len(tokens))
        assert self.tlm is not None
        src, tgt = (self._sentence(lang, row) for lang in self.tlm)
        langs = torch.cat([torch.full_like(src, self.langs.index(self.tlm[0])),
                           torch.full_like(tgt, self.langs.index(self.tlm[1]))])
        return torch.cat([src, tgt]), langs, torch.cat([torch.arange(len(src)), torch.arange(len(tgt))])

    def example(self, i: int) -> Dict[str, torch.Tensor]:
        """``input`` (masked), ``target`` (original ids at masked positions, pad elsewhere), ``langs``, ``positions``."""
        tokens, langs, positions = self.stream(i)
        rng = np.random.default_rng([self.seed, 0 if self.static else self.epoch + 1, i])
        p, leave, rand = self.probs
        inp, target = mask_tokens(tokens, rng, self.sp, mask_prob=p, leave_unmasked_prob=leave, random_token_prob=rand)
        return {"input": inp, "target": target, "langs": langs, "positions": positions}

    def collate(self, indices: Sequence[int]) -> Dict[str, Any]:
        """``src_tokens``, ``segments`` (language ids), ``src_positions``, ``masked_tokens`` ``(B, S)``;
        ``target`` ``(N,)``: the masked positions' original ids, row-major."""
        indices = [int(i) for i in indices]
        exs = [self.example(i) for i in indices]
        pad = self.sp.pad
        src = self.pad_batch([e["input"] for e in exs], pad)  # (B, S)
        full_target = self.pad_batch([e["target"] for e in exs], pad)  # (B, S)
        masked = full_target.ne(pad)
        lengths = torch.tensor([len(e["input"]) for e in exs])
        net_input = {"src_tokens": src, "src_lengths": lengths, "masked_tokens": masked,
                     "segments": self.pad_batch([e["langs"] for e in exs], 0),
                     "src_positions": self.pad_batch([e["positions"] for e in exs], 0)}
        return {"id": torch.tensor(indices), "net_input": net_input, "target": full_target[masked],
                "nsentences": len(indices), "ntokens": int(lengths.sum()), "sample_size": int(masked.sum())}
