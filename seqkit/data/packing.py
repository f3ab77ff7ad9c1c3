"""Packed training rows (``dataset.pack``): several sentence pairs in each row of one fixed length.

Every packed batch has the same shape: ``(B, S)`` sources and ``(B, T)`` targets, B = max_tokens //
the row length. Pair i's source and target sit in the same row index on each side, in the same
order, so the k-th sentence of a row on one side is the k-th on the other. The sample carries what
the model's document masks need (:mod:`seqkit.models.modules.document_masks`):

    src_segments (B, S), tgt_segments (B, T)    the sentence's index in its row, -1 at padding
    src_positions (B, S), tgt_positions (B, T)  0 at each sentence's first token (0 at padding)

and ``fixed_shape=True``, which has the loss take all ``B*T`` target rows, padding weighted 0
(:func:`seqkit.criteria.cross_entropy.fused_smoothed_nll`), rather than an index of the real ones
whose length would change from batch to batch.

Language-model and masked-LM blocks of ``task.sample_break_mode`` eos or complete pack on one side
alone (:class:`PackedBlockDataset`): ``src_tokens``, ``src_segments``, ``src_positions`` and the
targets ``(B, L)`` (masked-LM: the masked ids ``(N,)``), each block attending to itself only
(causally for a language model), as in a row of its own.

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
from seqkit.data import orderkernels
from seqkit.data.batching import epoch_rng
from seqkit.data.indexed_dataset import flat_ranges
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
    order = orderkernels.permutation(rng, n) if rng is not None else np.arange(n)
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


def pack_rows(src_sizes: np.ndarray, tgt_sizes: Optional[np.ndarray], src_len: int, tgt_len: int,
              rng: Optional[np.random.Generator] = None) -> List[np.ndarray]:
    """Pair indices per row, every pair once (each must fit a row: ``src_sizes <= src_len`` and
    ``tgt_sizes <= tgt_len``). A row takes the largest pairs left while they fit on both sides,
    then fills the rest with the smallest ones (one binary search each over running sums: a loop
    over rows, not pairs). ``tgt_sizes`` None: one side (language-model blocks), ``src_len`` long."""
    if tgt_sizes is None:  # both sides the same: the two-sided packing is then the one-sided one
        tgt_sizes, tgt_len = src_sizes, src_len
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


def epoch_batches(src_sizes: np.ndarray, tgt_sizes: Optional[np.ndarray], src_len: int, tgt_len: int, per_batch: int,
                  rng: Optional[np.random.Generator], exclude: Optional[np.ndarray]) -> Tuple[List[np.ndarray], int]:
    """An epoch's packed batches (:func:`pack_rows` then :func:`batches_of_rows`) of the pairs (or,
    ``tgt_sizes`` None, blocks) that fit a row and are not in ``exclude``, and how many of them are
    left out (in rows that fill no batch)."""
    keep = src_sizes <= src_len  # (N,) fits a row
    if tgt_sizes is not None:
        keep &= tgt_sizes <= tgt_len
    if exclude is not None and len(exclude):
        keep[exclude] = False
    ids = np.flatnonzero(keep)
    tgt = tgt_sizes[ids] if tgt_sizes is not None else None
    rows = [ids[r] for r in pack_rows(src_sizes[ids], tgt, src_len, tgt_len, rng)]
    out = batches_of_rows(rows, per_batch, rng)
    what = "pairs" if tgt_sizes is not None else "blocks"
    lengths = f"{src_len}/{tgt_len}" if tgt_sizes is not None else f"{src_len}"
    if not out and len(ids):
        raise SeqkitError(f"dataset.pack=true: the training set fills {len(rows)} rows of {lengths} tokens, less than "
                          f"one batch of {per_batch}; lower dataset.max_tokens or dataset.pack_length")
    left_out = len(ids) - sum(len(b) for b in out)
    log.info("packed %d %s into %d rows of %s tokens: %d batches of %d rows; %d %s in the rows left over wait for "
             "another epoch", len(ids), what, len(rows), lengths, len(out), per_batch, left_out, what)
    return out, left_out


def _layout(rows: np.ndarray, lengths: np.ndarray, row_len: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where the tokens of sentences (in row order, ``rows`` ``(n,)`` non-decreasing) go in a
    ``(B, row_len)`` matrix: flat destinations ``(N,)``, segment ids ``(N,)`` and positions ``(N,)``."""
    starts = np.cumsum(lengths) - lengths  # (n,) start of each sentence in the flat tokens
    first = np.searchsorted(rows, rows, "left")  # (n,) each row's first sentence
    in_row = starts - starts[first]  # (n,) start of each sentence in its row
    positions = flat_ranges(np.zeros_like(starts), lengths)  # (N,) 0.. within each sentence
    dest = flat_ranges(rows * row_len + in_row, lengths)
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

    def length_limit(self, max_source: int, max_target: int) -> str:
        """What :meth:`too_long` holds a pair to, for the trainer's line."""
        return f"a packed row ({min(max_source, self.src_len)}/{min(max_target - 1, self.tgt_len)} tokens)"

    def too_long(self, max_source: int, max_target: int) -> np.ndarray:
        bad = (self.src_sizes > min(max_source, self.src_len)) | (self.tgt_sizes > self.tgt_len)
        return np.nonzero(bad | (self.tgt_sizes + 1 > max_target))[0]  # as unpacked: the decoder reads a bos

    def batches(self, max_tokens: int = 0, max_sentences: int = 0, seed: int = 1, epoch: int = 0,
                shuffle: bool = True, exclude: Optional[np.ndarray] = None) -> List[np.ndarray]:
        """The epoch's batches, each ``(n, 2)`` (pair index, row); a pure function of (seed, epoch).
        ``max_tokens`` and ``max_sentences`` were read when the rows were sized."""
        out, self.left_out = epoch_batches(self.src_sizes, self.tgt_sizes, self.src_len, self.tgt_len, self.rows,
                                           epoch_rng(seed, epoch) if shuffle else None, exclude)
        return out

    def collate(self, batch: Sequence[Any]) -> Dict[str, Any]:
        """``batch`` ``(n, 2)`` -> the sample of an unpacked batch, in ``(B, S)`` / ``(B, T)`` rows, with
        ``src_segments``, ``src_positions``, ``tgt_segments``, ``tgt_positions`` in ``net_input``;
        ``src_lengths`` ``(B,)`` are the real tokens of each row; ``ntokens`` the real targets (an int:
        what the trainer divides gradients by, without a device read). ``fixed_shape`` True and no
        ``target_index``: the loss takes all ``B*T`` rows, padding weighted 0, so that every tensor of
        every batch has one shape (an index of the real targets would not: one CUDA graph per length)."""
        batch = np.asarray(batch, dtype=np.int64).reshape(-1, 2)
        ids, rows = batch[:, 0], batch[:, 1]
        d, B, S, T = self.base, self.rows, self.src_len, self.tgt_len
        pad, bos = d.src_dict.pad(), d.tgt_dict.bos()
        src = d.src.gather(ids)[0]
        if d.source_bos:  # <s> before each source
            lengths = d.src_sizes[ids]
            with_bos = np.full(int(lengths.sum()), d.src_dict.bos(), dtype=np.int64)
            body = np.ones(len(with_bos), dtype=bool)
            body[np.cumsum(lengths) - lengths] = False
            with_bos[body] = src
            src = with_bos
        dest, segments, positions = _layout(rows, d.src_sizes[ids], S)
        tgt = d.tgt.gather(ids)[0]
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
            "ntokens": int(tgt_lengths.sum()),
            "nsentences": len(ids),
            "src_padded": True,
            "fixed_shape": True,  # (a host flag, as src_padded is)
        }


