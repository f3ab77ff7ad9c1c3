"""Compiled row kernels for sparse tables on a CPU: word2vec's sampled scores and their gradients,
and the lazy Adam step of ``optimizer=sparse_adam`` (the C source: ``rowkernels.c`` beside this
file).

Why compiled: a word2vec update is a hundred thousand dot products and as many row updates of
100 floats each; written with torch ops it is sorts, gathers and scatters of ``(N, D)``
temporaries, several times the arithmetic's own time (examples/word2vec/README.md, "Where an
update's time goes"), and gensim's Cython loops were faster. These loops do the same arithmetic
with a table's reads grouped by row first (a counting sort), so each row is visited once, in memory
order, and its gradient summed in place: the touched rows come out in increasing order, the
coalesced sparse gradient the optimizers take.

Built at first use with the system's C compiler (``seqkit/core/cbuild.py``); where no compiler
works, :func:`available` is False, :func:`why_unavailable` says why, and the callers keep their
torch path (``model.kernel=auto``, ``optimizer.impl=auto``).
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Optional, Tuple

import torch

from seqkit.core.cbuild import CLibrary

_P = ctypes.c_void_p
_I = ctypes.c_int64
_F = ctypes.c_float
_SIGNATURES = {
    "rk_order_by_row": (_I, [_P, _P, _I, _I, _I, _I, _P, _P, _P]),
    "rk_mean_rows": (None, [_P, _P, _P, _I, _I, _I, _I]),
    "rk_scores_by_row": (None, [_P, _P, _P, _P, _P, _P, _I, _I]),
    "rk_scores_backward_by_row": (_I, [_P, _P, _P, _P, _P, _P, _P, _P, _P, _I, _I, _I]),
    "rk_unique": (_I, [_P, _I, _I, _P, _P, _P]),
    "rk_accumulate_by_row": (_I, [_P, _P, _P, _P, _P, _I, _I]),
    "rk_row_adam": (None, [_P, _P, _P, _P, _P, _I, _I, _F, _F, _F, _F]),
    "rk_pair_sgd": (_I, [_P, _P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I, _F]),
}
_LIB = CLibrary(Path(__file__).with_name("rowkernels.c"), _SIGNATURES, "the row kernels")


def library() -> Optional[ctypes.CDLL]:
    """The loaded library, built on the first call; None where it cannot be (:func:`why_unavailable`)."""
    return _LIB.library()


def available() -> bool:
    return _LIB.available()


def why_unavailable() -> str:
    return _LIB.why_unavailable()


def require(setting: str, instead: str = "the auto or torch setting") -> None:
    """For a setting that asks for the kernels by name: one line when they cannot be built."""
    _LIB.require(setting, instead)


def fits(*tensors: torch.Tensor) -> bool:
    """Whether the kernels take these tables: on a CPU, float32 (ids are converted)."""
    return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)


def _ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


class RowOrder:
    """A ``(P, K)`` target's reads of a ``rows``-row table grouped by row (:func:`order_by_row`):
    ``order`` ``(N,)`` the read positions, rows increasing; ``hidden`` ``(N,)`` the hidden row
    scoring each (``hrow[p]``, or p); ``starts`` ``(rows + 1,)`` where each row's reads begin."""

    def __init__(self, order: torch.Tensor, hidden: torch.Tensor, starts: torch.Tensor, shape: Tuple[int, int]):
        self.order, self.hidden, self.starts, self.shape = order, hidden, starts, shape


def order_by_row(target: torch.Tensor, rows: int, hrow: Optional[torch.Tensor] = None, skip: int = -1) -> RowOrder:
    """Group the reads ``target`` ``(P, K)`` of a table of ``rows`` rows by row, a counting sort
    (positions increasing within a row); prediction p is scored by hidden row ``hrow[p]`` (None: p);
    reads of row ``skip`` (CBOW's ``<pad>``) are left out."""
    target = target.contiguous().long()
    hrow = None if hrow is None else hrow.contiguous().long()
    order, hidden = torch.empty(target.numel(), dtype=torch.int64), torch.empty(target.numel(), dtype=torch.int64)
    starts = torch.empty(rows + 1, dtype=torch.int64)
    bad = library().rk_order_by_row(_ptr(target), _opt_ptr(hrow), target.numel(), target.size(1), rows, skip,
                                    _ptr(order), _ptr(hidden), _ptr(starts))
    if bad >= 0:
        raise IndexError(f"row {int(target.reshape(-1)[bad])} read from a table of {rows} rows")
    return RowOrder(order, hidden, starts, (target.size(0), target.size(1)))


def _opt_ptr(t: Optional[torch.Tensor]) -> Optional[int]:
    return None if t is None else t.data_ptr()


def unique(ids: torch.Tensor, rows: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """``torch.unique(ids, return_inverse=True)`` for ids in [0, ``rows``), in O(N + rows): (the
    distinct ids ``(U,)`` increasing, each id's index among them, ``ids``' shape)."""
    flat = ids.contiguous().long().reshape(-1)
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= rows):
        raise IndexError(f"an id outside a table of {rows} rows")
    words, inverse = torch.empty(min(rows, flat.numel()), dtype=torch.int64), torch.empty_like(flat)
    slot = torch.empty(rows, dtype=torch.int64)  # (a name: a temporary would be freed before the call)
    u = library().rk_unique(_ptr(flat), flat.numel(), rows, _ptr(words), _ptr(inverse), _ptr(slot))
    return words[:u], inverse.view(ids.shape)


