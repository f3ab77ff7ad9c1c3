"""Packed training rows (``dataset.pack``): several sentence pairs in each row of one fixed length.

Every packed batch has the same shape: ``(B, S)`` sources and ``(B, T)`` targets, B = max_tokens //
the row length. Pair i's source and target sit in the same row index on each side, in the same
order, so the k-th sentence of a row on one side is the k-th on the other. The sample carries what
the model's document masks need (:mod:`seqkit.models.modules.document_masks`):

    src_segments (B, S), tgt_segments (B, T)    the sentence's index in its row, -1 at padding
    src_positions (B, S), tgt_positions (B, T)  0 at each sentence's first token (0 at padding)

Packing (:func:`pack_rows`) is a pure function of (seed, epoch), as the unpacked batches are, so
exact resume is unchanged. On Tatoeba de-en (16k joint BPE) rows of 256 tokens carry 2.4% padding
and rows of 512 1.8%, at 16k- and 64k-token batches (see docs/gpu.md).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from seqkit.core.errors import SeqkitError
from seqkit.data.batching import epoch_rng
from seqkit.data.pair_dataset import LanguagePairDataset

log = logging.getLogger("seqkit.packing")

DEFAULT_LENGTH = 512  # row length when dataset.pack_length is 0 (and the model's positions allow it)


def row_lengths(src_sizes: np.ndarray, tgt_sizes: np.ndarray, length: int, multiple: int = 8) -> Tuple[int, int]:
    """``(source, target)`` row lengths: the side with more tokens in all gets ``length``, the other
    as many in proportion to the two sides' totals, rounded up to a multiple (not past ``length``),
    so that both sides of a row fill alike."""
    src_total, tgt_total = max(int(src_sizes.sum()), 1), max(int(tgt_sizes.sum()), 1)
    short = length * min(src_total, tgt_total) / max(src_total, tgt_total)
    short = min(length, -(-int(np.ceil(short)) // multiple) * multiple)
    return (length, short) if src_total >= tgt_total else (short, length)


def packing_order(src_sizes: np.ndarray, tgt_sizes: np.ndarray, src_len: int, tgt_len: int,
                  rng: Optional[np.random.Generator]) -> np.ndarray:
    """All pairs, largest first (by the larger share of a row they take), ties in random order;
    within a run of one size, alternately the most source-heavy and the most target-heavy left, so
    that consecutive pairs even out the two sides."""
    n = len(src_sizes)
    order = rng.permutation(n) if rng is not None else np.arange(n)
    size = np.maximum(src_sizes * tgt_len, tgt_sizes * src_len)  # (n,) share of a row, times src_len * tgt_len
    lean = src_sizes * tgt_len - tgt_sizes * src_len  # (n,) > 0: takes more of the source row
    order = order[np.argsort(lean[order], kind="stable")]
    order = order[np.argsort(-size[order], kind="stable")]
    sz = size[order]
    starts = np.flatnonzero(np.r_[True, sz[1:] != sz[:-1]])  # first position of each run of one size
    counts = np.diff(np.r_[starts, n])
    first = np.repeat(starts, counts)  # (n,) start of each position's run
    k, m = np.arange(n) - first, np.repeat(counts, counts)  # index within the run, run length
    return order[first + np.where(k % 2 == 0, k // 2, m - 1 - k // 2)]


def pack_rows(src_sizes: np.ndarray, tgt_sizes: np.ndarray, src_len: int, tgt_len: int,
              rng: Optional[np.random.Generator] = None) -> List[np.ndarray]:
    """Pair indices per row, every pair once (each must fit a row: ``src_sizes <= src_len`` and
    ``tgt_sizes <= tgt_len``). A row takes the largest pairs left while they fit on both sides,
    then fills the rest with the smallest ones (one binary search each over running sums: a loop
    over rows, not pairs)."""
    order = packing_order(src_sizes, tgt_sizes, src_len, tgt_len, rng)
    cs = np.concatenate([[0], np.cumsum(src_sizes[order])])  # (n + 1,) running sums in packing order
    ct = np.concatenate([[0], np.cumsum(tgt_sizes[order])])
    rows: List[np.ndarray] = []
    lo, hi = 0, len(order)  # order[lo:hi] is not placed yet
    while lo < hi:
        big = min(int(np.searchsorted(cs, cs[lo] + src_len, "right")),
                  int(np.searchsorted(ct, ct[lo] + tgt_len, "right"))) - 1
        big = max(min(big, hi), lo + 1)  # order[lo:big]: the largest that fit
        room_s, room_t = src_len - (cs[big] - cs[lo]), tgt_len - (ct[big] - ct[lo])
        small = max(int(np.searchsorted(cs, cs[hi] - room_s, "left")),
                    int(np.searchsorted(ct, ct[hi] - room_t, "left")), big)
        rows.append(np.concatenate([order[lo:big], order[small:hi]]))  # order[small:hi]: the smallest that fit
        lo, hi = big, small
    return rows


def batches_of_rows(rows: List[np.ndarray], per_batch: int, rng: Optional[np.random.Generator]) -> List[np.ndarray]:
    """Rows (in random order when ``rng``) grouped ``per_batch`` at a time; each batch an int64
    array ``(n, 2)`` of (pair index, row in the batch). Rows that do not fill a last batch are left
    out: their pairs are packed again, among the others, next epoch."""
    order = rng.permutation(len(rows)) if rng is not None else np.arange(len(rows))
    out = []
    for b in range(len(rows) // per_batch):
        chosen = [rows[i] for i in order[b * per_batch : (b + 1) * per_batch]]
        row_of = np.repeat(np.arange(per_batch), [len(r) for r in chosen])
        out.append(np.stack([np.concatenate(chosen), row_of], axis=1))
    return out


def _gather(data: Any, ids: np.ndarray) -> np.ndarray:
    """Sequences ``ids`` of an IndexedDataset back to back ``(sum of lengths,)`` int64."""
    offsets = np.asarray(data.offsets, dtype=np.int64)
    lengths = offsets[ids + 1] - offsets[ids]
    ends = np.cumsum(lengths)
    flat = np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64) + np.repeat(offsets[ids] - (ends - lengths), lengths)
    return np.asarray(data.tokens[flat], dtype=np.int64)


def _layout(rows: np.ndarray, lengths: np.ndarray, row_len: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where the tokens of sentences (in row order, ``rows`` ``(n,)`` non-decreasing) go in a
    ``(B, row_len)`` matrix: flat destinations ``(N,)``, segment ids ``(N,)`` and positions ``(N,)``."""
    ends = np.cumsum(lengths)
    starts = ends - lengths  # (n,) start of each sentence in the flat tokens
    first = np.searchsorted(rows, rows, "left")  # (n,) each row's first sentence
    in_row = starts - starts[first]  # (n,) start of each sentence in its row
    positions = np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64) - np.repeat(starts, lengths)
    dest = np.repeat(rows * row_len + in_row, lengths) + positions
    return dest, np.repeat(np.arange(len(rows)) - first, lengths), positions