class PackedBlockDataset:
    """Language-model or masked-LM blocks (a :class:`seqkit.data.lm_dataset.TokenBlockDataset` or
    :class:`seqkit.data.mlm_dataset.MaskedLMDataset` of ``sample_break_mode`` eos or complete, whose
    ``flat_blocks`` gives the samples back to back) in packed rows: ``rows`` per batch of ``length``
    tokens, each block a segment of its own (attention within it, causal for a language model,
    positions from 0), as if it were a row of an unpacked batch. Blocks longer than a row (or the
    model's positions) are ``too_long``."""

    def __init__(self, base: Any, length: int, rows: int):
        self.base, self.length, self.rows = base, length, rows
        self.src_sizes, self.tgt_sizes = base.src_sizes, None  # (N,) an upper bound of each block's input length
        self.left_out = 0  # blocks of the last epoch's rows that filled no batch

    def __len__(self) -> int:
        return len(self.base)

    def length_limit(self, max_source: int, max_target: int) -> str:
        """What :meth:`too_long` holds a block to, for the trainer's line."""
        return f"a packed row ({min(max_source, self.length)} tokens)"

    def too_long(self, max_source: int, max_target: int) -> np.ndarray:
        return np.nonzero(self.src_sizes > min(max_source, self.length))[0]

    def batches(self, max_tokens: int = 0, max_sentences: int = 0, seed: int = 1, epoch: int = 0,
                shuffle: bool = True, exclude: Optional[np.ndarray] = None) -> List[np.ndarray]:
        """The epoch's batches, each ``(n, 2)`` (block index, row); a pure function of (seed, epoch)."""
        if hasattr(self.base, "epoch"):  # masked-LM: the epoch whose masks collate draws, as its own batches set it
            self.base.epoch = epoch
        out, self.left_out = epoch_batches(self.src_sizes, None, self.length, self.length, self.rows,
                                           epoch_rng(seed, epoch) if shuffle else None, exclude)
        return out

    def collate(self, batch: Sequence[Any]) -> Dict[str, Any]:
        """``batch`` ``(n, 2)`` -> the unpacked sample's ``src_tokens`` and ``target`` in ``(B, L)``
        rows (``pad`` where unscored), with ``src_segments`` and ``src_positions`` ``(B, L)`` in
        ``net_input``; ``src_lengths`` ``(B,)`` the real tokens of each row. Masked-LM: as unpacked,
        ``masked_tokens`` ``(B, L)`` and ``target`` the masked positions' ids ``(N,)``, row-major."""
        batch = np.asarray(batch, dtype=np.int64).reshape(-1, 2)
        ids, rows = batch[:, 0], batch[:, 1]
        B, L, pad = self.rows, self.length, self.base.pad
        inputs, target, lengths = self.base.flat_blocks(ids)  # (sum of lengths,) each, lengths (n,)
        dest, segments, positions = _layout(rows, lengths, L)
        scored = int((target != pad).sum())
        sample = {
            "id": torch.from_numpy(ids.copy()),
            "net_input": {
                "src_tokens": _matrix(B, L, pad, dest, inputs),  # (B, L)
                "src_lengths": torch.from_numpy(np.bincount(rows, weights=lengths, minlength=B).astype(np.int64)),
                "src_segments": _matrix(B, L, -1, dest, segments),
                "src_positions": _matrix(B, L, 0, dest, positions),
            },
            "target": _matrix(B, L, pad, dest, target),  # (B, L)
            "ntokens": scored,
            "sample_size": scored,
            "nsentences": len(ids),
            "fixed_shape": True,
        }
        if getattr(self.base, "masked_lm", False):  # as MaskedLMDataset.collate: N masked ids, input tokens counted
            masked = sample["target"].ne(pad)  # (B, L)
            sample["net_input"]["masked_tokens"] = masked
            sample["target"] = sample["target"][masked]  # (N,)
            sample["ntokens"] = int(lengths.sum())
            del sample["fixed_shape"]
        return sample