def scores_by_row(h: torch.Tensor, weight: torch.Tensor, reads: RowOrder) -> torch.Tensor:
    """``weight[target[p, k]] . h[hrow[p]]`` ``(P, K)`` for the target and ``hrow`` grouped in
    ``reads`` (:func:`order_by_row`): each scored row of ``weight`` read once, in memory order."""
    h, weight = h.contiguous().float(), weight.contiguous().float()
    out = torch.empty(reads.shape)
    library().rk_scores_by_row(_ptr(h), _ptr(weight), _ptr(reads.order), _ptr(reads.hidden), _ptr(reads.starts),
                               _ptr(out), weight.size(0), h.size(1))
    return out


def scores_backward_by_row(grad: torch.Tensor, h: torch.Tensor, weight: torch.Tensor,
                           reads: RowOrder) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of :func:`scores_by_row` for ``grad`` ``(P, K)``: (``h``'s ``(R, D)``, the
    table's touched rows ``(U,)`` increasing, their sums ``(U, D)``), no ``(V, D)`` scratch."""
    grad, h, weight = grad.contiguous().float(), h.contiguous().float(), weight.contiguous().float()
    (V, D), N = weight.shape, grad.numel()
    grad_h = torch.empty_like(h)
    ids, sums = torch.empty(min(V, N), dtype=torch.int64), torch.empty(min(V, N), D)
    u = library().rk_scores_backward_by_row(_ptr(grad), _ptr(h), _ptr(weight), _ptr(reads.order), _ptr(reads.hidden),
                                            _ptr(reads.starts), _ptr(grad_h), _ptr(ids), _ptr(sums), h.size(0), V, D)
    return grad_h, ids[:u], sums[:u]


def mean_rows(context: torch.Tensor, weight: torch.Tensor, pad: int) -> torch.Tensor:
    """CBOW's hidden vectors ``(P, D)``: the mean of each row of ``context`` ``(P, C)``'s non-``pad``
    rows of ``weight`` (zeros where all are ``pad``)."""
    context, weight = context.contiguous().long(), weight.contiguous().float()
    if context.numel() and (int(context.min()) < 0 or int(context.max()) >= weight.size(0)):
        raise IndexError(f"an id outside a table of {weight.size(0)} rows")
    out = torch.empty(context.size(0), weight.size(1))
    library().rk_mean_rows(_ptr(context), _ptr(weight), _ptr(out), context.size(0), context.size(1), pad,
                           weight.size(1))
    return out


def rows_grad(context: torch.Tensor, src: torch.Tensor, shape: torch.Size,
              skip: int = -1) -> Tuple[torch.Tensor, torch.Tensor]:
    """The gradient of a ``shape`` table read at ``context`` ``(P, C)``, each read of row p adding
    ``src[p]`` ``(P, D)`` (reads of row ``skip`` left out): (touched rows ``(U,)`` increasing, their
    sums ``(U, D)``)."""
    src = src.contiguous().float()
    (V, D), N = shape, context.numel()
    reads = order_by_row(context, V, skip=skip)
    out_ids, sums = torch.empty(min(V, N), dtype=torch.int64), torch.empty(min(V, N), D)
    u = library().rk_accumulate_by_row(_ptr(reads.hidden), _ptr(reads.starts), _ptr(src), _ptr(out_ids), _ptr(sums),
                                       V, D)
    return out_ids[:u], sums[:u]


def row_adam(param: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, rows: torch.Tensor,
             grad: torch.Tensor, beta1: float, beta2: float, eps: float, size: float) -> None:
    """Lazy Adam in place on rows ``rows`` ``(U,)`` of ``param`` ``(V, D)`` (contiguous, as its
    moments) with their gradient ``grad`` ``(U, D)``; ``size`` the bias-corrected step."""
    rows, grad = rows.contiguous().long(), grad.contiguous().float()
    if not (fits(param, exp_avg, exp_avg_sq) and param.is_contiguous() and exp_avg.is_contiguous()
            and exp_avg_sq.is_contiguous()):
        raise ValueError("row_adam: contiguous float32 CPU tables only")
    library().rk_row_adam(_ptr(param), _ptr(exp_avg), _ptr(exp_avg_sq), _ptr(rows), _ptr(grad), rows.numel(),
                          param.size(1), beta1, beta2, eps, size)


def pair_sgd(context: torch.Tensor, target: torch.Tensor, inputs: torch.Tensor, outputs: torch.Tensor, lr: float,
             skip: int = -1) -> torch.Tensor:
    """Word2vec's per-prediction SGD (``rk_pair_sgd``) in place on the input and output tables
    ``(V, D)`` (contiguous float32 on a CPU): ``context`` ``(P, C)`` (ids ``skip`` left out),
    ``target`` ``(P, K)`` (column 0 the true word) -> each prediction's scores ``(P, K)``, taken
    before its own update."""
    context, target = context.contiguous().long(), target.contiguous().long()
    if not (fits(inputs, outputs) and inputs.is_contiguous() and outputs.is_contiguous()):
        raise ValueError("pair_sgd: contiguous float32 CPU tables only")
    (P, C), K = context.shape, target.size(1)
    V, D = inputs.shape
    scores, scratch = torch.empty(P, K), torch.empty(2 * D)
    bad = library().rk_pair_sgd(_ptr(context), _ptr(target), _ptr(inputs), _ptr(outputs), _ptr(scores), _ptr(scratch),
                                P, C, K, V, D, skip, lr)
    if bad >= 0:
        raise ValueError(f"pair_sgd: prediction {bad} reads a row outside the {V}-row tables")
    return scores
