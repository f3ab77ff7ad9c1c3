"""seqkit.core.allocator: reused tensor memory stops page-faulting; opting out leaves malloc alone."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings, /proc")

# prints: whether the settings took, whether a fresh 16 MB tensor lies in the brk heap (glibc maps
# blocks that big by default), and the minor page faults of later rounds that allocate, fill and
# free tensors of 2 to 20 MB as beam search does per step, and one of 64 MB as training's logits
# over a vocabulary (above the largest mmap threshold glibc accepts; the first two rounds may fault:
# the heap is still growing)
PROBE = """
import resource, torch
from seqkit.core.allocator import keep_freed_memory
print(keep_freed_memory())
first = torch.empty(4 << 20)
lo, hi = next([int(a, 16) for a in line.split()[0].split("-")] for line in open("/proc/self/maps") if "[heap]" in line)
print(lo <= first.data_ptr() < hi)
del first
sizes = [(2 + 3 * i) << 20 for i in range(7)] + [64 << 20]
def round_():
    for n in sizes:
        torch.empty(n // 4).fill_(1.0)
round_()
round_()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    round_()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


def probe(**env: str):
    out = subprocess.run([sys.executable, "-c", PROBE], env={**os.environ, **env}, capture_output=True,
                         text=True, check=True).stdout.split()
    return out[0] == "True", out[1] == "True", int(out[2])


def test_reused_memory_does_not_fault():
    on, in_heap, faults = probe(SEQKIT_MALLOC_TUNING="1")
    assert on and in_heap
    assert faults < 100  # 5 rounds write 180,480 pages: reused memory stays mapped
    off, in_heap, _ = probe(SEQKIT_MALLOC_TUNING="0")
    assert not off and not in_heap  # glibc's default maps a fresh 16 MB block with mmap


def test_user_malloc_variables_win():
    on, _, _ = probe(SEQKIT_MALLOC_TUNING="1", MALLOC_TRIM_THRESHOLD_="131072")
    assert not on


def test_onednn_cache_is_turned_off_unless_the_user_sized_it(monkeypatch):
    from seqkit.core.allocator import IDEEP_CACHE_VAR, ONEDNN_CACHE_VAR, limit_onednn_cache

    monkeypatch.delenv(ONEDNN_CACHE_VAR, raising=False)
    monkeypatch.delenv(IDEEP_CACHE_VAR, raising=False)
    assert limit_onednn_cache() and os.environ[ONEDNN_CACHE_VAR] == "0" and os.environ[IDEEP_CACHE_VAR] == "1"
    monkeypatch.setenv(ONEDNN_CACHE_VAR, "64")
    monkeypatch.setenv(IDEEP_CACHE_VAR, "8")
    assert not limit_onednn_cache()
    assert os.environ[ONEDNN_CACHE_VAR] == "64" and os.environ[IDEEP_CACHE_VAR] == "8"


def test_bf16_training_on_cpu_turns_the_cache_off(monkeypatch):
    import torch

    from seqkit.core.allocator import IDEEP_CACHE_VAR, ONEDNN_CACHE_VAR
    from seqkit.training.precision import Precision

    monkeypatch.delenv(ONEDNN_CACHE_VAR, raising=False)
    monkeypatch.delenv(IDEEP_CACHE_VAR, raising=False)
    Precision("fp32", torch.device("cpu"))
    assert ONEDNN_CACHE_VAR not in os.environ
    Precision("bf16", torch.device("cpu"))
    assert os.environ[ONEDNN_CACHE_VAR] == "0" and os.environ[IDEEP_CACHE_VAR] == "1"
