"""benchmarks/gpu.py: its --dry-run goes through every step on the CPU and prints every field
benchmarks/README.md lists for it, with sane values; and the helpers its GPU figures rest on."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))  # gpu.py imports translation.py beside it

import gpu  # noqa: E402
import gpu_children  # noqa: E402


def readme_fields():
    """The backquoted names in the first column of README.md's gpu.py table."""
    section = (BENCH / "README.md").read_text(encoding="utf-8").split("## `gpu.py`", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return [name for cell in rows for name in re.findall(r"`([^`]+)`", cell)]


def lookup(obj, path):
    """Every value at ``path`` (``a.b[].c``: ``[]`` walks each element of a list); empty if none."""
    found = [obj]
    for part in path.split("."):
        many = part.endswith("[]")
        key = part[:-2] if many else part
        found = [o[key] for o in found if isinstance(o, dict) and key in o]
        if many:
            found = [x for o in found for x in o]
    return found


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu") / "dry.json"
    results_before = sorted(p.name for p in (BENCH / "results").iterdir())
    done = subprocess.run([sys.executable, str(BENCH / "gpu.py"), "--dry-run", "--out", str(out)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in (BENCH / "results").iterdir()) == results_before
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert json.loads(out.read_text(encoding="utf-8")) == printed
    return printed


def test_every_readme_field_is_in_the_json(dry_run):
    fields = readme_fields()
    assert len(fields) > 50 and "configs[].train.tokens_per_s" in fields
    missing = [f for f in fields if not lookup(dry_run, f)]
    assert missing == []


def test_dry_run_figures_are_sane(dry_run):
    assert dry_run["dry_run"] is True and dry_run["device"] == "cpu"
    assert dry_run["matmul_peak_tflops_bf16"] > 0 and dry_run["matmul_peak_tflops_fp32"] > 0
    ran = [c for c in dry_run["configs"] if "skipped" not in c]
    assert len(ran) >= 2 and all(c["precision"] == "fp32" for c in ran)
    for c in ran:
        train = c["train"]
        assert "error" not in train, train
        assert train["tokens_per_s"] > 0 and 0 < train["mfu_measured"] < 1 and train["mfu"] is None
        assert train["updates"] >= 2 and train["parameters"] > 0
        assert train["distinct_shapes"] is None or train["distinct_shapes"] >= 1
        assert train["padding"] is None or 0 <= train["padding"] < 1
        assert train["gpu_busy"] is None and train["peak_gpu_memory_mib"] is None  # no nvidia-smi on the CPU
        bare = c["bare"]
        assert bare["tokens_per_s"] > 0 and 0 < bare["mfu_measured"] < 1 and bare["updates"] >= 1
        assert c["train_over_bare"] > 0
    # what did not run says why
    assert {"gpu_sampling", "mfu", "fp16"} <= set(dry_run["skipped"])
    assert all(c["skipped"] for c in dry_run["configs"] if c["precision"] == "fp16")


def test_dry_run_translations_are_counted(dry_run):
    gen = dry_run["generation"]
    n = gen["sentences"]
    assert n > 0 and gen["beam"] == 5 and gen["checkpoint"]["updates"] >= 1
    for p in ("fp32", "bf16"):
        assert gen["seqkit_sent_per_s"][p] > 0 and gen["transformers_sent_per_s"][p] > 0
        assert 0 <= gen["differ_text"][p] <= gen["differ_ids"][p] <= n  # equal ids give equal text
    assert 0 <= gen["seqkit_bf16_vs_fp32_differ"] <= n


def test_nvidia_smi_samples_and_the_timed_window():
    first = gpu.parse_sample("2026/11/27 02:33:09.250, 87, 40961")
    assert first is not None and first[1:] == (87.0, 40961.0)
    assert gpu.parse_sample("2026/11/27 02:33:09.500, [N/A], 40961") is None
    assert gpu.parse_sample("2026/11/27 02:33") is None
    t = first[0]
    samples = [(t - 1.0, 0.0, 500.0), (t, 80.0, 9000.0), (t + 0.25, 100.0, 9500.0), (t + 3.0, 0.0, 600.0)]
    assert gpu.busy_share(samples, t, t + 1.0) == (0.9, 2)  # the idle start-up and tail are left out
    assert gpu.busy_share(samples, t + 10, t + 11) == (None, 0)


def test_spec_peaks_by_name():
    assert gpu.spec_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert gpu.spec_tflops("NVIDIA H100 PCIe") == 756.0
    assert gpu.spec_tflops("NVIDIA L40S") == 362.0 and gpu.spec_tflops("NVIDIA L4") == 121.0
    assert gpu.spec_tflops("Some Future GPU") is None and gpu.spec_tflops(None) is None


def test_rows_are_cut_at_their_first_eos():
    assert gpu_children.before_eos([5, 6, 2, 2, 0, 0], eos=2) == [5, 6]
    assert gpu_children.before_eos([5, 6], eos=2) == [5, 6]