def _refuse_model(model: Any, criterion: Any, max_sentences: int) -> None:
    """A one-line :class:`SeqkitError` where the model, the criterion or the batch settings take no packed rows."""
    refusal = getattr(model, "packing_refusal", None)
    reason = (refusal() if refusal is not None
              else f"model {type(model).__name__} takes no document masks (the Transformer, transformer_lm and the "
                   "BERT family do)")
    if not reason and getattr(criterion, "teacher", None) is not None:
        reason = "distillation's teacher outputs are kept per sentence, one sentence a row"
    if reason:
        raise SeqkitError(f"dataset.pack=true: {reason}")
    if max_sentences:
        raise SeqkitError("dataset.pack=true: dataset.max_sentences does not apply to packed rows (a batch holds "
                          "dataset.max_tokens // dataset.pack_length rows); leave it 0")


def pack_training_set(dataset: Any, model: Any, max_tokens: int, max_sentences: int, pack_length: int,
                      criterion: Any = None) -> Any:
    """``dataset.pack=true``: the training set in packed rows, ``dataset`` itself where its blocks
    are rows of one length already, or a one-line :class:`SeqkitError` saying why it cannot be."""
    mode = getattr(dataset, "break_mode", None)
    if mode == "none":  # language-model and masked-LM blocks of the token stream
        log.info("dataset.pack: the blocks of sample_break_mode=none are rows of one length already")
        return dataset
    if mode is not None and not hasattr(dataset, "flat_blocks"):
        raise SeqkitError(f"dataset.pack=true: task.sample_break_mode={mode} gives {type(dataset).__name__} blocks of "
                          "many lengths, not packed; sample_break_mode=none cuts the stream into blocks of one length")
    data_refusal = getattr(dataset, "packing_refusal", None)
    if data_refusal is not None and data_refusal():
        raise SeqkitError(f"dataset.pack=true: {data_refusal()}")
    if mode is None and (not isinstance(dataset, LanguagePairDataset) or dataset.tgt_sizes is None):
        raise SeqkitError(f"dataset.pack=true: {type(dataset).__name__} batches cannot be packed (rows of several "
                          "sentences with document masks are built for translation pairs and language-model blocks)")
    kind = "masked_lm" if getattr(dataset, "masked_lm", False) else "lm"
    if mode is not None and getattr(model, "kind", None) != kind:
        raise SeqkitError(f"dataset.pack=true: {type(dataset).__name__} blocks are packed for {kind} models, not "
                          f"{type(model).__name__}")
    _refuse_model(model, criterion, max_sentences)
    length = min(pack_length or min(max(model.max_positions()), DEFAULT_LENGTH), max_tokens)
    if mode is not None:  # language-model and masked-LM blocks of sample_break_mode eos or complete
        blocks = PackedBlockDataset(dataset, length, max_tokens // length)
        log.info("dataset.pack: batches of %d rows of %d tokens; %d blocks are longer than a row", blocks.rows,
                 length, int((dataset.src_sizes > length).sum()))
        return blocks
    src_len, tgt_len = row_lengths(dataset.src_sizes, dataset.tgt_sizes, length)
    packed = PackedPairDataset(dataset, src_len, tgt_len, max_tokens // length)
    longer = int(((dataset.src_sizes > src_len) | (dataset.tgt_sizes > tgt_len)).sum())
    log.info("dataset.pack: batches of %d rows of %d source / %d target tokens; %d pairs are longer than a row",
             packed.rows, src_len, tgt_len, longer)
    return packed
