"""Memory-mapped token arrays: ``NAME.bin`` holds every sequence's ids back to back, ``NAME.idx``
holds a small header, the sizes and the offsets. Reading maps both files; nothing is loaded.

``.idx`` layout (little endian):
    magic b"SQKIDX01" | dtype code u8 | count u64 | sizes int32[count] | offsets int64[count + 1]
"""

from __future__ import annotations

import os
import struct
from array import array
from typing import Iterable, Sequence, Tuple

import numpy as np
import torch

from seqkit.core.errors import SeqkitError

_MAGIC = b"SQKIDX01"
_DTYPES = {1: np.uint16, 2: np.int32}
_HEADER = struct.Struct("<8sBQ")


def dtype_for_vocab(vocab_size: int) -> type:
    return np.uint16 if vocab_size < 65_500 else np.int32


def _code(dtype: type) -> int:
    return {np.dtype(v): k for k, v in _DTYPES.items()}[np.dtype(dtype)]


def flat_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``starts[i] .. starts[i] + lengths[i] - 1`` for each i, back to back ``(sum of lengths,)``
    int64, without a Python loop: the positions a batch of sequences reads or writes."""
    lengths = np.asarray(lengths, dtype=np.int64)
    ends = np.cumsum(lengths)  # (n,)
    # position k of the output is starts[i] + k - (where i starts in the output)
    shift = np.repeat(np.asarray(starts, dtype=np.int64) - (ends - lengths), lengths)
    return np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64) + shift


class IndexedDatasetBuilder:
    """Streams sequences to ``PREFIX.bin``; ``finalize`` writes ``PREFIX.idx``."""

    def __init__(self, prefix: str, dtype: type):
        self.prefix, self.dtype = prefix, dtype
        self._bin = open(prefix + ".bin", "wb")
        self.sizes = array("i")  # 4 bytes a sequence (a list would take 36)

    def add(self, ids: Sequence[int]) -> None:
        self._bin.write(np.asarray(ids, dtype=self.dtype).tobytes())
        self.sizes.append(len(ids))

    def merge_file(self, other_prefix: str) -> None:
        """Append another finalized dataset (a worker's shard) and delete its files."""
        other = IndexedDataset(other_prefix)
        if np.dtype(other.dtype) != np.dtype(self.dtype):
            raise ValueError("dtype mismatch while merging shards")
        self.sizes.frombytes(np.ascontiguousarray(other.sizes, dtype=np.int32).tobytes())
        del other
        with open(other_prefix + ".bin", "rb") as f:
            while chunk := f.read(1 << 24):
                self._bin.write(chunk)
        os.remove(other_prefix + ".bin")
        os.remove(other_prefix + ".idx")

    def finalize(self) -> None:
        self._bin.flush()
        os.fsync(self._bin.fileno())
        self._bin.close()
        write_index(self.prefix + ".idx", self.dtype, [np.frombuffer(self.sizes, dtype=np.int32)])


def write_index(path: str, dtype: type, sizes: Sequence[np.ndarray], chunk: int = 1 << 20) -> None:
    """Write an ``.idx`` whose sequence sizes are ``sizes`` one after the other (int32 arrays, e.g.
    memory-mapped shard files); the offsets are summed ``chunk`` sizes at a time, so nothing
    proportional to the sequence count is held beyond the arrays given."""
    count = sum(len(s) for s in sizes)
    with open(path, "wb") as f:
        f.write(_HEADER.pack(_MAGIC, _code(dtype), count))
        for s in sizes:
            for a in range(0, len(s), chunk):
                f.write(np.ascontiguousarray(s[a:a + chunk], dtype=np.int32).tobytes())
        total = 0
        f.write(np.zeros(1, dtype=np.int64).tobytes())
        for s in sizes:
            for a in range(0, len(s), chunk):
                offsets = np.cumsum(s[a:a + chunk], dtype=np.int64) + total  # (n,) ends of these sequences
                f.write(offsets.tobytes())
                total = int(offsets[-1])
        f.flush()
        os.fsync(f.fileno())


class IndexedDataset:
    """Read-only view of ``PREFIX.bin``/``.idx``; ``ds[i]`` is a LongTensor of sequence i."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        idx_path, bin_path = prefix + ".idx", prefix + ".bin"
        for p in (idx_path, bin_path):
            if not os.path.isfile(p):
                raise SeqkitError(f"binarized data not found: {p} (run seqkit-preprocess first)")
        size = os.path.getsize(idx_path)
        if size < _HEADER.size:
            raise SeqkitError(f"{idx_path}: truncated index file")
        with open(idx_path, "rb") as f:
            magic, code, count = _HEADER.unpack(f.read(_HEADER.size))
        if magic != _MAGIC or code not in _DTYPES:
            raise SeqkitError(f"{idx_path}: not a seqkit index file")
        if size != _HEADER.size + 4 * count + 8 * (count + 1):
            raise SeqkitError(f"{idx_path}: index file size does not match its header (truncated or corrupt)")
        self.dtype = _DTYPES[code]
        self.sizes = np.memmap(idx_path, dtype=np.int32, mode="r", offset=_HEADER.size, shape=(count,))
        self._offsets = np.memmap(
            idx_path, dtype=np.int64, mode="r", offset=_HEADER.size + 4 * count, shape=(count + 1,)
        )
        itemsize = np.dtype(self.dtype).itemsize
        n_tokens = int(self._offsets[-1]) if count else 0
        if os.path.getsize(bin_path) != n_tokens * itemsize:
            raise SeqkitError(f"{bin_path}: size does not match its index (truncated or corrupt)")
        if count and (np.any(self.sizes < 0) or np.any(np.diff(self._offsets) != self.sizes)):
            raise SeqkitError(f"{idx_path}: inconsistent sizes and offsets (corrupt)")
        self._data = np.memmap(bin_path, dtype=self.dtype, mode="r") if n_tokens else np.zeros(0, self.dtype)

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def tokens(self) -> np.ndarray:
        """Every sequence's ids back to back (memory-mapped, not copied): the token stream."""
        return self._data

    @property
    def offsets(self) -> np.ndarray:
        """``(count + 1,)``: sequence i is ``tokens[offsets[i]:offsets[i + 1]]``."""
        return self._offsets

    def gather(self, indices: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Sequences ``indices`` back to back as one int64 array, and their lengths ``(n,)``: one
        fancy-index read of the token stream (no per-sequence Python loop), what collation pads."""
        indices = np.asarray(indices, dtype=np.int64)
        lengths = self.sizes[indices].astype(np.int64)  # (n,)
        return self._data[flat_ranges(self._offsets[indices], lengths)].astype(np.int64), lengths

    def __getitem__(self, i: int) -> torch.Tensor:
        a, b = int(self._offsets[i]), int(self._offsets[i + 1])
        return torch.from_numpy(self._data[a:b].astype(np.int64))

    def check_vocab(self, vocab_size: int) -> None:
        """Error if any id is outside the dictionary (a dataset binarized with another dict)."""
        if len(self._data) and int(self._data.max()) >= vocab_size:
            raise SeqkitError(f"{self.prefix}.bin holds ids >= dictionary size {vocab_size} (wrong dictionary?)")


def write_dataset(prefix: str, sequences: Iterable[Sequence[int]], vocab_size: int) -> None:
    builder = IndexedDatasetBuilder(prefix, dtype_for_vocab(vocab_size))
    for ids in sequences:
        builder.add(ids)
    builder.finalize()
