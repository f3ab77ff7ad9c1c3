"""sympy expressions <-> prefix token sequences, the encoding of Lample & Charton (2019), "Deep
Learning for Symbolic Mathematics": operators are tokens written before their operands, an integer
is a sign token followed by its decimal digits (``-12`` is ``INT- 1 2``), a rational is ``div`` of
two integers, and an n-ary sum or product nests to the right (``x + y + z`` is
``add x add y z``). The written form follows sympy's own tree, so that a sequence written here
reads back to the same expression: ``1/x`` is ``pow x INT- 1``, ``x - 1`` is ``add INT- 1 x`` and
``sqrt(x)`` (sympy's ``x**(1/2)``) is ``sqrt x``; ``e`` is ``exp INT+ 1``.

Reading (:func:`from_prefix`) also takes ``sub`` and any well-formed nesting, so a model's output
need not be in sympy's order; a sequence that is not one expression is a one-line
:class:`~seqkit.core.errors.SeqkitError`, never a traceback.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Union

import sympy

from seqkit.core.errors import SeqkitError

X = sympy.Symbol("x")
BINARY: Dict[str, Callable] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a ** b,
}
UNARY: Dict[str, Callable] = {"exp": sympy.exp, "log": sympy.log, "sqrt": sympy.sqrt, "sin": sympy.sin,
                              "cos": sympy.cos, "tan": sympy.tan}
SIGNS = ("INT+", "INT-")
DIGITS = tuple("0123456789")
VOCAB = tuple(BINARY) + tuple(UNARY) + ("x",) + SIGNS + DIGITS
MAX_DIGITS = 20  # a longer integer in a model's output is refused rather than computed with
MAX_NUMERIC_EXPONENT = 100  # ``pow INT+ 9 INT+ 9 9 9 9 9 9`` would compute a number of a million digits
_FUNCTIONS = {sympy.exp: "exp", sympy.log: "log", sympy.sin: "sin", sympy.cos: "cos", sympy.tan: "tan"}
_UNDEFINED = (sympy.zoo, sympy.oo, -sympy.oo, sympy.nan)


def int_tokens(n: int) -> List[str]:
    """``-12`` -> ``["INT-", "1", "2"]``."""
    return ["INT-" if n < 0 else "INT+"] + list(str(abs(n)))


def to_prefix(expr: sympy.Expr) -> List[str]:
    """The prefix tokens of ``expr``, an expression in ``x`` over :data:`VOCAB`'s operators with
    integer and rational constants; anything else (another symbol, a float, ``pi``, ``I``,
    ``Abs``) is a SeqkitError naming it."""
    if expr == X:
        return ["x"]
    if expr is sympy.E:
        return ["exp", "INT+", "1"]
    if expr.is_Integer:
        return int_tokens(int(expr))
    if expr.is_Rational:
        return ["div"] + int_tokens(int(expr.p)) + int_tokens(int(expr.q))
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        op, out = ("add" if isinstance(expr, sympy.Add) else "mul"), []
        for i, arg in enumerate(expr.args):  # op a1 op a2 ... a_n: nested to the right
            out += ([op] if i < len(expr.args) - 1 else []) + to_prefix(arg)
        return out
    if isinstance(expr, sympy.Pow):
        base, exponent = expr.args
        if exponent == sympy.Rational(1, 2):
            return ["sqrt"] + to_prefix(base)
        return ["pow"] + to_prefix(base) + to_prefix(exponent)
    if expr.func in _FUNCTIONS and len(expr.args) == 1:
        return [_FUNCTIONS[expr.func]] + to_prefix(expr.args[0])
    raise SeqkitError(f"cannot write {type(expr).__name__} ({str(expr)[:40]}) in prefix notation: only x, "
                      f"integers, rationals, {', '.join(BINARY)} and {', '.join(UNARY)} are known")


def _malformed(why: str) -> SeqkitError:
    return SeqkitError(f"malformed prefix expression: {why}; give one expression in prefix tokens "
                       f"separated by spaces, e.g. 'add x mul INT+ 2 sin x'")


def _integer(sign: str, digits: List[str], pos: int) -> sympy.Integer:
    if not digits:
        raise _malformed(f"{sign} at token {pos} has no digits after it")
    if len(digits) > MAX_DIGITS:
        raise _malformed(f"the integer at token {pos} has {len(digits)} digits (at most {MAX_DIGITS})")
    value = int("".join(reversed(digits)))  # digits were read right to left
    return sympy.Integer(-value if sign == "INT-" else value)


def _apply(tok: str, stack: List[sympy.Expr], pos: int) -> sympy.Expr:
    """``tok`` applied to the operands on top of ``stack`` (its first operand on top)."""
    arity = 1 if tok in UNARY else 2
    if len(stack) < arity:
        raise _malformed(f"{tok!r} at token {pos} has {len(stack)} operand(s) after it, needs {arity}")
    args = [stack.pop() for _ in range(arity)]
    if tok == "pow" and args[0].is_Number and args[1].is_Number and abs(args[1]) > MAX_NUMERIC_EXPONENT:
        raise _malformed(f"'pow' at token {pos} raises a number to {args[1]} (at most {MAX_NUMERIC_EXPONENT})")
    return (UNARY[tok] if arity == 1 else BINARY[tok])(*args)


def from_prefix(tokens: Union[str, Sequence[str]]) -> sympy.Expr:
    """The expression a prefix sequence writes (a string is split on whitespace). A sequence that is
    not exactly one well-formed expression (an unknown token, an operator short of operands, tokens
    left over, digits without a sign token) or whose value is undefined (a division by zero,
    ``log 0``) is a one-line SeqkitError."""
    tokens = tokens.split() if isinstance(tokens, str) else list(tokens)
    if not tokens:
        raise _malformed("it is empty")
    stack: List[sympy.Expr] = []  # operands read so far; the leftmost on top
    digits: List[str] = []  # digits read since the last complete operand, right to left
    for pos in range(len(tokens) - 1, -1, -1):  # right to left: an operator finds its operands on the stack
        tok = tokens[pos]
        if tok in DIGITS:
            digits.append(tok)
            continue
        if tok in SIGNS:
            stack.append(_integer(tok, digits, pos))
            digits = []
            continue
        if digits:
            raise _malformed(f"the digits at token {pos + 1} follow {tok[:20]!r}, not INT+ or INT-")
        if tok == "x":
            stack.append(X)
        elif tok in UNARY or tok in BINARY:
            stack.append(_apply(tok, stack, pos))
        else:
            raise _malformed(f"unknown token {tok[:20]!r} at token {pos}; known: {' '.join(VOCAB)}")
    if digits:
        raise _malformed("it starts with digits, not with INT+ or INT-")
    if len(stack) > 1:
        raise _malformed(f"it holds {len(stack)} expressions side by side, not one")
    expr = stack[0]
    if expr.has(*_UNDEFINED):
        raise _malformed("its value is undefined (a division by zero or a log of 0)")
    return expr
