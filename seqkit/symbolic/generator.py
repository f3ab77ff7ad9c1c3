"""Seeded random (derivative, function) pairs for learning to integrate: the "backward" data of
Lample & Charton (2019). A random expression tree f over ``x`` is simplified, its additive constant
dropped, and differentiated, and the derivative simplified; the pair is (f', f) in prefix tokens
(:mod:`seqkit.symbolic.prefix`). How both are simplified is ``simplify`` (:data:`SIMPLIFIERS`):
``full``, ``sympy.simplify``, sympy's search over many rewritings for the shortest form (by far the
most of a pair's cost); ``together``, ``sympy.together``, which only brings a sum of fractions over
one denominator (tens of times faster; f' a little longer); ``none``, the product and chain rules'
terms as sympy's automatic evaluation collects them (examples/symbolic_integration/README.md has the
measured rates and lengths).

The trees are simpler than Lample & Charton's, whose sampler makes every tree shape of a size
equally likely: here a tree of n operators picks its root (binary with probability
``binary_share``), and a binary root splits the other n-1 operators between its two children
uniformly at random (shapes then lean to the balanced side, as random binary search trees do). The
number of operators is uniform in 1..``max_ops``; a leaf is ``x`` with probability ``leaf_x``, else
a non-zero integer in -``max_int``..``max_int``. Binary operators: ``+ - * /``; unary: ``exp log
sqrt sin cos tan`` and the powers 2 and 3.

A pair is dropped when a sympy call takes more than ``time_limit`` seconds of CPU time (the calls
must run in a process's main thread: :func:`time_limit`), when f or f' has no ``x``, leaves the
reals on the tree's own terms (``log(-2)`` is ``log(2) + i*pi``), has an undefined value or
anything prefix notation cannot write, or when f' is longer than ``max_src_len`` tokens or f than
``max_tgt_len``. The trees depend on the seed alone (the time limits draw nothing), so the pairs
are the same for the same seed and config except where a call met its limit: a slower CPU can cut
a call a faster one finishes (:func:`make_pairs` counts them; the limit is CPU time, so the load
does not matter). sympy's simplification of these trees did not depend on ``PYTHONHASHSEED`` in
the runs tried; the recipe fixes it anyway.
"""

from __future__ import annotations

import random
import signal
import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

import sympy

from seqkit.core.errors import SeqkitError
from seqkit.symbolic.prefix import X, to_prefix

BINARY_OPS: Tuple[Callable, ...] = (lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, lambda a, b: a / b)
UNARY_OPS: Tuple[Callable, ...] = (sympy.exp, sympy.log, sympy.sqrt, sympy.sin, sympy.cos, sympy.tan,
                                   lambda a: a ** 2, lambda a: a ** 3)
KEY_POINTS = (0.31, 0.87, 1.43, 2.19, 3.07)  # where a derivative's values make its dedup key
_BAD = (sympy.zoo, sympy.oo, -sympy.oo, sympy.nan, sympy.I, sympy.pi)
SIMPLIFIERS: Dict[str, Callable[[sympy.Expr], sympy.Expr]] = {
    "full": sympy.simplify,
    "together": sympy.together,
    "none": lambda e: e,
}


@dataclass
class GeneratorConfig:
    """What the random trees and the kept pairs look like."""

    max_ops: int = 6  # operators in a tree: uniform in 1..max_ops
    binary_share: float = 0.5  # the probability that an operator is binary (+ - * /), else unary
    leaf_x: float = 0.7  # the probability that a leaf is x, else a non-zero integer constant
    max_int: int = 5  # constants are -max_int..max_int without 0
    max_src_len: int = 128  # longest derivative kept, in prefix tokens
    max_tgt_len: int = 64  # longest function kept, in prefix tokens
    time_limit: float = 1.0  # CPU seconds per sympy call (simplify, diff); a pair past it is dropped
    simplify: str = "full"  # how f and f' are simplified: a name of SIMPLIFIERS (full, together, none)

    def __post_init__(self) -> None:
        if self.simplify not in SIMPLIFIERS:
            raise SeqkitError(f"simplify={self.simplify!r}; valid: {', '.join(SIMPLIFIERS)}")


class Pair(NamedTuple):
    """One problem: the derivative (source) and the function (target) in prefix tokens joined by
    spaces, and ``key``: the derivative's values at :data:`KEY_POINTS`, equal for equal derivatives
    however they are written (dedup and the train/test split compare keys)."""

    src: str
    tgt: str
    key: Tuple[str, ...]


class Timeout(BaseException):
    """A sympy call ran past its limit (a BaseException, so sympy's ``except Exception`` lets it through)."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`Timeout` in the block once it has used ``seconds`` of CPU time (``ITIMER_PROF``:
    the process's user and system time, so that a loaded machine cuts the same calls as a free one
    of its speed; ``SIGPROF`` is received by a process's main thread only).

    Python swallows an exception raised in a garbage-collector callback or a ``__del__`` (it prints it
    as "unraisable"), and the signal handler may run there: so the timer fires again every
    :data:`REFIRE` CPU seconds until the block ends, and a block that ends after a fire swallowed
    them all raises :class:`Timeout` at its exit (it ran past its time all the same)."""
    if threading.current_thread() is not threading.main_thread():
        raise SeqkitError("sympy time limits use SIGPROF, which only a process's main thread receives; "
                          "run the generator or the verifier in a process (e.g. multiprocessing), not a thread")
    fired = []

    def fire(signum, frame):
        fired.append(signum)
        raise Timeout()

    previous = signal.signal(signal.SIGPROF, fire)
    signal.setitimer(signal.ITIMER_PROF, seconds, REFIRE)
    try:
        yield
    finally:
        while True:  # a fire between here and the disarm must not skip the disarm
            try:
                signal.setitimer(signal.ITIMER_PROF, 0)
                break
            except Timeout:
                continue
        signal.signal(signal.SIGPROF, previous)
    if fired:
        raise Timeout()


