"""Parallel (source, target) sentences over memory-mapped token arrays, and their collation."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch

from seqkit.data.batching import batch_by_size, epoch_rng, gather, small_keys, sorted_order, token_budget_batches
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset


def pair_cost(src_len: np.ndarray, tgt_len: Optional[np.ndarray]) -> np.ndarray:
    """What an example costs in a token-budget batch: its source length, or its target's + 1 (the
    decoder reads a leading bos) when that is longer."""
    return src_len if tgt_len is None else np.maximum(src_len, tgt_len + 1)


def round_length(n: int, multiple: int, cap: int = 0) -> int:
    """``n`` rounded up to a multiple of ``multiple``, unless that passes ``cap`` (0: no cap)."""
    if multiple <= 1:
        return n
    up = -(-n // multiple) * multiple
    return n if cap and up > cap else up


def pad_right(seqs: Sequence[torch.Tensor], pad: int, prepend: Optional[int] = None, multiple: int = 1,
              cap: int = 0) -> torch.Tensor:
    """Stack 1-D tensors into ``(B, L)`` right-padded, L the longest rounded up to a multiple of
    ``multiple`` (not past ``cap``); ``prepend`` adds a first column."""
    extra = 0 if prepend is None else 1
    out = torch.full((len(seqs), round_length(max(len(s) for s in seqs) + extra, multiple, cap)), pad,
                     dtype=torch.long)
    if prepend is not None:
        out[:, 0] = prepend
    for i, s in enumerate(seqs):
        out[i, extra : extra + len(s)] = s
    return out


def pad_flat(flat: np.ndarray, lengths: np.ndarray, pad: int, prepend: Optional[int] = None, multiple: int = 1,
             cap: int = 0) -> np.ndarray:
    """:func:`pad_right` of sequences laid back to back: ``flat`` ``(sum(lengths),)`` int64 and
    ``lengths`` ``(B,)`` -> int64 ``(B, L)``, with one boolean-mask scatter instead of a row loop
    (a mask filled in row-major order takes the flat tokens in order)."""
    extra = 0 if prepend is None else 1
    longest = int(lengths.max()) if len(lengths) else 0
    out = np.full((len(lengths), round_length(longest + extra, multiple, cap)), pad, dtype=np.int64)  # (B, L)
    if prepend is not None:
        out[:, 0] = prepend
    body = out[:, extra:]  # (B, L - extra), a view
    body[np.arange(body.shape[1])[None, :] < lengths[:, None]] = flat
    return out


class PaddedBatches:
    """What every dataset's ``collate`` pads with: lengths rounded up to ``length_multiple`` (not
    past ``length_cap``, the model's positions), so batches come in few shapes. The trainer sets
    both (``dataset.required_seq_len_multiple``); 1 keeps every batch as long as its longest."""

    length_multiple: int = 1
    length_cap: int = 0

    def pad_batch(self, seqs: Sequence[torch.Tensor], pad: int, prepend: Optional[int] = None) -> torch.Tensor:
        return pad_right(seqs, pad, prepend, self.length_multiple, self.length_cap)

    def pad_flat(self, flat: np.ndarray, lengths: np.ndarray, pad: int, prepend: Optional[int] = None) -> torch.Tensor:
        """:meth:`pad_batch` of sequences laid back to back (``IndexedDataset.gather``)."""
        return torch.from_numpy(pad_flat(flat, lengths, pad, prepend, self.length_multiple, self.length_cap))


class EpochBatches(PaddedBatches):
    """A dataset whose examples have one cost length each (``src_sizes`` ``(N,)``) and whose
    ``collate`` draws per-epoch noise (masks, factorisation orders, spans): ``batches`` gives
    token-budget batches and records the epoch it is for."""

    src_sizes: np.ndarray
    epoch: int = 0

    def __len__(self) -> int:
        return len(self.src_sizes)

    def too_long(self, max_source: int, max_target: int) -> np.ndarray:
        return np.nonzero(self.src_sizes > max_source)[0]

    def batches(self, max_tokens: int, max_sentences: int = 0, seed: int = 1, epoch: int = 0,
                shuffle: bool = True, exclude: Optional[np.ndarray] = None) -> List[np.ndarray]:
        """Token-budget batches; also sets the epoch whose noise ``collate`` draws."""
        self.epoch = epoch
        return token_budget_batches(self.src_sizes, max_tokens, max_sentences, seed, epoch, shuffle, exclude)


class LanguagePairDataset(PaddedBatches):
    """``src``/``tgt`` are IndexedDatasets of ids ending with eos; ``tgt`` may be None (inference)."""

    def __init__(self, src: IndexedDataset, tgt: Optional[IndexedDataset], src_dict: Dictionary, tgt_dict: Dictionary,
                 source_bos: bool = False):
        """``source_bos``: every source starts with ``<s>`` (BART's sources do)."""
        if tgt is not None and len(src) != len(tgt):
            raise ValueError(f"source has {len(src)} sentences but target has {len(tgt)}")
        self.src, self.tgt, self.src_dict, self.tgt_dict = src, tgt, src_dict, tgt_dict
        self.source_bos = source_bos
        self.src_sizes = np.asarray(src.sizes, dtype=np.int64) + int(source_bos)
        self.tgt_sizes = np.asarray(tgt.sizes, dtype=np.int64) if tgt is not None else None

    def __len__(self) -> int:
        return len(self.src)

    def too_long(self, max_source: int, max_target: int) -> np.ndarray:
        """Indices of examples whose source or target exceeds the given lengths (eos included)."""
        bad = self.src_sizes > max_source
        if self.tgt_sizes is not None:
            bad |= self.tgt_sizes + 1 > max_target  # the decoder also reads a leading bos
        return np.nonzero(bad)[0]

    def batches(self, max_tokens: int, max_sentences: int = 0, seed: int = 1, epoch: int = 0,
                shuffle: bool = True, exclude: Optional[np.ndarray] = None) -> List[np.ndarray]:
        """Token-budget batches of example indices, length-bucketed; seeded per epoch when ``shuffle``."""
        rng = epoch_rng(seed, epoch) if shuffle else None
        order, cost = sorted_order(self.src_sizes, self.tgt_sizes, rng, exclude, cost_of=pair_cost)
        if cost is None:  # lengths past 16 bits: the costs gathered
            cost = gather(small_keys(pair_cost(self.src_sizes, self.tgt_sizes)), order)
        batches = batch_by_size(order, None, max_tokens, max_sentences, ordered_cost=cost)
        if shuffle:
            rng.shuffle(batches)
        return batches

    def collate(self, indices: Sequence[int]) -> Dict[str, Any]:
        """A batch: ids, source ``(B, S)`` right-padded with lengths, and when there are targets,
        ``target`` ``(B, T)``, ``prev_output_tokens`` ``(B, T)`` = bos + target shifted right, and
        ``target_index`` ``(N,)``: the flat positions in ``target.reshape(-1)`` of the N targets that
        are not padding (a loss over those rows only needs no host read of the device).
        ``src_padded`` (a host bool): whether any source row has padding, which lets a model that
        reads it (``forward_options``) drop its attention mask without asking the device.

        Vectorised: one gather of the token stream per side and a mask scatter per matrix."""
        ids = np.array(indices, dtype=np.int64).reshape(-1)  # (B,), a copy: the sample owns it
        pad, bos = self.src_dict.pad(), self.src_dict.bos()
        flat, lengths = self.src.gather(ids)  # (sum S_i,), (B,)
        src_tokens = self.pad_flat(flat, lengths, pad, prepend=bos if self.source_bos else None)  # (B, S)
        lengths = lengths + int(self.source_bos)
        sample: Dict[str, Any] = {
            "id": torch.from_numpy(ids),
            "net_input": {"src_tokens": src_tokens, "src_lengths": torch.from_numpy(lengths)},
            "nsentences": len(ids),
            "src_padded": bool(len(lengths)) and int(lengths.min()) < src_tokens.size(1),
        }
        if self.tgt is not None:
            flat, lengths = self.tgt.gather(ids)  # (N_all,), (B,)
            target = self.pad_flat(flat, lengths, pad)  # (B, T)
            sample["target"] = target
            # prev_output_tokens[t] = target[t - 1], starting from bos; the final eos is never an input
            inputs = np.ones(len(flat), dtype=bool)
            inputs[(np.cumsum(lengths) - 1)[lengths > 0]] = False  # each row's last token
            prev = self.pad_flat(flat[inputs], np.maximum(lengths - 1, 0), pad, prepend=self.tgt_dict.bos())  # (B, T)
            sample["net_input"]["prev_output_tokens"] = prev
            sample["ntokens"] = int(lengths.sum())
            sample["target_index"] = torch.from_numpy(np.flatnonzero(target.numpy() != self.tgt_dict.pad()))  # (N,)
        return sample


def collate_raw(token_lists: List[List[int]], pad: int) -> Dict[str, torch.Tensor]:
    """Source-only batch from lists of ids (interactive generation)."""
    src = [torch.tensor(t, dtype=torch.long) for t in token_lists]
    return {"src_tokens": pad_right(src, pad), "src_lengths": torch.tensor([len(s) for s in src])}
