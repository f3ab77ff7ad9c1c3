"""Is a hypothesis an antiderivative of a source? Both are prefix sequences
(:mod:`seqkit.symbolic.prefix`); the hypothesis H is right when sympy shows d/dx(H) - source = 0,
as Lample & Charton (2019) checked their models' answers: sympy simplification under a time limit.

The checks, cheapest first:

1. either sequence is malformed: rejected;
2. sympy's automatic evaluation of d/dx(H) - source is already 0: accepted;
3. the two sides differ at one of :data:`POINTS` where both are finite real numbers (30-digit
   ``evalf``, relative tolerance 1e-8): rejected. Sound as a rejection: an identity holds at every
   point where both sides are defined, so a right hypothesis is never lost here; it saves the
   simplification of most wrong hypotheses;
4. ``sympy.simplify(d/dx(H) - source) == 0`` within the time limit: accepted; else rejected, unless
   ``numeric_accept``: then a hypothesis that agreed at 3 or more points (step 3) is accepted. That
   acceptance is probabilistic, not a proof (two functions can agree at finitely many points), and
   off by default.

A difference by a constant does not matter: the constant's derivative is 0.
:func:`sympy_integrate` is the baseline the recipe compares with: sympy's own ``integrate``.
"""

from __future__ import annotations

import cmath
import threading
import time
from contextlib import nullcontext
from typing import Optional, Tuple

import sympy

from seqkit.core.errors import SeqkitError
from seqkit.symbolic.generator import Timeout, time_limit
from seqkit.symbolic.prefix import X, from_prefix

POINTS = (0.31, 0.87, 1.43, 2.19, 3.07, 4.61, -0.63, -1.77)  # step 3's points; negative ones too
TOLERANCE = 1e-8
MIN_AGREEING = 3  # points that must agree before numeric_accept accepts


def _value(expr: sympy.Expr, point: float) -> Optional[float]:
    """``expr`` at ``x = point``; None where it is undefined, infinite or not real."""
    try:
        v = complex(expr.evalf(30, subs={X: sympy.Float(point, 30)}))
    except (TypeError, ValueError, ArithmeticError):
        return None
    if not cmath.isfinite(v) or abs(v.imag) > TOLERANCE * max(1.0, abs(v.real)):
        return None
    return v.real


def numeric_agreement(a: sympy.Expr, b: sympy.Expr) -> Optional[bool]:
    """False if ``a`` and ``b`` differ at a point of :data:`POINTS` where both are real; True if they
    agree at :data:`MIN_AGREEING` or more such points; None if too few points are defined."""
    agreeing = 0
    for p in POINTS:
        va, vb = _value(a, p), _value(b, p)
        if va is None or vb is None:
            continue
        if abs(va - vb) > TOLERANCE * max(1.0, abs(va), abs(vb)):
            return False
        agreeing += 1
    return True if agreeing >= MIN_AGREEING else None


def _main_thread_limit(seconds: float):
    """:func:`time_limit` in a process's main thread; elsewhere no limit (the caller's must bound it)."""
    return time_limit(seconds) if threading.current_thread() is threading.main_thread() else nullcontext()


def derivative_is(hyp: sympy.Expr, src: sympy.Expr, limit: float, numeric_accept: bool = False) -> bool:
    """Whether d/dx(hyp) = src, by the module's steps 2-4; a step past ``limit`` seconds rejects."""
    agree: Optional[bool] = None
    try:
        with _main_thread_limit(limit):
            deriv = sympy.diff(hyp, X)
            if deriv - src == 0:
                return True
            agree = numeric_agreement(deriv, src)
            if agree is False:
                return False
            if sympy.simplify(deriv - src) == 0:
                return True
    except Timeout:
        pass
    except Exception:  # noqa: BLE001 -- sympy fails on some odd inputs (a model writes anything): not verified
        return False
    return numeric_accept and agree is True


def is_antiderivative(source: str, hypothesis: str, limit: float = 5.0, numeric_accept: bool = False) -> bool:
    """Whether d/dx(hypothesis) = source, both prefix sequences (a malformed one: False). ``limit``
    bounds the CPU seconds sympy may take (:func:`time_limit`, in a process's main thread; in another thread
    the caller's own timeout must bound it); a check past it is a rejection."""
    try:
        src, hyp = from_prefix(source), from_prefix(hypothesis)
    except SeqkitError:
        return False
    return derivative_is(hyp, src, limit, numeric_accept)


def sympy_integrate(source: str, limit: float = 10.0, check_limit: float = 5.0) -> Tuple[bool, float]:
    """sympy's own answer to a problem: ``(solved, seconds)``. ``sympy.integrate(source, x)`` runs
    for at most ``limit`` CPU seconds (``seconds``: the CPU seconds it took, ``limit`` when cut off;
    in a process's main thread); it solved the problem when it returned an expression with no
    unevaluated ``Integral`` whose derivative is the source (:func:`derivative_is`, ``check_limit``
    seconds, not counted in ``seconds``)."""
    src = from_prefix(source)
    start, result = time.process_time(), None
    try:
        with time_limit(limit):
            result = sympy.integrate(src, X)
    except Timeout:
        return False, limit
    except Exception:  # noqa: BLE001 -- sympy raising is sympy not solving it
        pass
    seconds = time.process_time() - start
    if result is None or result.has(sympy.Integral):
        return False, seconds
    return derivative_is(result, src, check_limit), seconds
