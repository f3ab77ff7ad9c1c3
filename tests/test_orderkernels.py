"""The compiled steps of an epoch's order (seqkit/data/orderkernels.c) give numpy's results: the
seeded permutation is ``rng.permutation(n)`` with the generator left in the same state, the sort
by key is ``perm[argsort(key[perm], kind="stable")]``; without a compiler the batches are the same."""

import subprocess
import sys

import numpy as np
import pytest

from seqkit.data import orderkernels
from seqkit.data.batching import token_budget_batches

native_only = pytest.mark.skipif(not orderkernels.available(), reason="no C compiler")


def test_builds_here():
    assert orderkernels.available(), orderkernels._LIB.why_unavailable()


@native_only
@pytest.mark.parametrize("n", [0, 1, 2, 3, 17, 1000, 65539, 300_007])
@pytest.mark.parametrize("seed", [[1, 0], [1, 7], [123, 45]])
def test_permutation_is_numpys_and_leaves_the_generator_as_numpy_does(n, seed):
    mine, theirs = np.random.default_rng(seed), np.random.default_rng(seed)
    got = orderkernels.permutation(mine, n)
    assert got.dtype == np.int64
    assert np.array_equal(got, theirs.permutation(n))
    assert np.array_equal(mine.integers(0, 1 << 40, 5), theirs.integers(0, 1 << 40, 5))


def test_permutation_frozen_values():
    assert orderkernels.permutation(np.random.default_rng([1, 2]), 8).tolist() == [6, 0, 7, 5, 1, 4, 3, 2]


@pytest.mark.parametrize("dtype,top", [(np.uint8, 3), (np.uint8, 255), (np.uint16, 60), (np.uint16, 65535)])
@pytest.mark.parametrize("with_counts", [False, True])
def test_sort_by_key_is_a_stable_sort_of_the_permutation(dtype, top, with_counts):
    rng = np.random.default_rng(3)
    n = 50_000
    key = rng.integers(0, top + 1, n).astype(dtype)
    perm = rng.permutation(n)
    counts = np.bincount(key, minlength=top + 1) if with_counts else None
    got = orderkernels.sort_by_key(perm, key, counts)
    assert np.array_equal(got, perm[np.argsort(key[perm], kind="stable")])


def test_sort_by_key_takes_other_inputs_through_numpy():
    key = np.array([3, 1, 2, 1], dtype=np.int64)  # not 8 or 16 bits
    perm = np.array([2, 0, 3, 1])
    assert orderkernels.sort_by_key(perm, key).tolist() == [3, 1, 2, 0]
    assert orderkernels.sort_by_key(np.array([], dtype=np.int64), np.array([], dtype=np.uint8)).tolist() == []


def test_a_shuffle_that_draws_otherwise_is_not_used(monkeypatch):
    monkeypatch.setitem(orderkernels._checked, "same", False)
    mine, theirs = np.random.default_rng(9), np.random.default_rng(9)
    assert np.array_equal(orderkernels.permutation(mine, 100), theirs.permutation(100))
    assert not orderkernels.available()


def test_without_a_compiler_the_batches_are_the_same(tmp_path):
    script = """
import hashlib, numpy as np
from seqkit.data import orderkernels
from seqkit.data.batching import token_budget_batches
print(orderkernels.available())
sizes = np.random.default_rng(0).integers(1, 90, 3_000_000)
batches = token_budget_batches(sizes, 2048, seed=4, epoch=2)
print(hashlib.sha256(b"".join(b.tobytes() + b"|" for b in batches)).hexdigest())
"""
    out = {}
    for name, env in (("native", {}), ("numpy", {"CC": str(tmp_path / "no-such-compiler")})):
        env = {"SEQKIT_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin", **env}
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        out[name] = done.stdout.split()
    assert out["numpy"][0] == "False" and out["native"][0] == str(orderkernels.available())
    assert out["numpy"][1] == out["native"][1]
