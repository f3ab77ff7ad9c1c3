"""seqkit.symbolic: prefix notation both ways, the seeded (derivative, function) generator, the
``integral`` verifier, sympy's own integrate, and the recipe's train/test split
(examples/symbolic_integration/prepare.py)."""

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

sympy = pytest.importorskip("sympy")

from seqkit.core.errors import SeqkitError  # noqa: E402
from seqkit.symbolic.check import is_antiderivative, sympy_integrate  # noqa: E402
from seqkit.symbolic.generator import GeneratorConfig, Timeout, make_pairs, problem_key, time_limit  # noqa: E402
from seqkit.symbolic.prefix import X, from_prefix, to_prefix  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("symbolic_prepare", ROOT / "examples/symbolic_integration/prepare.py")
prepare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(prepare)

x = X
WRITTEN = [  # expression, its prefix tokens (sympy's own tree, sums and products nested to the right)
    (x - 1, "add INT- 1 x"),
    (1 / x, "pow x INT- 1"),
    (sympy.sqrt(x), "sqrt x"),
    (sympy.E, "exp INT+ 1"),
    (-x / 2, "mul div INT- 1 INT+ 2 x"),
    (x ** 2 * sympy.sin(x) + 3, "add INT+ 3 mul pow x INT+ 2 sin x"),
    (sympy.exp(2 * x) / (x + 1), "mul pow add INT+ 1 x INT- 1 exp mul INT+ 2 x"),
    (1 / sympy.sqrt(x), "pow x div INT- 1 INT+ 2"),
    (sympy.log(x) * sympy.Rational(-3, 7) + sympy.tan(x) + sympy.cos(x) + 120,
     "add INT+ 1 2 0 add mul div INT- 3 INT+ 7 log x add cos x tan x"),
]


@pytest.mark.parametrize("expr,tokens", WRITTEN)
def test_prefix_round_trip(expr, tokens):
    assert " ".join(to_prefix(expr)) == tokens
    assert from_prefix(tokens) == expr


def test_reading_takes_sub_and_any_order():
    assert from_prefix("sub x INT+ 1") == x - 1
    assert from_prefix("add x INT- 1") == from_prefix("add INT- 1 x")


@pytest.mark.parametrize("tokens,why", [
    ("", "it is empty"),
    ("add x", "'add' at token 0 has 1 operand(s) after it, needs 2"),
    ("x x", "2 expressions side by side"),
    ("INT+ x", "INT+ at token 0 has no digits after it"),
    ("3 x", "starts with digits"),
    ("x 3", "the digits at token 1 follow 'x', not INT+ or INT-"),
    ("sin foo", "unknown token 'foo' at token 1"),
    ("div x INT+ 0", "undefined"),
    ("pow INT+ 9 INT+ 9 9 9", "raises a number to 999"),
    ("INT+ " + "9 " * 21, "21 digits"),
])
def test_malformed_prefix_is_one_line_seqkit_error(tokens, why):
    with pytest.raises(SeqkitError) as e:
        from_prefix(tokens)
    assert why in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith("malformed prefix expression: ")


@pytest.mark.parametrize("expr", [sympy.pi, sympy.Float(0.5) * x, sympy.Symbol("y"), sympy.Abs(x), sympy.I * x])
def test_what_prefix_cannot_write_is_refused(expr):
    with pytest.raises(SeqkitError, match="cannot write .* in prefix notation"):
        to_prefix(expr)


FIRST_PAIRS = [  # make_pairs("1-0", 8, max_ops=4) with sympy 1.14: 4 made, 3 without x, 1 complex
    ("mul INT- 1 sin add INT- 9 x", "cos add INT- 9 x"),
    ("mul INT+ 4 6 0 8 pow x INT+ 8", "mul INT+ 5 1 2 pow x INT+ 9"),
    ("mul INT+ 3 pow x INT+ 2", "pow x INT+ 3"),
    ("mul pow x INT- 2 add pow x INT+ 2 mul INT- 1 mul add mul INT- 1 tan x mul x pow cos x INT- 2 "
     "sin mul pow x INT- 1 tan x", "add x cos mul pow x INT- 1 tan x"),
]