REFIRE = 0.01  # CPU seconds between the timer's fires once a time limit has passed


Plan = Tuple  # ("x",) | ("int", k) | ("unary", i, Plan) | ("binary", i, Plan, Plan)


def random_plan(rng: random.Random, n_ops: int, cfg: GeneratorConfig) -> Plan:
    """A random tree of ``n_ops`` operators as plain tuples: every random draw of a tree, in the
    order :func:`random_tree` made them, and none of sympy's work (which :func:`build` does under a
    time limit: the draws never depend on how far a cut-off evaluation got)."""
    if n_ops == 0:
        if rng.random() < cfg.leaf_x:
            return ("x",)
        return ("int", rng.choice([i for i in range(-cfg.max_int, cfg.max_int + 1) if i]))
    if rng.random() < cfg.binary_share:
        op = rng.randrange(len(BINARY_OPS))
        left = rng.randint(0, n_ops - 1)
        return ("binary", op, random_plan(rng, left, cfg), random_plan(rng, n_ops - 1 - left, cfg))
    return ("unary", rng.randrange(len(UNARY_OPS)), random_plan(rng, n_ops - 1, cfg))


def build(plan: Plan) -> sympy.Expr:
    """The sympy expression of ``plan`` (sympy evaluates it as it is built: ``x - x`` is 0, and
    ``cos(tan(...))`` of a large constant can take minutes: call it under :func:`time_limit`)."""
    kind = plan[0]
    if kind == "x":
        return X
    if kind == "int":
        return sympy.Integer(plan[1])
    if kind == "unary":
        return UNARY_OPS[plan[1]](build(plan[2]))
    return BINARY_OPS[plan[1]](build(plan[2]), build(plan[3]))


def random_tree(rng: random.Random, n_ops: int, cfg: GeneratorConfig) -> sympy.Expr:
    """A random expression with ``n_ops`` operators: :func:`build` of :func:`random_plan`."""
    return build(random_plan(rng, n_ops, cfg))


def drop_constant(f: sympy.Expr) -> sympy.Expr:
    """``f`` without the terms of its sum that have no ``x`` (an antiderivative's free constant)."""
    return sympy.Add(*[t for t in sympy.Add.make_args(f) if t.has(X)])


def problem_key(deriv: sympy.Expr) -> Tuple[str, ...]:
    """The values of ``deriv`` at :data:`KEY_POINTS` to 9 significant digits ('nan' where undefined);
    sympy's printed form when it is undefined at every point."""
    values = []
    for p in KEY_POINTS:
        try:
            v = complex(deriv.evalf(20, subs={X: sympy.Float(p, 20)}))
        except (TypeError, ValueError, ArithmeticError):  # complex infinity, an unevaluated value
            v = complex("nan")
        values.append("nan" if v != v or abs(v) == float("inf") else f"{v.real:.9g},{v.imag:.9g}")
    return tuple(values) if any(v != "nan" for v in values) else (sympy.srepr(deriv),)


def make_pair(rng: random.Random, cfg: GeneratorConfig) -> Tuple[Optional[Pair], str]:
    """One attempt: ``(pair, "made")`` or ``(None, why it was dropped)``."""
    plan = random_plan(rng, rng.randint(1, cfg.max_ops), cfg)
    simplify = SIMPLIFIERS[cfg.simplify]
    try:
        with time_limit(cfg.time_limit):
            tree = build(plan)
    except Timeout:
        return None, "time limit"
    if not tree.has(X):
        return None, "no x"
    if tree.has(*_BAD):
        return None, "undefined, complex or pi"
    try:
        with time_limit(cfg.time_limit):
            f = drop_constant(simplify(tree))
        with time_limit(cfg.time_limit):
            deriv = simplify(sympy.diff(f, X))
    except Timeout:
        return None, "time limit"
    if not f.has(X) or not deriv.has(X):
        return None, "no x"
    if f.has(*_BAD) or deriv.has(*_BAD):
        return None, "undefined, complex or pi"
    try:
        src, tgt = to_prefix(deriv), to_prefix(f)
    except SeqkitError:
        return None, "not writable"
    if len(src) > cfg.max_src_len or len(tgt) > cfg.max_tgt_len:
        return None, "too long"
    try:
        with time_limit(cfg.time_limit):
            key = problem_key(deriv)
    except Timeout:
        return None, "time limit"
    return Pair(" ".join(src), " ".join(tgt), key), "made"


def make_pairs(seed: str, attempts: int, cfg: GeneratorConfig) -> Tuple[List[Pair], Counter]:
    """The pairs of ``attempts`` trees drawn with ``random.Random(seed)``, and how many attempts
    ended each way ("made", "time limit", "too long", ...). A pure function of its arguments (up
    to time limits), so chunks with their own seeds can be made in parallel."""
    rng, pairs, counts = random.Random(seed), [], Counter()
    for _ in range(attempts):
        try:
            pair, why = make_pair(rng, cfg)
        except Exception as e:  # noqa: BLE001 -- counted by type below, never silent
            pair, why = None, f"sympy error ({type(e).__name__})"  # sympy fails on some rare trees
        counts[why] += 1
        if pair is not None:
            pairs.append(pair)
    return pairs, counts
