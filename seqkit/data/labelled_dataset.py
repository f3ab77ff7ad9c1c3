"""Sentences (or sentence pairs) with a label each, or with a tag per word, and their collation.

Stored by ``seqkit-preprocess task=classification|tagging`` as memory-mapped arrays:

- ``{split}.input``: ``<s> a ... </s>`` or, for pairs, ``<s> a ... </s> b ... </s>`` (``<s>`` is the
  [CLS] position, ``</s>`` the [SEP]).
- ``{split}.label`` (absent for a split without labels):
  classification: one id per sentence (the line number in ``dict.label.txt``);
  tagging: one value per input position: 0 = not the first piece of a word (or ``<s>``/``</s>``),
  1 = the first piece of a word whose tag is unknown (a split to predict), 2 + k = first piece of a
  word tagged with label k. The loss and the metrics only see first pieces.

:func:`encode_example` turns one raw example into this layout; the preprocessor and the task (raw
text at inference) both call it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from seqkit.data.dictionary import UNK, Dictionary
from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.data.pair_dataset import LanguagePairDataset, pad_right

IGNORE = -1  # target value of positions (or sentences) without a label: skipped by loss and metrics
NOT_A_WORD_START, UNLABELLED_WORD_START, FIRST_TAG = 0, 1, 2


def encode_example(tok: Any, d: Dictionary, texts: Tuple[str, ...], per_token: bool) -> Tuple[List[int], List[int]]:
    """ids ``<s> a </s> [b </s>]`` and, for tagging (``texts`` the words), the position of each
    word's first piece; ``tok`` is the folder's tokenizer (``tok.encode(text)`` -> pieces)."""
    ids, starts = [d.bos()], []
    if per_token:
        for word in texts:
            starts.append(len(ids))
            ids.extend(d.index(p) for p in (tok.encode(word) or [UNK]))  # a word always keeps a position
        ids.append(d.eos())
        return ids, starts
    for text in texts:
        ids.extend(d.index(p) for p in tok.encode(text))
        ids.append(d.eos())
    return ids, starts


def segments_of(src_tokens: torch.Tensor, eos: int, pad: int) -> torch.Tensor:
    """``(B, S)`` segment ids: 0 up to and including the first ``</s>``, 1 after it, 0 on padding."""
    is_eos = src_tokens.eq(eos).long()
    after_first = (is_eos.cumsum(dim=1) - is_eos).gt(0)  # strictly after the first </s>
    return (after_first & src_tokens.ne(pad)).long()


def tag_targets(stored: torch.Tensor) -> torch.Tensor:
    """Stored per-position tag values -> targets: label ids at tagged word starts, else IGNORE."""
    t = stored.long() - FIRST_TAG
    return t.masked_fill(t < 0, IGNORE)


class LabelledDataset(LanguagePairDataset):
    """Inputs and optional labels; batching (``batches``, ``too_long``) is the translation
    dataset's with no target side."""

    def __init__(self, inputs: IndexedDataset, labels: Optional[IndexedDataset], src_dict: Dictionary,
                 per_token: bool, pairs: bool):
        super().__init__(inputs, None, src_dict, src_dict)
        if labels is not None and len(labels) != len(inputs):
            raise ValueError(f"{len(inputs)} inputs but {len(labels)} labels")
        self.labels, self.per_token, self.pairs = labels, per_token, pairs

    def word_starts(self, i: int) -> torch.Tensor:
        """Positions of the first pieces of example ``i``'s words (tagging)."""
        if self.labels is None:
            raise ValueError("word starts are stored with the labels; this split has none")
        return torch.nonzero(self.labels[i] >= UNLABELLED_WORD_START).squeeze(1)

    def collate(self, indices: Sequence[int]) -> Dict[str, Any]:
        """A batch: ``src_tokens`` ``(B, S)``, ``src_lengths`` ``(B,)``, ``segments`` ``(B, S)`` for
        pairs; ``ntokens``, the input tokens; with labels, ``target`` ``(B,)`` or ``(B, S)`` (IGNORE
        where nothing is scored) and ``sample_size``, the number of scored targets."""
        ids = np.array(indices, dtype=np.int64).reshape(-1)  # (B,)
        d = self.src_dict
        flat, lengths = self.src.gather(ids)  # one read of the token stream, no row loop
        tokens = self.pad_flat(flat, lengths, d.pad())  # (B, S)
        net_input: Dict[str, torch.Tensor] = {"src_tokens": tokens, "src_lengths": torch.from_numpy(lengths)}
        if self.pairs:
            net_input["segments"] = segments_of(tokens, d.eos(), d.pad())
        sample: Dict[str, Any] = {"id": torch.from_numpy(ids), "net_input": net_input, "nsentences": len(ids)}
        if self.labels is not None:
            stored, counts = self.labels.gather(ids)
            if self.per_token:
                target = tag_targets(self.pad_flat(stored, counts, NOT_A_WORD_START))  # (B, S)
            else:
                target = torch.from_numpy(stored[np.cumsum(counts) - counts])  # (B,): each row's first value
            sample["target"] = target
            sample["sample_size"] = int(target.ne(IGNORE).sum())  # the loss is a sum over these
        sample["ntokens"] = int(tokens.ne(d.pad()).sum())  # input tokens: the throughput figure
        return sample


def collate_inputs(token_lists: List[List[int]], src_dict: Dictionary, pairs: bool) -> Dict[str, torch.Tensor]:
    """``net_input`` for raw examples already encoded with ``<s>``/``</s>`` (prediction)."""
    tokens = pad_right([torch.tensor(t, dtype=torch.long) for t in token_lists], src_dict.pad())
    out = {"src_tokens": tokens, "src_lengths": torch.tensor([len(t) for t in token_lists], dtype=torch.long)}
    if pairs:
        out["segments"] = segments_of(tokens, src_dict.eos(), src_dict.pad())
    return out