def test_generator_is_seeded_and_its_pairs_are_derivatives():
    cfg = GeneratorConfig(max_ops=4)
    pairs, counts = make_pairs("1-0", 8, cfg)
    assert [(p.src, p.tgt) for p in pairs] == FIRST_PAIRS
    assert counts == {"made": 4, "no x": 3, "undefined, complex or pi": 1}
    again, _ = make_pairs("1-0", 8, cfg)
    assert again == pairs
    other, _ = make_pairs("2-0", 8, cfg)
    assert [p.tgt for p in other] != [p.tgt for p in pairs]
    for p in pairs:
        deriv, f = from_prefix(p.src), from_prefix(p.tgt)
        assert sympy.simplify(sympy.diff(f, x) - deriv) == 0
        assert p.key == problem_key(deriv) and len(p.key) == 5


def test_generator_simplifies_as_asked_and_refuses_an_unknown_way():
    # the same trees (the draws do not depend on the simplification); the fourth derivative differs:
    # together keeps tan's derivative as 1 + tan(x)**2 and brings the sum over x**2, none leaves the sum
    together, counts = make_pairs("1-0", 8, GeneratorConfig(max_ops=4, simplify="together"))
    assert [p.tgt for p in together] == [t for _, t in FIRST_PAIRS] and counts["made"] == 4
    assert together[3].src == ("mul pow x INT- 2 add pow x INT+ 2 mul INT- 1 mul add mul INT- 1 tan x mul x add "
                               "INT+ 1 pow tan x INT+ 2 sin mul pow x INT- 1 tan x")
    plain, _ = make_pairs("1-0", 8, GeneratorConfig(max_ops=4, simplify="none"))
    assert plain[3].src.startswith("add INT+ 1 mul INT- 1") and plain[:3] == together[:3]
    for p in together + plain:
        assert sympy.simplify(sympy.diff(from_prefix(p.tgt), x) - from_prefix(p.src)) == 0
    with pytest.raises(SeqkitError, match="simplify='fast'; valid: full, together, none"):
        GeneratorConfig(simplify="fast")


def test_generator_drops_too_long_pairs():
    pairs, counts = make_pairs("1-0", 8, GeneratorConfig(max_ops=4, max_src_len=8))
    assert [(p.src, p.tgt) for p in pairs] == [FIRST_PAIRS[0], FIRST_PAIRS[2]] and counts["too long"] == 2


def test_time_limit_cuts_a_busy_loop():
    start = time.process_time()
    with pytest.raises(Timeout):
        with time_limit(0.05):
            while True:
                pass
    assert time.process_time() - start < 1


def test_building_a_tree_is_under_the_time_limit(monkeypatch):
    # sympy evaluates a tree as it is built: cos(tan(...)) of a large constant once ran for minutes
    # outside every limit and stopped prepare.py's pool; the draws come first, the building is cut
    from seqkit.symbolic import generator

    def slow_build(plan):
        while True:
            pass

    cfg = GeneratorConfig(max_ops=4, time_limit=0.05)
    monkeypatch.setattr(generator, "build", slow_build)
    pairs, counts = make_pairs("1-0", 8, cfg)
    assert pairs == [] and counts == {"time limit": 8}
    monkeypatch.undo()
    assert [(p.src, p.tgt) for p in make_pairs("1-0", 8, GeneratorConfig(max_ops=4))[0]] == FIRST_PAIRS  # same draws


def test_prepare_goes_on_from_its_kept_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(prepare, "CHUNK", 10)
    args = ["--train", "12", "--valid", "3", "--test", "3", "--max-ops", "3", "--workers", "1", "--seed", "3"]
    assert prepare.main([str(tmp_path / "a"), *args]) == 0
    kept = sorted((tmp_path / "a" / ".chunks").glob("*/*.json"))
    assert kept and prepare.main([str(tmp_path / "b"), "--cache", str(tmp_path / "a" / ".chunks"), *args]) == 0
    for name in ("train.deriv", "test.func"):
        assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text()
    stats = json.loads((tmp_path / "b" / "stats.json").read_text())
    assert stats["attempts"]["chunks from an earlier run"] == len(kept) and stats["pairs_per_cpu_second"] is None


@pytest.fixture(scope="module")
def integral():
    """The verifier as generation builds it: by its registry name, built-ins imported."""
    from seqkit.verify import VERIFIERS, verifier_config

    return VERIFIERS.build(verifier_config("integral"))


SOURCE = "mul pow x INT+ 2 add mul INT+ 3 tan x mul x pow cos x INT- 2"  # d/dx x^3 tan x


