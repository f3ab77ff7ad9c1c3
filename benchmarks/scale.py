"""The cost curve of corpora of any size (issue 63): seqkit-preprocess's wall time, lines/s and peak
memory, training start-up and per-epoch batching, against the corpus's pairs. One JSON and a PNG.

    python benchmarks/scale.py                                   # 1M, 4M and 16M pairs (hours on 2 cores)
    python benchmarks/scale.py --pairs 200000 --baseline-src /work/baseline_ea5b05f   # A/B against older code
    python benchmarks/scale.py --dry-run                         # 2k and 8k pairs, < 1 min
    python benchmarks/scale.py --workdir W --keep ...; python benchmarks/scale.py --workdir W --reuse \
        --baseline-src OLD --rounds 3                            # start-up and batching only, A/B

Each size: a synthetic de-en corpus streamed to disk (Tatoeba's pairs repeated with the repeat number
appended to each line, from ``$SEQKIT_DATA/tatoeba_deu_eng`` or ``../shared/data``; seeded random
words when neither holds it; no download), skipped when the disk has too little room (said in the
JSON); then, each in a process of its own, ``seqkit-preprocess`` (joint sentencepiece BPE, 2 workers),
with ``--baseline-src`` the same command from an older checkout right before it (``--rounds`` times,
alternating), ``seqkit-train`` with a tiny transformer to its first update, and one epoch's batching
as the trainer makes it (``scale_child.py``). Memory is the whole process tree's (parent and
workers), polled every 0.2 s (``scale_measure.py``). Slopes: log-log least squares against pairs
(1: linear; 0: flat). Lines/s: both sides of every split over the process's wall time, its start-up
included (the log's own figure, which starts after the imports, is in ``log_steps_s``). The machine: CPU model, flags and an fp32 matmul peak, as the other benchmarks.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import scale_measure as sm  # noqa: E402

CHILD = os.path.join(HERE, "scale_child.py")
DISK_FACTOR = 3.0  # raw corpus + binarized folder + the preprocess's staging and shards, per raw byte
DISK_MARGIN = 512 << 20
# the curves: JSON path within a size's record -> label
SERIES = {
    "preprocess.wall_s": "preprocess wall (s)",
    "preprocess.peak_rss_mb": "preprocess peak RSS, tree (MB)",
    "preprocess.peak_pss_mb": "preprocess peak PSS, tree (MB)",
    "baseline.wall_s": "baseline preprocess wall (s)",
    "baseline.peak_rss_mb": "baseline peak RSS, tree (MB)",
    "baseline.peak_pss_mb": "baseline peak PSS, tree (MB)",
    "train.first_update_s": "train: start to first update (s)",
    "train.peak_rss_mb": "train peak RSS, tree (MB)",
    "batching.epoch_s": "batching one epoch (s)",
    "batching.peak_rss_mb": "batching process peak RSS (MB)",
    "baseline_train.first_update_s": "baseline train: start to first update (s)",
    "baseline_batching.epoch_s": "baseline batching one epoch (s)",
}


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", default="1000000,4000000,16000000", help="training pairs per size, comma-separated")
    p.add_argument("--valid-pairs", type=int, default=3000, help="validation pairs of every size")
    p.add_argument("--vocab-size", type=int, default=16000, help="tokenizer.vocab_size (joint sentencepiece BPE)")
    p.add_argument("--workers", type=int, default=2, help="seqkit-preprocess workers=")
    p.add_argument("--baseline-src", help="a checkout of older seqkit code: its seqkit-preprocess runs too (A/B)")
    p.add_argument("--baseline-max-pairs", type=int, default=4000000,
                   help="the baseline runs only at sizes up to this (the old code holds every line: 16M pairs "
                        "would need about 10 GB and 15 minutes); 0 = every size")
    p.add_argument("--rounds", type=int, default=1, help="preprocess runs per size (baseline and new alternating)")
    p.add_argument("--max-tokens", type=int, default=4096, help="dataset.max_tokens of the training and the batching")
    p.add_argument("--batching-epochs", type=int, default=3, help="epochs whose batches are timed (slowest reported)")
    p.add_argument("--synthetic", action="store_true", help="random words even when Tatoeba is there")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", help="where corpora and folders go (default: a temporary folder, removed)")
    p.add_argument("--keep", action="store_true", help="keep the corpora and data folders")
    p.add_argument("--reuse", action="store_true",
                   help="time only training start-up and batching, on the folders an earlier --workdir W --keep "
                        "run left in W; with --baseline-src the old code's start-up and batching alternate with "
                        "the new (--rounds times, medians reported)")
    p.add_argument("--out", help="JSON path (default benchmarks/results/<date>_scale.json; the PNG beside it)")
    p.add_argument("--timeout", type=float, default=4 * 3600, help="seconds allowed each child process")
    p.add_argument("--dry-run", action="store_true", help="2k and 8k pairs, a 1k vocabulary: every step, < 1 min")
    args = p.parse_args(argv)
    if args.dry_run:
        args.pairs, args.valid_pairs, args.vocab_size, args.max_tokens = "2000,8000", 200, 1000, 2048
    args.sizes = sorted({int(x) for x in args.pairs.split(",") if x.strip()})
    if not args.sizes or min(args.sizes) < 1 or args.rounds < 1:
        p.error("--pairs needs positive counts and --rounds at least 1")
    if args.reuse and not args.workdir:
        p.error("--reuse reads the folders of an earlier --workdir W --keep run: give --workdir W")
    if args.baseline_src and not os.path.isfile(os.path.join(args.baseline_src, "cli", "preprocess.py")):
        p.error(f"--baseline-src {args.baseline_src} has no cli/preprocess.py; give a seqkit checkout")
    return args


def machine() -> dict:
    import torch
    from translation import matmul_peak

    from seqkit.core.cpu import cpu_info

    return {**cpu_info(), "matmul_peak_fp32_gflops": round(matmul_peak(torch.float32) / 1e9, 1),
            "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
            "python": sys.version.split()[0]}


def git_state() -> dict:
    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"commit": git("rev-parse", "--short", "HEAD"), "dirty": bool(git("status", "--porcelain", "-uno"))}


def child_env(src: Optional[str]) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if src:
        env["PYTHONPATH"] = os.path.abspath(src)
    return env


def modules_of(stderr: list) -> Optional[dict]:
    for _, line in stderr:
        if line.startswith("scale_child modules: "):
            return json.loads(line[len("scale_child modules: "):])
    return None


def preprocess_run(args: argparse.Namespace, raw: str, dest: str, src: Optional[str], lines: int) -> dict:
    """One seqkit-preprocess of the corpus into ``dest``, from ``src`` (None: this checkout)."""
    argv = ["source_lang=de", "target_lang=en", f"trainpref={raw}/train", f"validpref={raw}/valid",
            f"destdir={dest}", "tokenizer=sentencepiece_bpe", f"tokenizer.vocab_size={args.vocab_size}",
            f"workers={args.workers}"]
    cmd = [sys.executable, CHILD, "run", "preprocess", os.path.abspath(src) if src else "-", *argv]
    r = sm.run_measured(cmd, child_env(src), os.path.dirname(raw), args.timeout)
    messages = sm.log_messages(r["stderr"])
    out = {k: r[k] for k in ("rc", "timed_out", "wall_s", "peak_rss_mb", "peak_pss_mb", "peak_single_process_hwm_mb",
                             "processes_seen", "memory_samples")}
    out["lines_per_s"] = round(lines / r["wall_s"], 1)
    out["log_steps_s"] = sm.step_seconds(messages)
    out["log"] = messages
    out["modules"] = modules_of(r["stderr"])
    if r["rc"] != 0:
        out["error_tail"] = [line for _, line in r["stderr"][-5:]]
    return out


def summary(runs: List[dict]) -> dict:
    """The median run's figures (by wall time), with every run's wall and lines/s beside them."""
    ok = [r for r in runs if r["rc"] == 0] or runs
    median = sorted(ok, key=lambda r: r["wall_s"])[(len(ok) - 1) // 2]
    return {**median, "runs_wall_s": [r["wall_s"] for r in runs], "runs_lines_per_s": [r["lines_per_s"] for r in runs]}


def train_run(args: argparse.Namespace, dest: str, work: str, src: Optional[str] = None) -> dict:
    """seqkit-train of a tiny transformer on ``dest`` to its first update, from ``src`` (None: this
    checkout)."""
    save = os.path.join(work, "checkpoints" if src is None else "checkpoints_baseline")
    shutil.rmtree(save, ignore_errors=True)
    argv = [f"task.data={dest}", "model=transformer_tiny", "common.threads=1", "optimization.max_update=1",
            f"dataset.max_tokens={args.max_tokens}", f"checkpoint.save_dir={save}", "common.log_interval=1"]
    cmd = [sys.executable, CHILD, "run", "train", os.path.abspath(src) if src else "-", *argv]
    r = sm.run_measured(cmd, child_env(src), work, args.timeout)
    messages = sm.log_messages(r["stderr"])
    first = next((m for m in messages if m["msg"].startswith("[train]") and " update 1 " in m["msg"] + " "), None)
    model = next((m for m in messages if m["msg"].startswith("model ")), None)
    out = {k: r[k] for k in ("rc", "timed_out", "wall_s", "peak_rss_mb", "peak_pss_mb", "peak_single_process_hwm_mb")}
    out["args"] = argv
    out["first_update_s"] = first["t_s"] if first else None
    out["model_built_s"] = model["t_s"] if model else None
    out["first_update_after_model_s"] = round(first["t_s"] - model["t_s"], 3) if first and model else None
    out["log"] = [m for m in messages if m in (first, model) or "warning" in m["msg"].lower()]
    out["modules"] = modules_of(r["stderr"])
    if r["rc"] != 0:
        out["error_tail"] = [line for _, line in r["stderr"][-5:]]
    return out


def batching_run(args: argparse.Namespace, dest: str, work: str, src: Optional[str] = None) -> dict:
    cmd = [sys.executable, CHILD, "batching", dest, str(args.max_tokens), str(args.batching_epochs),
           os.path.abspath(src) if src else "-"]
    r = sm.run_measured(cmd, child_env(src), work, args.timeout)
    if r["rc"] != 0:
        return {"rc": r["rc"], "error_tail": [line for _, line in r["stderr"][-5:]]}
    out = json.loads(r["stdout"].strip().splitlines()[-1])
    out["epoch_s_all"], out["epoch_s"] = out["epoch_s"], max(out["epoch_s"])  # the slowest: the first's warm-up
    return {"rc": 0, **out, "tree_peak_rss_mb": r["peak_rss_mb"], "wall_s": r["wall_s"]}


def median_of(runs: List[dict], key: str) -> dict:
    """The run whose ``key`` is the median (the lower middle), with every run's ``key`` beside it."""
    ok = [r for r in runs if r.get("rc") == 0 and r.get(key) is not None] or runs
    median = sorted(ok, key=lambda r: r.get(key) or 0)[(len(ok) - 1) // 2]
    return {**median, f"runs_{key}": [r.get(key) for r in runs]}


def reuse_size(args: argparse.Namespace, pairs: int, work: str) -> dict:
    """Start-up and batching on ``work``'s kept folder of ``pairs``; the baseline alternating first."""
    size_dir = os.path.join(work, f"pairs_{pairs}")
    dest = os.path.join(size_dir, "bin")
    row: dict = {"pairs": pairs, "reused": dest}
    if not os.path.isfile(os.path.join(dest, "preprocess.json")):
        row["skipped"] = f"{dest} has no preprocess.json: run with --workdir {work} --keep first"
        print(f"scale.py: {pairs} pairs skipped: {row['skipped']}", file=sys.stderr)
        return row
    new: Dict[str, list] = {"train": [], "batching": []}
    old: Dict[str, list] = {"train": [], "batching": []}
    for _ in range(args.rounds):
        for runs, src in ((old, args.baseline_src), (new, None)) if args.baseline_src else ((new, None),):
            runs["train"].append(train_run(args, dest, size_dir, src))
            runs["batching"].append(batching_run(args, dest, size_dir, src))
    row["train"], row["batching"] = median_of(new["train"], "first_update_s"), median_of(new["batching"], "epoch_s")
    if args.baseline_src:
        row["baseline_train"] = median_of(old["train"], "first_update_s")
        row["baseline_batching"] = median_of(old["batching"], "epoch_s")
    return row


def measure_size(args: argparse.Namespace, pairs: int, base: Optional[list], work: str) -> dict:
    row: dict = {"pairs": pairs, "valid_pairs": args.valid_pairs, "lines": 2 * (pairs + args.valid_pairs)}
    need = int((pairs + args.valid_pairs) * sm.mean_pair_bytes(base) * DISK_FACTOR) + DISK_MARGIN
    free = sm.free_bytes(work)
    row["disk_needed_gb"], row["disk_free_gb"] = round(need / 1e9, 2), round(free / 1e9, 2)
    if free < need:
        row["skipped"] = f"free disk {free / 1e9:.1f} GB < {need / 1e9:.1f} GB needed (corpus, folder and staging)"
        print(f"scale.py: {pairs} pairs skipped: {row['skipped']}", file=sys.stderr)
        return row
    size_dir = os.path.join(work, f"pairs_{pairs}")
    raw = os.path.join(size_dir, "raw")
    start = time.monotonic()
    row["corpus_bytes"] = sm.write_corpus(raw, {"train": pairs, "valid": args.valid_pairs},
                                          sm.corpus_pairs(base, args.seed))
    row["corpus_write_s"] = round(time.monotonic() - start, 2)
    new_runs, base_runs = [], []
    with_baseline = bool(args.baseline_src) and (not args.baseline_max_pairs or pairs <= args.baseline_max_pairs)
    dest = os.path.join(size_dir, "bin")
    for _ in range(args.rounds):
        if with_baseline:
            base_dest = os.path.join(size_dir, "bin_baseline")
            base_runs.append(preprocess_run(args, raw, base_dest, args.baseline_src, row["lines"]))
            shutil.rmtree(base_dest, ignore_errors=True)
        shutil.rmtree(dest, ignore_errors=True)
        new_runs.append(preprocess_run(args, raw, dest, None, row["lines"]))
    row["preprocess"] = summary(new_runs)
    if with_baseline:
        row["baseline"] = summary(base_runs)
        ratios = [n["lines_per_s"] / b["lines_per_s"] for n, b in zip(new_runs, base_runs)]
        row["lines_per_s_ratio_new_over_baseline"] = round(statistics.median(ratios), 3)
        row["lines_per_s_ratios"] = [round(x, 3) for x in ratios]
    if row["preprocess"]["rc"] == 0:
        row["train"] = train_run(args, dest, size_dir)
        row["batching"] = batching_run(args, dest, size_dir)
    if not args.keep:
        shutil.rmtree(size_dir, ignore_errors=True)
    return row


def lookup(row: dict, path: str) -> Optional[float]:
    obj = row
    for key in path.split("."):
        obj = obj.get(key) if isinstance(obj, dict) else None
    return float(obj) if isinstance(obj, (int, float)) and not isinstance(obj, bool) and obj > 0 else None


def slopes(rows: List[dict]) -> Dict[str, Optional[float]]:
    """Least-squares slope of log(value) against log(pairs) per series (None: under 2 sizes measured)."""
    out: Dict[str, Optional[float]] = {}
    for path in SERIES:
        pts = [(r["pairs"], v) for r in rows if (v := lookup(r, path)) is not None]
        if len(pts) >= 2 and len({p for p, _ in pts}) >= 2:
            x, y = np.log([p for p, _ in pts]), np.log([v for _, v in pts])
            out[path] = round(float(np.polyfit(x, y, 1)[0]), 3)
        elif any(path.split(".")[0] in r for r in rows):
            out[path] = None
    return out


def plot(rows: List[dict], png: str) -> Optional[str]:
    """Time and memory against pairs, log-log; None (and one line) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("scale.py: matplotlib not installed (pip install '.[plot]'): no PNG", file=sys.stderr)
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for path, label in SERIES.items():
        pts = [(r["pairs"], v) for r in rows if (v := lookup(r, path)) is not None]
        if pts:
            ax = axes[0] if path.endswith("_s") else axes[1]
            ax.plot([p for p, _ in pts], [v for _, v in pts], marker="o", label=label)
    for ax, title in zip(axes, ("time (s)", "peak memory (MB)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("training pairs")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def default_out(args: argparse.Namespace) -> str:
    if args.dry_run:
        return os.path.join(tempfile.gettempdir(), "seqkit_scale_dry_run.json")
    return os.path.join(HERE, "results", f"{time.strftime('%Y-%m-%d')}_scale.json")


def main(argv: Optional[List[str]] = None) -> dict:
    args = parse_args(argv)
    out_path = os.path.abspath(args.out or default_out(args))
    tatoeba = None if args.synthetic else sm.find_tatoeba(ROOT)
    base = sm.read_tatoeba(tatoeba) if tatoeba else None
    work = os.path.abspath(args.workdir) if args.workdir else tempfile.mkdtemp(prefix="seqkit_scale_")
    os.makedirs(work, exist_ok=True)
    result: dict = {"benchmark": "scale", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv[1:],
                    "dry_run": args.dry_run, **git_state(), **machine(), "loadavg_start": os.getloadavg(),
                    "corpus": {"source": tatoeba or "generated", "base_pairs": len(base) if base else None,
                               "seed": args.seed},
                    "vocab_size": args.vocab_size, "workers": args.workers, "rounds": args.rounds}
    if args.baseline_src:
        result["baseline_src"] = os.path.abspath(args.baseline_src)
    try:
        rows = []
        for pairs in args.sizes:
            print(f"scale.py: {pairs} pairs ...", file=sys.stderr, flush=True)
            rows.append(reuse_size(args, pairs, work) if args.reuse else measure_size(args, pairs, base, work))
    finally:
        if not args.workdir and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    result["sizes"] = rows
    result["slopes"] = slopes(rows)
    result["loadavg_end"] = os.getloadavg()
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    result["plot"] = plot(rows, os.path.splitext(out_path)[0] + ".png")
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    result["json"] = out_path
    print(json.dumps(result))
    failed = failures(rows)
    if failed:  # the figures are written; the run still says it did not measure everything
        sys.exit("scale.py: " + "; ".join(failed))
    return result


def failures(rows: List[dict]) -> List[str]:
    """One line per child process that failed: the size, the step and its last stderr line."""
    out = []
    for row in rows:
        for step in ("baseline", "preprocess", "train", "batching", "baseline_train", "baseline_batching"):
            r = row.get(step)
            if r and r.get("rc"):
                tail = (r.get("error_tail") or ["?"])[-1].strip()
                out.append(f"{row['pairs']} pairs: {step} failed (exit {r['rc']}): {tail}")
    return out


if __name__ == "__main__":
    main()
