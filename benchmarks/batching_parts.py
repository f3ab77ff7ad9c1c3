"""Where an epoch's token-budget batching spends its time, step by step, as the corpus grows (issue 63).

``seqkit.data.batching.token_budget_batches`` at 1M / 4M / 16M examples, split into its steps (the
seeded permutation, drawn in a thread while the sort keys and the sorted costs are counted; the
counting sort of the permutation by key; the greedy cut, the slicing into batches, the shuffle of
the batches) and timed whole (``whole``), medians of ``--rounds``, with each step's log-log slope over the sizes (1 = linear). Two
references of the same sizes: a sequential pass (a sum of the int32 sizes) and a random gather (an
int32 array read through a permutation). The example lengths are synthetic (uniform 3..60, seed 0),
which only the sort's and the cut's constants depend on. Checks the steps' batches against
``token_budget_batches``. Prints one JSON line:

    python benchmarks/batching_parts.py [--sizes 1000000,4000000,16000000] [--rounds 5] [--warmup 1] [--max-tokens 4096]
        [--baseline-src OLD]   # and the whole call of an older checkout against this one, each in its own process
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))

STEPS = ("permutation_beside_keys", "sort_by_key", "cut", "slice", "shuffle")


def one_epoch(sizes: np.ndarray, max_tokens: int, seed: int, epoch: int) -> Dict[str, float]:
    """The seconds of each step of ``token_budget_batches(sizes, max_tokens, seed=seed, epoch=epoch)``,
    done as it does them (the permutation drawn in a thread while the keys and costs are made, the
    other gathers in two threads), and of the whole call (``whole``, after the steps' arrays are
    freed but their batches); asserts the same batches."""
    from seqkit.data import batching as b
    from seqkit.data import orderkernels

    times: Dict[str, float] = {}

    def timed(name: str, fn: Callable):
        t = time.perf_counter()
        out = fn()
        times[name] = time.perf_counter() - t
        return out

    rng = b.epoch_rng(seed, epoch)

    def draw_and_count():
        drawn = b.Drawn(rng, len(sizes))  # (n,) random swaps, in its own thread
        keys, values, _ = b.sort_key(sizes, None)
        counts = np.bincount(keys, minlength=len(values))
        cost = np.repeat(values, counts)  # sequential: the sorted keys
        return drawn.result(), keys, counts, cost

    perm, keys, counts, cost = timed("permutation_beside_keys", draw_and_count)
    order = timed("sort_by_key", lambda: orderkernels.sort_by_key(perm, keys, counts))  # (n,) random reads
    ends = timed("cut", lambda: b.batch_ends(cost, max_tokens).tolist())
    batches = timed("slice", lambda: [order[a:e] for a, e in zip([0] + ends[:-1], ends)])
    timed("shuffle", lambda: rng.shuffle(batches))
    del perm, keys, counts, cost, ends  # freed before the whole call, as its own steps free theirs
    same = timed("whole", lambda: b.token_budget_batches(sizes, max_tokens, seed=seed, epoch=epoch))
    assert len(same) == len(batches) and all(np.array_equal(x, y) for x, y in zip(same, batches))
    return times


def references(n: int) -> Dict[str, float]:
    """Seconds of a sequential pass and of a random gather over ``n`` int32 values."""
    values = np.arange(n, dtype=np.int32)
    idx = np.random.default_rng(1).permutation(n)
    t = time.perf_counter()
    int(values.sum(dtype=np.int64))
    t1 = time.perf_counter()
    values[idx].sum(dtype=np.int64)
    t2 = time.perf_counter()
    return {"sequential_sum": t1 - t, "random_gather": t2 - t1}


def whole_only(sizes: List[int], rounds: int, warmup: int, max_tokens: int) -> List[float]:
    """Median seconds of the whole ``token_budget_batches`` call per size, after ``warmup`` untimed
    epochs: what ``--baseline-src`` runs in a child process for each code."""
    from seqkit.core.allocator import keep_freed_memory
    from seqkit.data import batching as b

    keep_freed_memory()
    out = []
    for n in sizes:
        lengths = np.random.default_rng(0).integers(3, 61, n).astype(np.int32)
        times = []
        for e in range(warmup + rounds):
            t = time.perf_counter()
            b.token_budget_batches(lengths, max_tokens, seed=1, epoch=e + 1)
            times.append(time.perf_counter() - t)
        out.append(statistics.median(times[warmup:]))
    return out


def whole_in_child(src: str, n: int, args: argparse.Namespace) -> float:
    """``whole_only`` for one size in a fresh process importing seqkit from ``src``."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--whole-only", "--sizes", str(n), "--rounds",
                           str(args.rounds), "--warmup", str(args.warmup), "--max-tokens", str(args.max_tokens)],
                          env=env, capture_output=True, text=True, check=True)
    got = json.loads(done.stdout)
    assert os.path.samefile(got["seqkit"], src), f"the child imported seqkit from {got['seqkit']}, not {src}"
    return got["whole"][0]