@pytest.mark.parametrize("hypothesis,right", [
    ("mul pow x INT+ 3 tan x", True),
    ("add INT+ 7 mul pow x INT+ 3 tan x", True),  # a constant apart
    ("mul pow x INT+ 3 div sin x cos x", True),  # another form: only simplify shows it
    ("mul pow x INT+ 3 sin x", False),
    ("add x tan x", False),
    ("mul pow x INT+ 3", False),  # malformed
])
def test_integral_verifier(integral, hypothesis, right):
    assert integral(SOURCE, hypothesis) is right


def test_integral_verifier_in_a_thread_runs_without_its_own_limit(integral):
    import threading

    out = []
    t = threading.Thread(target=lambda: out.append(integral(SOURCE, "mul pow x INT+ 3 tan x")))
    t.start()
    t.join()
    assert out == [True]  # SIGPROF is the main thread's: elsewhere the caller's timeout bounds the check


def test_integral_verifier_reads_no_checkpoint():
    from seqkit.symbolic.verifier import IntegralConfig, integral as build

    with pytest.raises(SeqkitError, match="verifier.model=clf.pt: the integral verifier .* drop it"):
        build(IntegralConfig(model="clf.pt"))


def _spin(cpu_seconds):
    end = time.process_time() + cpu_seconds
    while time.process_time() < end:
        pass


def test_a_swallowed_timeout_fires_again():
    # the handler may run in a gc callback, whose exception Python swallows: the next fire must land
    fires = []
    with pytest.raises(Timeout):
        with time_limit(0.01):
            try:
                _spin(1.0)
            except Timeout:
                fires.append(time.process_time())  # swallowed, as a gc callback's would be
            _spin(1.0)
    assert len(fires) == 1


def test_a_block_that_swallowed_every_fire_raises_at_its_exit():
    swallowed = 0
    with pytest.raises(Timeout):
        with time_limit(0.01):
            end = time.process_time() + 0.2
            while time.process_time() < end:
                try:
                    _spin(0.001)
                except Timeout:
                    swallowed += 1
    assert swallowed >= 2
    _spin(0.05)  # disarmed: no fire after the block


def test_a_check_past_its_time_limit_rejects():
    assert not is_antiderivative(SOURCE, "mul pow x INT+ 3 div sin x cos x", limit=1e-4)
    assert is_antiderivative("mul INT+ 2 x", "pow x INT+ 2", limit=1e-4) in (True, False)  # no hang, no raise


def test_numeric_accept_takes_agreement_where_simplify_fails(monkeypatch):
    monkeypatch.setattr(sympy, "simplify", lambda e, **kw: e)  # a simplification that never reaches 0
    other_form = "mul pow x INT+ 3 div sin x cos x"
    assert not is_antiderivative(SOURCE, other_form)  # off by default: only a proof accepts
    assert is_antiderivative(SOURCE, other_form, numeric_accept=True)
    assert not is_antiderivative(SOURCE, "mul pow x INT+ 3 sin x", numeric_accept=True)  # differs at a point


def test_sympy_integrate_solves_and_is_cut_off():
    solved, seconds = sympy_integrate("mul INT- 1 sin x")
    assert solved and seconds < 5
    assert sympy_integrate(SOURCE, limit=0.2) == (False, 0.2)


def test_importing_the_verifier_does_not_import_sympy():
    code = "import sys, seqkit.verify, seqkit.symbolic.verifier; print('sympy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_prepare_split_keeps_test_and_valid_functions_out_of_train(tmp_path, monkeypatch):
    monkeypatch.setattr(prepare, "CHUNK", 10)  # attempts per chunk: fewer made past the 18 pairs asked
    assert prepare.main([str(tmp_path), "--train", "12", "--valid", "3", "--test", "3", "--max-ops", "3",
                         "--workers", "1", "--seed", "3"]) == 0
    sides = {name: list(zip((tmp_path / f"{name}.deriv").read_text().splitlines(),
                            (tmp_path / f"{name}.func").read_text().splitlines()))
             for name in ("train", "valid", "test")}
    assert [len(sides[n]) for n in ("train", "valid", "test")] == [12, 3, 3]
    # the same function up to a constant is the same derivative: compare values, not spellings
    keys = {n: {problem_key(from_prefix(src)) for src, _ in pairs} for n, pairs in sides.items()}
    assert sum(len(k) for k in keys.values()) == 18  # no problem twice, in a split or across splits
    funcs = {n: {sympy.srepr(sympy.simplify(from_prefix(f))) for _, f in pairs} for n, pairs in sides.items()}
    assert not funcs["train"] & (funcs["test"] | funcs["valid"])
    assert json.loads((tmp_path / "stats.json").read_text())["attempts"]["duplicate"] > 0  # there were some to drop
