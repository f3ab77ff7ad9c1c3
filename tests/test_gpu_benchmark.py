"""benchmarks/gpu.py: its --dry-run goes through every step on the CPU and prints every field
benchmarks/README.md lists for it, with sane values; and the helpers its GPU figures rest on."""

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from side_by_side import SideBySide, selected

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))  # gpu.py imports translation.py beside it

import gpu  # noqa: E402
import gpu_children  # noqa: E402
import gpu_machine  # noqa: E402


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


def bench_env(env=None):
    """``env`` (default: this process's) with one torch thread in gpu.py and its children: tiny models,
    and on 2 cores shared with other work two threads made the dry run 5x slower."""
    return {**(os.environ if env is None else env), "OMP_NUM_THREADS": "1"}


def bench(*args, env=None, timeout=900):
    return subprocess.run([sys.executable, str(BENCH / "gpu.py"), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=bench_env(env))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One work folder for the module: the dry run's preprocessed toy corpus, reused by later runs."""
    return tmp_path_factory.mktemp("gpu-work")


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory, workdir):
    out = tmp_path_factory.mktemp("gpu") / "dry.json"
    results_before = sorted(p.name for p in (BENCH / "results").iterdir())
    done = bench("--dry-run", "--out", str(out), "--workdir", str(workdir), "--extra", "optimization.clip_norm=1.0")
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
    assert dry_run["extra"] == ["optimization.clip_norm=1.0"] and dry_run["variants"]["pack"] == ["dataset.pack=true"]
    ran = [c for c in dry_run["configs"] if "skipped" not in c]
    assert {c["variant"] for c in ran} == {"default", "pack"} and all(c["precision"] == "fp32" for c in ran)
    for c in ran:
        train = c["train"]
        if "error" in train:  # a variant seqkit-train refuses (its setting not there yet) is listed, in one line
            assert c["variant"] != "default", train
            reason = dry_run["skipped"][f"train fp32_{c['max_tokens']}_{c['model']}_{c['variant']}"]
            assert reason == train["error"] and "\n" not in reason and "Traceback" not in reason
            continue
        # a CPU shared with other work measures its matmul peak low at times: mfu_measured only > 0
        assert train["tokens_per_s"] > 0 and train["mfu_measured"] > 0 and train["mfu"] is None
        assert train["updates"] >= 2 and train["parameters"] > 0
        assert train["distinct_shapes"] is None or train["distinct_shapes"] >= 1
        assert train["padding"] is None or 0 <= train["padding"] < 1
        assert train["data_wait"] is None or train["data_wait"] >= 0
        assert train["gpu_busy"] is None and train["peak_gpu_memory_mib"] is None  # no nvidia-smi on the CPU
        bare = c["bare"]
        assert bare["tokens_per_s"] > 0 and bare["mfu_measured"] > 0 and bare["updates"] >= 1
        assert c["train_over_bare"] > 0
    assert all("error" not in c["train"] for c in ran if c["variant"] == "default")
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
    first = gpu_machine.parse_sample("2026/11/27 02:33:09.250, 87, 40961")
    assert first is not None and first[1:] == (87.0, 40961.0)
    assert gpu_machine.parse_sample("2026/11/27 02:33:09.500, [N/A], 40961") is None
    assert gpu_machine.parse_sample("2026/11/27 02:33") is None
    t = first[0]
    samples = [(t - 1.0, 0.0, 500.0), (t, 80.0, 9000.0), (t + 0.25, 100.0, 9500.0), (t + 3.0, 0.0, 600.0)]
    assert gpu_machine.busy_share(samples, t, t + 1.0) == (0.9, 2)  # the idle start-up and tail are left out
    assert gpu_machine.busy_share(samples, t + 10, t + 11) == (None, 0)


def test_spec_peaks_by_name():
    assert gpu_machine.spec_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert gpu_machine.spec_tflops("NVIDIA H100 PCIe") == 756.0
    assert gpu_machine.spec_tflops("NVIDIA L40S") == 362.0 and gpu_machine.spec_tflops("NVIDIA L4") == 121.0
    assert gpu_machine.spec_tflops("Some Future GPU") is None and gpu_machine.spec_tflops(None) is None