def _matrix(B: int, L: int, fill: int, dest: np.ndarray, values: np.ndarray) -> torch.Tensor:
    out = np.full(B * L, fill, dtype=np.int64)
    out[dest] = values
    return torch.from_numpy(out.reshape(B, L))


class PackedPairDataset:
    """A :class:`LanguagePairDataset` in packed rows: ``rows`` per batch of ``src_len`` / ``tgt_len``
    tokens. Pairs longer than a row (or the model's positions) are ``too_long``: the trainer skips
    and counts them (``dataset.skip_invalid_size_inputs``)."""

    def __init__(self, base: LanguagePairDataset, src_len: int, tgt_len: int, rows: int):
        self.base, self.src_len, self.tgt_len, self.rows = base, src_len, tgt_len, rows
        self.src_sizes, self.tgt_sizes = base.src_sizes, base.tgt_sizes
        self.left_out = 0  # pairs of the last epoch's rows that filled no batch

    def __len__(self) -> int:
        return len(self.base)

    def too_long(self, max_source: int, max_target: int) -> np.ndarray:
        bad = (self.src_sizes > min(max_source, self.src_len)) | (self.tgt_sizes > self.tgt_len)
        return np.nonzero(bad | (self.tgt_sizes + 1 > max_target))[0]  # as unpacked: the decoder reads a bos

    def batches(self, max_tokens: int = 0, max_sentences: int = 0, seed: int = 1, epoch: int = 0,
                shuffle: bool = True, exclude: Optional[np.ndarray] = None) -> List[np.ndarray]:
        """The epoch's batches, each ``(n, 2)`` (pair index, row); a pure function of (seed, epoch).
        ``max_tokens`` and ``max_sentences`` were read when the rows were sized."""
        rng = epoch_rng(seed, epoch) if shuffle else None
        keep = (self.src_sizes <= self.src_len) & (self.tgt_sizes <= self.tgt_len)  # (N,) fits a row
        if exclude is not None and len(exclude):
            keep[exclude] = False
        ids = np.flatnonzero(keep)
        rows = [ids[r] for r in pack_rows(self.src_sizes[ids], self.tgt_sizes[ids], self.src_len, self.tgt_len, rng)]
        out = batches_of_rows(rows, self.rows, rng)
        if not out and len(ids):
            raise SeqkitError(f"dataset.pack=true: the training set fills {len(rows)} rows of {self.src_len}/{self.tgt_len} "
                              f"tokens, less than one batch of {self.rows}; lower dataset.max_tokens or dataset.pack_length")
        self.left_out = len(ids) - sum(len(b) for b in out)
        log.info("packed %d pairs into %d rows of %d/%d tokens: %d batches of %d rows; %d pairs in the rows left over "
                 "wait for another epoch", len(ids), len(rows), self.src_len, self.tgt_len, len(out), self.rows,
                 self.left_out)
        return out

    def collate(self, batch: Sequence[Any]) -> Dict[str, Any]:
        """``batch`` ``(n, 2)`` -> the sample of an unpacked batch, in ``(B, S)`` / ``(B, T)`` rows, with
        ``src_segments``, ``src_positions``, ``tgt_segments``, ``tgt_positions`` in ``net_input``;
        ``src_lengths`` ``(B,)`` are the real tokens of each row, ``target_index`` ``(N,)`` the flat
        positions of the real targets in ``target.reshape(-1)``."""
        batch = np.asarray(batch, dtype=np.int64).reshape(-1, 2)
        ids, rows = batch[:, 0], batch[:, 1]
        d, B, S, T = self.base, self.rows, self.src_len, self.tgt_len
        pad, bos = d.src_dict.pad(), d.tgt_dict.bos()
        src = _gather(d.src, ids)
        if d.source_bos:  # <s> before each source
            lengths = d.src_sizes[ids]
            with_bos = np.full(int(lengths.sum()), d.src_dict.bos(), dtype=np.int64)
            body = np.ones(len(with_bos), dtype=bool)
            body[np.cumsum(lengths) - lengths] = False
            with_bos[body] = src
            src = with_bos
        dest, segments, positions = _layout(rows, d.src_sizes[ids], S)
        tgt = _gather(d.tgt, ids)
        tgt_lengths = d.tgt_sizes[ids]
        prev = np.roll(tgt, 1)  # bos + each target but its last token
        prev[np.cumsum(tgt_lengths) - tgt_lengths] = bos
        t_dest, t_segments, t_positions = _layout(rows, tgt_lengths, T)
        net_input = {
            "src_tokens": _matrix(B, S, pad, dest, src),  # (B, S)
            "src_lengths": torch.from_numpy(np.bincount(rows, weights=d.src_sizes[ids], minlength=B).astype(np.int64)),
            "prev_output_tokens": _matrix(B, T, pad, t_dest, prev),  # (B, T)
            "src_segments": _matrix(B, S, -1, dest, segments),
            "src_positions": _matrix(B, S, 0, dest, positions),
            "tgt_segments": _matrix(B, T, -1, t_dest, t_segments),
            "tgt_positions": _matrix(B, T, 0, t_dest, t_positions),
        }
        return {
            "id": torch.from_numpy(ids.copy()),
            "net_input": net_input,
            "target": _matrix(B, T, pad, t_dest, tgt),  # (B, T)
            "target_index": torch.from_numpy(t_dest),  # (N,) increasing
            "ntokens": int(tgt_lengths.sum()),
            "nsentences": len(ids),
            "src_padded": True,
        }