def slope(xs: List[int], ys: List[float]) -> float:
    """The least-squares slope of log(y) on log(x)."""
    lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-9)) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (c - my) for a, c in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000000,4000000,16000000", help="examples, comma-separated")
    p.add_argument("--rounds", type=int, default=5, help="epochs timed per size (medians reported)")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--warmup", type=int, default=1, help="untimed epochs per size first (the memory's first touch)")
    p.add_argument("--baseline-src", help="a seqkit checkout: its whole call and this one's, each in a child process, "
                                          "alternating per size (A/B, reported as whole_ab)")
    p.add_argument("--whole-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    sizes_list = [int(s) for s in args.sizes.split(",")]
    if args.whole_only:  # a child of --baseline-src: the seqkit on PYTHONPATH
        import seqkit

        print(json.dumps({"whole": whole_only(sizes_list, args.rounds, args.warmup, args.max_tokens),
                          "seqkit": os.path.dirname(os.path.dirname(seqkit.__file__))}))
        return
    sys.path.insert(0, HERE)
    from translation import matmul_peak

    from seqkit.core.allocator import keep_freed_memory
    from seqkit.core.cpu import cpu_info
    from seqkit.data import orderkernels

    keep_freed_memory()  # as every seqkit command does (cli/common.py): freed arrays are reused, not unmapped

    out = {"benchmark": "batching_parts", "max_tokens": args.max_tokens, "rounds": args.rounds,
           "warmup": args.warmup, "orderkernels": orderkernels.available(), **cpu_info(),
           "matmul_peak_fp32_gflops": round(matmul_peak(torch.float32) / 1e9, 1), "sizes": sizes_list, "steps": {}}
    per_size = []
    for n in sizes_list:
        lengths = np.random.default_rng(0).integers(3, 61, n).astype(np.int32)
        for e in range(args.warmup):
            one_epoch(lengths, args.max_tokens, seed=1, epoch=args.rounds + e + 1)
        rounds = [one_epoch(lengths, args.max_tokens, seed=1, epoch=e + 1) for e in range(args.rounds)]
        refs = [references(n) for _ in range(args.rounds)]
        row = {k: statistics.median(r[k] for r in rounds) for k in STEPS}
        row["total"] = statistics.median(sum(r[k] for k in STEPS) for r in rounds)
        row["whole"] = statistics.median(r["whole"] for r in rounds)
        row.update({k: statistics.median(r[k] for r in refs) for k in refs[0]})
        per_size.append(row)
    for k in per_size[0]:
        values = [row[k] for row in per_size]
        out["steps"][k] = {"seconds": [round(v, 4) for v in values], "slope": round(slope(sizes_list, values), 3)}
    if args.baseline_src:
        ab: Dict[str, List[float]] = {"baseline": [], "this": []}
        for n in sizes_list:
            ab["baseline"].append(whole_in_child(args.baseline_src, n, args))
            ab["this"].append(whole_in_child(os.path.dirname(HERE), n, args))
        out["whole_ab"] = {"baseline_src": os.path.abspath(args.baseline_src),
                           **{k: {"seconds": [round(v, 4) for v in vs], "slope": round(slope(sizes_list, vs), 3)}
                              for k, vs in ab.items()},
                           "ratio": [round(a / b, 3) for a, b in zip(ab["baseline"], ab["this"])]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