def test_rows_are_cut_at_their_first_eos():
    assert gpu_children.before_eos([5, 6, 2, 2, 0, 0], eos=2) == [5, 6]
    assert gpu_children.before_eos([5, 6], eos=2) == [5, 6]


# -- bad arguments: one line on stderr, a non-zero exit, nothing written -------------------------------
BAD_ARGS = [
    (["--max-tokens", "abc"], "--max-tokens"),
    (["--max-tokens", "-5"], "--max-tokens"),
    (["--models", "nosuchmodel"], "nosuchmodel"),
    (["--models", "bert_base"], "bert_base"),
    (["--precisions", "fp8"], "fp8"),
    (["--gen-sentences", "0"], "--gen-sentences"),
    (["--train-seconds", "-1"], "--train-seconds"),
    (["--data", "/nonexistent"], "/nonexistent"),
    (["--data", str(BENCH)], "deu.txt"),
    (["--variants", "nosuch"], "nosuch"),
    (["--variants", "bf16_weights", "--precisions", "fp16"], "bf16_weights"),
    (["--extra", "dataset.nosuch=1"], "dataset.nosuch"),
    (["--extra", "common.precision=fp16"], "common.precision"),
]


@pytest.fixture(scope="module", autouse=True)
def bad_runs(request, tmp_path_factory):
    """The selected bad-argument runs, side by side with each other and with the dry run (each is one
    short one-thread process): (args -> the --out file, the runs)."""
    wanted = [tuple(a) for a in selected(request, "test_a_bad_argument_is_one_line", "args")]
    works = {args: tmp_path_factory.mktemp("bad") for args in wanted}
    runs = SideBySide({args: ([sys.executable, BENCH / "gpu.py", *args, "--out", works[args] / "out.json"], works[args],
                              bench_env()) for args in wanted}, timeout=300, cwd=ROOT)
    yield {args: works[args] / "out.json" for args in wanted}, runs
    runs.close()


@pytest.mark.parametrize("args,cause", BAD_ARGS, ids=[" ".join(a) for a, _ in BAD_ARGS])
def test_a_bad_argument_is_one_line(bad_runs, args, cause):
    outs, runs = bad_runs
    out, done = outs[tuple(args)], runs.result(tuple(args))
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stderr
    assert cause in lines[0] and "Traceback" not in done.stderr
    assert not out.exists() and done.stdout == ""


def test_out_must_be_in_a_folder_that_exists(tmp_path):
    done = bench("--out", str(tmp_path / "nowhere" / "out.json"), timeout=300)
    assert done.returncode != 0 and done.stderr.strip().splitlines() == [f"benchmarks/gpu.py: argument --out: "
                                                                         f"{tmp_path / 'nowhere'}: no such folder"]
    assert not (tmp_path / "nowhere").exists()


def test_a_failed_process_is_one_line(tmp_path):
    done, _ = gpu_machine.run_process([sys.executable, "-c", "raise ValueError('boom')"], str(tmp_path), "step")
    assert done == "step exited 1: ValueError: boom"
    assert "Traceback" in (tmp_path / "errors.log").read_text(encoding="utf-8")  # the whole stderr, kept
    done, _ = gpu_machine.run_process([sys.executable, "-c", "import sys; sys.exit('step: error: bad key')"], str(tmp_path),
                              "step")
    assert done == "step: error: bad key"  # seqkit's own line as it is


