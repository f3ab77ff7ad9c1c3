"""Score the recipe's test: the model's answers (seqkit-generate outputs) against sympy's own.

    python examples/symbolic_integration/evaluate.py BEAM1.txt BEAM10.txt OUT.json [--workers 2]
        [--check-limit 5] [--sympy-limit 10] [--no-sympy]

BEAM1.txt and BEAM10.txt are seqkit-generate's S-/T-/D- lines on the same test split, at beam 1
and at beam 10 with nbest 10. Printed and written to OUT.json:

- exact match at beam 1: the best hypothesis is the reference function, token for token;
- verified accuracy at beam 1 and at beam 10: a hypothesis (at beam 10: any of the 10) whose
  derivative sympy shows equal to the problem, the ``integral`` verifier
  (seqkit/symbolic/check.py), ``--check-limit`` CPU seconds a check, run in worker processes that a
  hung check cannot stop (seqkit.verify.runner; killed after twice the limit in wall time);
- sympy: ``sympy.integrate(problem, x)`` on every test problem in worker processes, at most
  ``--sympy-limit`` CPU seconds each: the share it solved (an answer with no unevaluated
  Integral whose derivative is the problem) and its mean CPU seconds per problem (a problem cut off
  counts the limit).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from collections import defaultdict
from functools import partial
from pathlib import Path
from typing import Dict, List, Tuple

from seqkit.symbolic.verifier import IntegralConfig
from seqkit.verify.runner import VerifierPool


def read_generate(path: Path) -> Tuple[Dict[int, str], Dict[int, str], Dict[int, List[str]]]:
    """Sources, references and hypotheses (best first) by sentence id, from S-/T-/D- lines."""
    sources, targets, hypos = {}, {}, defaultdict(list)
    for line in path.read_text(encoding="utf-8").splitlines():
        kind, _, rest = line.partition("-")
        sid, _, text = rest.partition("\t")
        if kind == "S":
            sources[int(sid)] = text
        elif kind == "T":
            targets[int(sid)] = text
        elif kind == "D":
            hypos[int(sid)].append(text.partition("\t")[2])
    return sources, targets, hypos


def verified_share(pool: VerifierPool, sources: Dict[int, str], hypos: Dict[int, List[str]]) -> float:
    ids = sorted(sources)
    verdicts = pool.first_verified([(sources[i], hypos.get(i, [])) for i in ids])
    return sum(v.rank is not None for v in verdicts) / len(ids)


def sympy_baseline(sources: List[str], limit: float, workers: int) -> Dict[str, float]:
    from seqkit.symbolic.check import sympy_integrate

    with multiprocessing.Pool(workers, maxtasksperchild=20) as pool:
        results = pool.map(partial(sympy_integrate, limit=limit), sources, chunksize=1)
    return {"solved": sum(s for s, _ in results) / len(results),
            "cpu_seconds_per_problem": statistics.mean(t for _, t in results),
            "cut_off": sum(t >= limit for _, t in results), "limit_cpu_seconds": limit}


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("beam1", type=Path)
    ap.add_argument("beam10", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--check-limit", type=float, default=5.0)
    ap.add_argument("--sympy-limit", type=float, default=10.0)
    ap.add_argument("--no-sympy", action="store_true", help="skip sympy's own integrate (the slow part)")
    args = ap.parse_args(argv)
    sources, targets, best = read_generate(args.beam1)
    sources10, _, nbest = read_generate(args.beam10)
    if not sources or sources != sources10:
        ap.error(f"{args.beam1} and {args.beam10} must hold the same, non-empty, test split")
    n, start = len(sources), time.perf_counter()
    report = {"test_problems": n, "exact_match_beam1": sum(best[i][:1] == [targets.get(i)] for i in sources) / n}
    cfg = IntegralConfig(time_limit=args.check_limit)
    with VerifierPool(cfg, timeout=2 * args.check_limit, workers=args.workers) as pool:
        report["verified_beam1"] = verified_share(pool, sources, {i: h[:1] for i, h in best.items()})
        report["verified_beam10"] = verified_share(pool, sources, nbest)
        report["verifier"] = {"check_limit_cpu_seconds": args.check_limit, "counts": vars(pool.counts)}
    report["beam10_hypotheses_per_problem"] = statistics.mean(len(nbest.get(i, [])) for i in sources)
    if not args.no_sympy:
        report["sympy"] = sympy_baseline([sources[i] for i in sorted(sources)], args.sympy_limit, args.workers)
    report["seconds"] = round(time.perf_counter() - start, 1)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
