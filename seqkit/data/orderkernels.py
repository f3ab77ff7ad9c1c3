"""Compiled steps of an epoch's order (the C source: ``orderkernels.c`` beside this file), for
corpora of tens of millions of examples (issue 63, docs/scale.md).

:func:`permutation` is ``rng.permutation(n)``, the same array from the same generator, which it
leaves in the same state: numpy's Fisher-Yates walk, drawn from the generator's own bit stream
(its ``bitgen_t``, through ``bit_generator.ctypes``) with the same rejection sampling. The walk's
swaps go to random places in an array that has left the caches past a few million examples; their
places depend only on the draws, so they are drawn ahead and prefetched, and the walk stops
waiting on each one in turn (3x faster at 16M examples). :func:`sort_by_key` is
``perm[argsort(key[perm], kind="stable")]`` for 8- and 16-bit keys in one counting-sort pass, the
keys' reads prefetched the same way.

Built at first use (``seqkit/core/cbuild.py``); without a compiler, or if numpy's shuffle ever draws
differently (checked once a process on a small array), both fall back to numpy, with the same result.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from pathlib import Path
from typing import Optional

import numpy as np

from seqkit.core.cbuild import CLibrary

log = logging.getLogger("seqkit.orderkernels")

_P, _I = ctypes.c_void_p, ctypes.c_int64
_LIB = CLibrary(Path(__file__).with_name("orderkernels.c"), {
    "ok_permutation": (None, [_P, _I, _P]),
    "ok_sort_by_key_u8": (None, [_P, _I, _P, _P, _P]),
    "ok_sort_by_key_u16": (None, [_P, _I, _P, _P, _P]),
}, "the order kernels")
_checked: dict = {}  # "same": whether the compiled shuffle draws numpy's permutation (after the first check)
_check_lock = threading.Lock()


def _compiled_permutation(lib: ctypes.CDLL, rng: np.random.Generator, n: int) -> np.ndarray:
    out = np.empty(n, dtype=np.int64)
    bitgen = rng.bit_generator
    with bitgen.lock:  # as numpy's own shuffle holds it
        lib.ok_permutation(out.ctypes.data, n, bitgen.ctypes.bit_generator.value)
    return out


def _library_for_shuffles() -> Optional[ctypes.CDLL]:
    """The library, if it draws numpy's permutations: checked once against ``rng.permutation``."""
    lib = _LIB.library()
    if lib is None:
        return None
    with _check_lock:
        if "same" not in _checked:
            mine, theirs = np.random.default_rng([5, 7]), np.random.default_rng([5, 7])
            same = all(np.array_equal(_compiled_permutation(lib, mine, n), theirs.permutation(n))
                       for n in (1, 2, 1000, 4099))
            _checked["same"] = same and mine.bit_generator.state == theirs.bit_generator.state
            if not _checked["same"]:
                log.warning("the compiled shuffle does not draw numpy %s's permutations: numpy's is used",
                            np.__version__)
    return lib if _checked["same"] else None


def available() -> bool:
    return _library_for_shuffles() is not None


def permutation(rng: np.random.Generator, n: int) -> np.ndarray:
    """``rng.permutation(n)`` ``(n,)`` int64, the generator advanced as numpy advances it."""
    lib = _library_for_shuffles()
    if lib is None:
        return rng.permutation(n)
    return _compiled_permutation(lib, rng, n)


def sort_by_key(perm: np.ndarray, key: np.ndarray, counts: Optional[np.ndarray] = None) -> np.ndarray:
    """``perm[argsort(key[perm], kind="stable")]`` ``(n,)``: ``perm`` (n,) a permutation of
    ``range(n)``, ``key`` (n,) 8- or 16-bit unsigned; ``counts`` ``np.bincount(key)`` when the caller
    has it (any ``minlength``)."""
    lib = _LIB.library()
    name = {np.dtype(np.uint8): "ok_sort_by_key_u8", np.dtype(np.uint16): "ok_sort_by_key_u16"}.get(key.dtype)
    if lib is None or name is None or perm.dtype != np.int64 or len(perm) != len(key) or not len(perm):
        return perm[np.argsort(key[perm], kind="stable")]
    perm, key = np.ascontiguousarray(perm), np.ascontiguousarray(key)
    if counts is None:
        counts = np.bincount(key)  # the same counts whatever the order
    starts = np.zeros(len(counts), dtype=np.int64)  # (values,) where each key value's run begins
    np.cumsum(counts[:-1], out=starts[1:])
    out = np.empty(len(perm), dtype=np.int64)
    getattr(lib, name)(perm.ctypes.data, len(perm), key.ctypes.data, starts.ctypes.data, out.ctypes.data)
    return out