def pack_training_set(dataset: Any, model: Any, max_tokens: int, max_sentences: int, pack_length: int,
                      criterion: Any = None) -> Any:
    """``dataset.pack=true``: the training set in packed rows, ``dataset`` itself where its blocks
    are rows of one length already, or a one-line :class:`SeqkitError` saying why it cannot be."""
    mode = getattr(dataset, "break_mode", None)
    if mode is not None:  # language-model and masked-LM blocks of the token stream
        if mode != "none":
            raise SeqkitError(f"dataset.pack=true: task.sample_break_mode={mode} gives blocks of many lengths; "
                              "sample_break_mode=none cuts the stream into blocks of one length (what packing gives)")
        log.info("dataset.pack: the blocks of sample_break_mode=none are rows of one length already")
        return dataset
    if not isinstance(dataset, LanguagePairDataset) or dataset.tgt_sizes is None:
        raise SeqkitError(f"dataset.pack=true: {type(dataset).__name__} batches cannot be packed (rows of several "
                          "sentences with document masks are built for translation pairs)")
    refusal = getattr(model, "packing_refusal", None)
    reason = (refusal() if refusal is not None
              else f"model {type(model).__name__} takes no document masks (the Transformer does)")
    if not reason and getattr(criterion, "teacher", None) is not None:
        reason = "distillation's teacher outputs are kept per sentence, one sentence a row"
    if reason:
        raise SeqkitError(f"dataset.pack=true: {reason}")
    if max_sentences:
        raise SeqkitError("dataset.pack=true: dataset.max_sentences does not apply to packed rows (a batch holds "
                          "dataset.max_tokens // dataset.pack_length rows); leave it 0")
    length = min(pack_length or min(max(model.max_positions()), DEFAULT_LENGTH), max_tokens)
    src_len, tgt_len = row_lengths(dataset.src_sizes, dataset.tgt_sizes, length)
    packed = PackedPairDataset(dataset, src_len, tgt_len, max_tokens // length)
    longer = int(((dataset.src_sizes > src_len) | (dataset.tgt_sizes > tgt_len)).sum())
    log.info("dataset.pack: batches of %d rows of %d source / %d target tokens; %d pairs are longer than a row",
             packed.rows, src_len, tgt_len, longer)
    return packed
