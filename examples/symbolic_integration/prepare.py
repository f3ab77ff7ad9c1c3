"""Make the recipe's (derivative, function) pairs: train/valid/test text files of prefix tokens.

    python examples/symbolic_integration/prepare.py OUT_DIR [--train 100000 --valid 1000 --test 1000]
        [--seed 1 --max-ops 6 --max-src-len 128 --max-tgt-len 64 --time-limit 1 --workers 2 --simplify full]

Writes OUT_DIR/{train,valid,test}.{deriv,func} (one problem a line: the derivative in .deriv, the
function in .func, tokens separated by spaces) and OUT_DIR/stats.json (what the attempts came to,
pairs per second, lengths, vocabulary). Chunks of random trees, each with its own seed
(``SEED-CHUNK``), are made by ``--workers`` processes and taken in chunk order, so the files depend
on the seed and settings, not on the worker count (seqkit/symbolic/generator.py says what else).

Every problem is unique: a pair whose derivative takes the same values at the key points as an
earlier one's (the same function up to a constant, however sympy wrote it) is dropped. The unique
problems are then shuffled with the seed and split, so no test or valid function (up to a
constant) is in train, and the splits are drawn from the same distribution of unique problems.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import multiprocessing
import random
import resource
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from seqkit.symbolic.generator import SIMPLIFIERS, GeneratorConfig, Pair, make_pairs

CHUNK = 50  # attempts per chunk: one task of a worker


def generate(n: int, seed: int, cfg: GeneratorConfig, workers: int,
             cache: Optional[Path] = None) -> Tuple[List[Pair], Counter, float, float]:
    """The first ``n`` unique pairs of the chunks ``SEED-0``, ``SEED-1``, ..., what all attempts came
    to, the seconds it took and the CPU seconds its workers took. With ``cache``, each chunk's
    result is kept there as it comes (a folder per seed and config), so a run stopped half-way goes
    on where it stopped instead of starting again; the pairs are the same either way."""
    start, pairs, seen, counts, chunk = time.perf_counter(), [], set(), Counter(), 0
    cpu_start = _children_cpu()
    make = functools.partial(make_pairs, attempts=CHUNK, cfg=cfg)
    folder = None
    if cache is not None:
        tag = hashlib.sha256(json.dumps([seed, CHUNK, dataclasses.asdict(cfg)]).encode()).hexdigest()[:12]
        folder = cache / f"seed{seed}-{tag}"
        folder.mkdir(parents=True, exist_ok=True)
    reported = time.perf_counter()
    with multiprocessing.Pool(workers) as pool:
        while len(pairs) < n:
            seeds = [f"{seed}-{c}" for c in range(chunk, chunk + 4 * workers)]
            chunk += len(seeds)
            for made, why, kept in _chunks(pool, make, seeds, folder):
                counts.update(why)
                if kept:
                    counts["chunks from an earlier run"] += 1
                for p in made:
                    if p.key in seen:
                        counts["duplicate"] += 1
                    elif len(pairs) < n:
                        seen.add(p.key)
                        pairs.append(p)
            if time.perf_counter() - reported > 60:
                reported = time.perf_counter()
                print(f"{len(pairs)} of {n} unique pairs after {chunk} chunks, {reported - start:.0f}s", file=sys.stderr)
            if len(pairs) < n and chunk * CHUNK > 100 * n:  # settings that allow too few distinct problems
                raise SystemExit(f"prepare.py: {chunk * CHUNK} attempts gave only {len(pairs)} unique pairs")
        pool.close()
        pool.join()  # the workers reaped: their CPU time is counted
    return pairs, counts, time.perf_counter() - start, _children_cpu() - cpu_start


def _chunks(pool, make, seeds: List[str], folder: Optional[Path]) -> List[Tuple[List[Pair], Counter, bool]]:
    """``make`` of each seed, in order, and whether it was read from ``folder`` (kept by an earlier
    run) rather than made now (and kept)."""
    if folder is None:
        return [(made, why, False) for made, why in pool.map(make, seeds)]
    paths = [folder / f"{s}.json" for s in seeds]
    todo = [s for s, path in zip(seeds, paths) if not path.is_file()]
    for s, (made, why) in zip(todo, pool.map(make, todo) if todo else []):
        tmp = folder / f"{s}.json.tmp"
        tmp.write_text(json.dumps([[list(p) for p in made], dict(why)]), encoding="utf-8")
        tmp.replace(folder / f"{s}.json")  # whole or absent: a killed run leaves no torn chunk
    out = []
    for s, path in zip(seeds, paths):
        made, why = json.loads(path.read_text(encoding="utf-8"))
        out.append(([Pair(src, tgt, tuple(key)) for src, tgt, key in made], Counter(why), s not in todo))
    return out


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def split(pairs: List[Pair], n_valid: int, n_test: int, seed: int) -> Dict[str, List[Pair]]:
    """The unique pairs shuffled with ``seed``: test first, then valid, the rest train."""
    order = list(pairs)
    random.Random(seed).shuffle(order)
    return {"test": order[:n_test], "valid": order[n_test:n_test + n_valid], "train": order[n_test + n_valid:]}


def lengths(pairs: List[Pair], side: str) -> Dict[str, float]:
    sizes = sorted(len(getattr(p, side).split()) for p in pairs)
    return {"mean": round(statistics.mean(sizes), 2), "median": statistics.median(sizes),
            "p95": sizes[int(0.95 * (len(sizes) - 1))], "max": sizes[-1]}


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--train", type=int, default=100000)
    ap.add_argument("--valid", type=int, default=1000)
    ap.add_argument("--test", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-ops", type=int, default=GeneratorConfig.max_ops)
    ap.add_argument("--max-src-len", type=int, default=GeneratorConfig.max_src_len)
    ap.add_argument("--max-tgt-len", type=int, default=GeneratorConfig.max_tgt_len)
    ap.add_argument("--time-limit", type=float, default=GeneratorConfig.time_limit)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--simplify", choices=list(SIMPLIFIERS), default=GeneratorConfig.simplify,
                    help="how f and f' are simplified: full (sympy.simplify), together (sympy.together: one "
                         "denominator only, tens of times faster), none")
    ap.add_argument("--cache", type=Path, help="keep each chunk's pairs here as they come, so that a stopped run "
                                               "goes on where it stopped (default OUT/.chunks; 'none' keeps nothing)")
    args = ap.parse_args(argv)
    if min(args.train, args.valid, args.test) < 1 or args.max_ops < 1 or args.workers < 1:
        ap.error("--train, --valid, --test, --max-ops and --workers must be at least 1")
    cfg = GeneratorConfig(max_ops=args.max_ops, max_src_len=args.max_src_len, max_tgt_len=args.max_tgt_len,
                          time_limit=args.time_limit, simplify=args.simplify)
    cache = None if str(args.cache) == "none" else (args.cache or args.out / ".chunks")
    pairs, counts, seconds, cpu = generate(args.train + args.valid + args.test, args.seed, cfg, args.workers, cache)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, part in split(pairs, args.valid, args.test, args.seed).items():
        for ext, side in (("deriv", "src"), ("func", "tgt")):
            (args.out / f"{name}.{ext}").write_text("".join(getattr(p, side) + "\n" for p in part), encoding="utf-8")
    settings = vars(args) | {"out": str(args.out), "cache": None if cache is None else str(cache)}
    stats = {"settings": settings, "attempts": dict(counts.most_common()),
             "seconds": round(seconds, 1), "pairs_per_second": round(len(pairs) / seconds, 2),
             "worker_cpu_seconds": round(cpu, 1),  # of this run: chunks from an earlier one cost it nothing
             "pairs_per_cpu_second": None if counts["chunks from an earlier run"] else round(len(pairs) / max(cpu, 1e-9), 2),
             "vocabulary": sorted({t for p in pairs for t in (p.src + " " + p.tgt).split()}),
             "src_length": lengths(pairs, "src"), "tgt_length": lengths(pairs, "tgt")}
    (args.out / "stats.json").write_text(json.dumps(stats, indent=1) + "\n", encoding="utf-8")
    rate = (f"{stats['pairs_per_cpu_second']} pairs per CPU second" if stats["pairs_per_cpu_second"] is not None
            else "no rate per CPU second: part of the pairs came from an earlier run's chunks")
    print(f"{len(pairs)} unique pairs in {seconds:.1f}s ({stats['pairs_per_second']} pairs/s, {args.workers} "
          f"workers; {rate}); attempts: {dict(counts.most_common())}; "
          f"derivative length {stats['src_length']}, "
          f"function length {stats['tgt_length']}; vocabulary {len(stats['vocabulary'])} tokens", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
