"""benchmarks/scale.py (issue 63, part 5): its --dry-run goes through every step at 2k and 8k pairs
and writes the JSON with sane figures; and the helpers its figures rest on (the tree's memory, the
log's step timings, the slopes)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

import scale  # noqa: E402
import scale_measure  # noqa: E402


def test_dry_run_writes_every_figure(tmp_path):
    """The whole dry run, one subprocess (about 20 s on 2 busy cores; killed past 90 s)."""
    out = tmp_path / "scale.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    work = tmp_path / "work"
    done = subprocess.run([sys.executable, str(BENCH / "scale.py"), "--dry-run", "--out", str(out), "--workdir",
                           str(work), "--keep"], capture_output=True, text=True, timeout=90, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    # the seqkit a process of this interpreter imports: the checkout (editable install) or site-packages (CI)
    installed = subprocess.run([sys.executable, "-c", "import seqkit.preprocess as p; print(p.__file__)"],
                               capture_output=True, text=True, cwd=tmp_path, env=env, check=True).stdout.strip()
    result = json.loads(out.read_text(encoding="utf-8"))
    assert json.loads(done.stdout.strip().splitlines()[-1])["sizes"] == result["sizes"]
    assert result["dry_run"] and result["cpu_model"] is not None and result["matmul_peak_fp32_gflops"] > 0
    assert "avx2" in result["cpu_flags"]
    assert [r["pairs"] for r in result["sizes"]] == [2000, 8000]
    for row in result["sizes"]:
        pre, train, batching = row["preprocess"], row["train"], row["batching"]
        assert "skipped" not in row and row["lines"] == 2 * (row["pairs"] + row["valid_pairs"])
        assert pre["rc"] == 0 and pre["peak_rss_mb"] > 0 and pre["lines_per_s"] > 0 and pre["wall_s"] > 0
        assert pre["modules"]["seqkit.preprocess"] == installed  # this interpreter's seqkit, not another's
        assert pre["modules"]["elsewhere"] == []
        assert train["rc"] == 0 and 0 < train["first_update_s"] <= train["wall_s"] and train["peak_rss_mb"] > 0
        assert batching["rc"] == 0 and batching["pairs"] == row["pairs"] and batching["batches"] > 0
        assert batching["epoch_s"] >= 0 and batching["peak_rss_mb"] > 0
        assert "baseline" not in row and "lines_per_s_ratio_new_over_baseline" not in row
    assert "baseline_src" not in result
    for key in ("preprocess.wall_s", "preprocess.peak_rss_mb", "train.first_update_s", "batching.epoch_s"):
        assert isinstance(result["slopes"][key], float)
    assert "baseline.wall_s" not in result["slopes"]
    assert result["plot"] is None or Path(result["plot"]).is_file()
    # --reuse: start-up and batching again on the kept folders, nothing preprocessed
    again = subprocess.run([sys.executable, str(BENCH / "scale.py"), "--dry-run", "--out", str(tmp_path / "r.json"),
                            "--workdir", str(work), "--reuse"], capture_output=True, text=True, timeout=60, cwd=ROOT,
                           env=env)
    assert again.returncode == 0, again.stderr[-2000:]
    reused = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    for row, before in zip(reused["sizes"], result["sizes"]):
        assert row["reused"] == str(work / f"pairs_{row['pairs']}" / "bin") and "preprocess" not in row
        assert row["train"]["rc"] == 0 and row["train"]["first_update_s"] > 0 and row["train"]["runs_first_update_s"]
        assert row["batching"]["batches"] == before["batching"]["batches"]  # the same folder, the same batches
        assert row["train"]["modules"]["seqkit.cli.train"] and "baseline_train" not in row


def test_reuse_needs_the_workdir():
    with pytest.raises(SystemExit):
        scale.parse_args(["--reuse"])


def test_baseline_runs_the_other_checkouts_code(tmp_path):
    """With a source tree, seqkit.cli and seqkit.hydra_conf come from it, not from the editable
    install's mapping to this checkout's cli/ and hydra_conf/; main gets the arguments."""
    for folder, body in (("seqkit", ""), ("seqkit/preprocess", ""), ("hydra_conf", ""),
                         ("cli", "import seqkit.cli.common"), ("cli/common", None), ("cli/preprocess", None)):
        if body is None:
            (tmp_path / f"{folder}.py").write_text("def main(argv):\n    print('main', argv)\n" * ("pre" in folder))
        else:
            (tmp_path / folder).mkdir(parents=True, exist_ok=True)
            (tmp_path / folder / "__init__.py").write_text(body)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, str(BENCH / "scale_child.py"), "run", "preprocess", str(tmp_path), "a=1"],
                          capture_output=True, text=True, timeout=30, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    modules = scale.modules_of([(0, line) for line in done.stderr.splitlines()])
    assert modules.pop("elsewhere") == []
    assert all(path.startswith(str(tmp_path)) for path in modules.values()), modules
    assert modules["seqkit.cli.preprocess"] == str(tmp_path / "cli" / "preprocess.py")
    assert done.stdout == "main ['a=1']\n"


def test_tree_memory_sums_the_children():
    """A parent and two children holding 40 MB each: the tree's peak RSS counts all three."""
    hold = "import sys, time; b = bytearray(40 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(1.2)"
    parent = (f"import subprocess, sys; ps = [subprocess.Popen([sys.executable, '-c', {hold!r}]) for _ in range(2)]; "
              f"exec({hold!r}); [p.wait() for p in ps]")
    r = scale_measure.run_measured([sys.executable, "-c", parent], dict(os.environ), str(ROOT), 30)
    assert r["rc"] == 0 and r["processes_seen"] == 3
    assert r["peak_rss_mb"] >= 3 * 40 and r["peak_single_process_hwm_mb"] < r["peak_rss_mb"]


