"""Keep freed tensor memory in the process instead of handing it back to the kernel (glibc only).

PyTorch's CPU tensors come from ``malloc``. glibc serves blocks above its mmap threshold (128 KiB
at start, adjusted as it goes) with a fresh ``mmap`` and unmaps them on free, so a loop that
allocates the same few-MB tensors every step (beam search: logits ``(R, V)``, the growing
key/value cache; training: activations) pays a page fault and a zeroed page per 4 KiB, every
step. Measured on the Multi30k recipe model, beam 5, batch 64 on 2 cores: 187,000 minor faults
per 1,000 sentences by default, 11,600 with :func:`keep_freed_memory`, and 1-16% more sentences/s
(three interleaved pairs of runs); training: 2.2M faults per 20 updates, 1.0M with it.

The settings raise the mmap threshold to glibc's maximum (32 MiB; larger blocks still map and
unmap) and stop trimming the heap top, so reused memory stays mapped. Peak RSS does not grow:
only memory freed and reused again is kept. Set ``SEQKIT_MALLOC_TUNING=0``, or any of glibc's own
``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` variables, to leave malloc alone.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1  # glibc's <malloc.h> parameter numbers
M_MMAP_THRESHOLD = -3
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
    if any(k in os.environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")):
        return False  # the user tuned glibc already
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done