def test_transformers_missing_is_skipped(tmp_path, workdir, dry_run):
    """transformers made unimportable in every process (a package of that name that raises, first on
    PYTHONPATH): generation still runs seqkit's engine and lists transformers under ``skipped``."""
    stub = tmp_path / "stub" / "transformers"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ModuleNotFoundError('no transformers here', name='transformers')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(stub.parent), os.environ.get("PYTHONPATH")]))}
    done = bench("--dry-run", "--parts", "generation", "--workdir", str(workdir), "--gen-sentences", "8", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert "configs" not in result and result["data"]["preprocess_reused"] is True
    why = result["skipped"]["transformers"]  # the export (seqkit-export needs it too) or the engine's child says so
    assert "transformers is not installed" in why and "seqkit[hf]" in why and "\n" not in why, why
    gen = result["generation"]
    assert gen["seqkit_sent_per_s"]["fp32"] > 0 and gen["transformers_sent_per_s"] == {"fp32": None, "bf16": None}


def test_the_transformers_child_says_when_transformers_does_not_import(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ModuleNotFoundError
    assert gpu_children.transformers_child({}) == {"skipped": "transformers is not installed (pip install 'seqkit[hf]')"}


def test_a_variant_seqkit_train_refuses_is_one_line(tmp_path, monkeypatch):
    """A variant whose setting seqkit-train lacks (one being added while the benchmark is written) fails
    in one line, seqkit's own, where its figures would be (seqkit-train refuses it before reading the
    data); grid() lists it under ``skipped``."""
    monkeypatch.setitem(gpu.VARIANTS, "future", gpu.Variant(("dataset.future_setting=true",)))
    run = {"precision": "fp32", "max_tokens": 1024, "model": "transformer_tiny", "variant": "future"}
    figures = gpu.train_figures(gpu.dry_plan(), str(tmp_path / "bin"), str(tmp_path), run, "cpu", 1.0,
                                {"spec": None, "bf16": None, "fp32": None})
    assert list(figures) == ["error"] and "\n" not in figures["error"]
    assert figures["error"].startswith("seqkit-train: error: unknown config key 'dataset.future_setting'")


def test_a_time_limit_skips_what_cannot_end_in_time(tmp_path, workdir, dry_run):
    """--time-limit 40 on the reused toy corpus: the bare loop (~60 s guessed), every seqkit-train run
    (~45 s guessed) and generation are not started, each says so, and the JSON is complete."""
    out = tmp_path / "limited.json"
    done = bench("--dry-run", "--time-limit", "40", "--workdir", str(workdir), "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["complete"] is True and result["time_limit"] == 40 and result["seconds"] < 40
    for what in ("bare", "generation", "train fp32_1024_transformer_tiny_default"):
        assert result["skipped"][what].startswith("--time-limit 40 s: "), result["skipped"]
    assert result["generation"] == {"skipped": result["skipped"]["generation"]}
    assert all("train" not in c for c in result["configs"])


def test_the_out_file_is_rewritten_after_every_step(tmp_path, monkeypatch):
    """grid() calls save() after the bare loop and after each row, with the rows so far; a run whose
    expected time no longer fits is skipped once the first of its kind has shown how long one takes."""
    plan = dataclasses.replace(gpu.dry_plan(), precisions=["fp32"], max_tokens=[1024, 2048], train_seconds=10.0)
    monkeypatch.setattr(gpu, "run_child", lambda *a, **k: {"error": "no bare loop here"})
    clock = [0.0]
    monkeypatch.setattr(gpu_machine.time, "perf_counter", lambda: clock[0])

    def train(plan, bin_dir, work, run, device, flops, peaks, budget):
        clock[0] += 30.0  # each run takes 30 s: 20 beyond its training time
        budget.ran(plan.train_seconds, False, 30.0)
        return {"tokens_per_s": 1.0}

    monkeypatch.setattr(gpu, "train_figures", train)
    budget, seen = gpu_machine.Budget(100.0), []
    result = {"data": {"flops_per_target_token": {"transformer_tiny": 1.0}}, "bf16_spec_tflops": None}
    gpu.grid(plan, "bin", str(tmp_path), "cpu", False, result, {}, budget,
             lambda: seen.append([c.get("skipped", "ran")[:15] for c in result["configs"]]))
    # 4 runs of 30 s (55 s guessed until the first ran): 3 fit in 100 s, the 4th (needs ~30, 10 left) not
    assert seen[0] == [] and len(seen) == 1 + 4
    assert seen[-1] == ["ran", "ran", "ran", "--time-limit 10"]
    assert budget.overhead[False] == 20.0 and budget.left() == 10.0


def test_write_json_replaces_the_file_whole(tmp_path):
    path = str(tmp_path / "out.json")
    gpu_machine.write_json(path, {"a": 1})
    gpu_machine.write_json(path, {"a": 2, "complete": True})
    assert json.loads((tmp_path / "out.json").read_text(encoding="utf-8")) == {"a": 2, "complete": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