def test_step_seconds_and_slopes():
    stderr = [(0.5, "2026-11-29 05:39:25 | INFO | seqkit.preprocess | read 680 lines in 2 split(s): train, valid"),
              (1.0, "2026-11-29 05:39:25 | INFO | seqkit.preprocess | trained sentencepiece_bpe on de+en in 1.5s"),
              (2.0, "2026-11-29 05:39:26 | INFO | seqkit.preprocess | 680 lines in 2.2s (309 lines/s) -> /x"),
              (2.1, "not a log line in 3s")]
    messages = scale_measure.log_messages(stderr)
    assert [m["t_s"] for m in messages] == [0.5, 1.0, 2.0]
    assert scale_measure.step_seconds(messages) == {"trained sentencepiece_bpe on de+en": 1.5, "N lines": 2.2}
    rows = [{"pairs": p, "preprocess": {"wall_s": 3.0 * p, "peak_rss_mb": 500.0}} for p in (1000, 4000, 16000)]
    got = scale.slopes(rows)
    assert got["preprocess.wall_s"] == 1.0 and got["preprocess.peak_rss_mb"] == 0.0
    assert got["preprocess.peak_pss_mb"] is None and "train.first_update_s" not in got


def test_corpus_lines_differ_and_stream(tmp_path):
    base = [("Hallo!", "Hi."), ("Lauf!", "Run!")]
    n = scale_measure.write_corpus(str(tmp_path), {"train": 5, "valid": 1}, scale_measure.corpus_pairs(base, 1))
    de = (tmp_path / "train.de").read_text(encoding="utf-8").splitlines()
    assert de == ["Hallo! 0", "Lauf! 0", "Hallo! 1", "Lauf! 1", "Hallo! 2"]
    assert (tmp_path / "valid.en").read_text(encoding="utf-8") == "Run! 2\n" and n > 0
    gen = scale_measure.corpus_pairs(None, 7)
    first = [next(gen) for _ in range(3)]
    again = scale_measure.corpus_pairs(None, 7)
    assert first == [next(again) for _ in range(3)] and all(len(de.split()) >= 3 for de, _ in first)


def test_a_failed_step_is_named():
    """A child that failed leaves its figures in the JSON, and the run ends with its line (exit 1)."""
    rows = [{"pairs": 2000, "preprocess": {"rc": 0}, "train": {"rc": 0}},
            {"pairs": 8000, "preprocess": {"rc": 1, "error_tail": ["Traceback", "NameError: name 'x'  "]}}]
    assert scale.failures(rows) == ["8000 pairs: preprocess failed (exit 1): NameError: name 'x'"]


def test_batching_parts_time_the_steps_of_the_same_batches():
    """benchmarks/batching_parts.py splits token_budget_batches into its steps: the steps, done
    apart, give its batches (one_epoch asserts it), and the slope is the log-log one."""
    import numpy as np

    import batching_parts

    lengths = np.random.default_rng(0).integers(3, 61, 5000).astype(np.int32)
    times = batching_parts.one_epoch(lengths, 512, seed=1, epoch=3)
    assert set(times) == {*batching_parts.STEPS, "whole"} and all(t >= 0 for t in times.values())
    assert batching_parts.slope([1, 10, 100], [2.0, 20.0, 200.0]) == pytest.approx(1.0)
    assert batching_parts.slope([1, 4, 16], [1.0, 8.0, 64.0]) == pytest.approx(1.5)


def test_batching_parts_baseline_runs_each_code_in_its_own_process():
    """--baseline-src: the whole call of the given checkout and of this one, each timed in a child that
    imports seqkit from its checkout (the child says which, and the parent checks it)."""
    import argparse

    import batching_parts

    root = os.path.dirname(os.path.dirname(os.path.abspath(batching_parts.__file__)))
    args = argparse.Namespace(rounds=1, warmup=0, max_tokens=512)
    assert batching_parts.whole_in_child(root, 3000, args) >= 0
