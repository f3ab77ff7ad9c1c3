"""Keep freed tensor memory in the process instead of handing it back to the kernel (glibc only).

PyTorch's CPU tensors come from ``malloc``. glibc serves blocks above its mmap threshold (128 KiB
at start, adjusted as it goes) with a fresh ``mmap`` and unmaps them on free, so a loop that
allocates the same few-MB tensors every step (beam search: logits ``(R, V)``, the growing
key/value cache; training: activations) pays a page fault and a zeroed page per 4 KiB, every
step. Measured on the Multi30k recipe model, beam 5, batch 64 on 2 cores: 187,000 minor faults
per 1,000 sentences by default, 11,600 with :func:`keep_freed_memory`, and 1-16% more sentences/s
(three interleaved pairs of runs); training: 2.2M faults per 20 updates, 1.0M with it.

Training has larger blocks still: the logits over the vocabulary, their log-probabilities and
gradients are (tokens, V), 125 MB each for the Multi30k recipe (3,900 target tokens x 8,008), above
the largest mmap threshold glibc accepts (32 MiB). Measured on that model, 40 updates of 4,096
tokens on 2 cores, three interleaved pairs of runs: 1.74-1.84M minor faults and 120-127 model
GFLOP/s with the threshold alone; 0.30M and 134-136 GFLOP/s (+7-12%) with no mmap at all, and peak
RSS 1,244-1,258 MB against 1,287-1,298 MB.

So the settings stop glibc from mapping blocks of its own (every block comes from the heap; were
the heap unable to grow, glibc still falls back to mmap), raise the mmap threshold to glibc's
maximum and stop trimming the heap top, so reused memory stays mapped. Peak RSS does not grow:
only memory freed and reused again is kept. Set ``SEQKIT_MALLOC_TUNING=0``, or any of glibc's own
``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` / ``MALLOC_MMAP_MAX_`` variables, to leave
malloc alone.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1  # glibc's <malloc.h> parameter numbers
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
MMAP_THRESHOLD = 32 << 20  # the largest value glibc accepts on 64-bit
TRIM_THRESHOLD = 1 << 30

_done = False


def keep_freed_memory() -> bool:
    """Apply the malloc settings once per process; True when they are in effect."""
    global _done
    if _done:
        return True
    if os.environ.get("SEQKIT_MALLOC_TUNING", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    if any(k in os.environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_MAX_")):
        return False  # the user tuned glibc already
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _done = all(mallopt(param, value) for param, value in ((M_MMAP_THRESHOLD, MMAP_THRESHOLD),
                                                          (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_MMAP_MAX, 0)))
    return _done


ONEDNN_CACHE_VAR = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
IDEEP_CACHE_VAR = "LRU_CACHE_CAPACITY"  # ideep, torch's oneDNN wrapper: its own cache of matmul primitives


def limit_onednn_cache() -> bool:
    """Turn off the two caches of oneDNN matmul primitives for this process, each unless the user
    sized it; True when this call set one. Call it before the first bf16/fp16 op on CPU: both are
    read once.

    torch runs low-precision matmuls on CPU through ideep and oneDNN, and each caches one primitive
    per input shape (1,024 by default), each holding its own buffers. Token-budget batches come in
    ever new (B, T) shapes, so the caches only grow. bf16 training of the Multi30k recipe model
    (2 cores, AMD EPYC with AVX512-BF16, 45 updates of 4,096 tokens): peak RSS 2,389 MB with both
    caches, 1,741 MB with oneDNN's off (it was 3,562 MB after one epoch of 133 updates with it on),
    1,261 MB with both off, below fp32's 1,288 MB; tokens/s within run-to-run noise of each other
    (4,239 / 4,482 / 4,359). ideep's size must stay at least 1 (0 crashes torch 2.13)."""
    set_any = False
    for var, value in ((ONEDNN_CACHE_VAR, "0"), (IDEEP_CACHE_VAR, "1")):
        if var not in os.environ:
            os.environ[var] = value
            set_any = True
    return set_any
