"""The three seeds of the word2vec-against-gensim benchmark in one JSON (README.md, Results): per
mode, every run's raw words/s ratio (seqkit over gensim) with its min, median and max, the two
engines' median raw words/s, and per seed (round 1; both rounds train the same vectors) the
analogies, the overlap and the validation loss with their mean and sample sd.

    python examples/word2vec/seeds_summary.py benchmarks/results/word2vec_gensim_pair_sgd_prefetch_2026-11-30_seed{}.json \\
        > benchmarks/results/word2vec_gensim_pair_sgd_prefetch_2026-11-30_summary.json
"""

import json
import statistics
import sys


def main() -> None:
    pattern = sys.argv[1]
    out: dict = {"sources": [pattern.format(seed) for seed in (1, 2, 3)]}
    runs = [json.load(open(path, encoding="utf-8")) for path in out["sources"]]
    for mode in ("skipgram", "cbow"):
        ratios = [r for run in runs for r in run[mode]["raw_words_per_s_ratio"]]
        row: dict = {"ratios": ratios, "ratio_min": min(ratios), "ratio_median": round(statistics.median(ratios), 3),
                     "ratio_max": max(ratios)}
        for engine in ("seqkit", "gensim"):
            row[f"{engine}_raw_words_per_s_median"] = round(statistics.median(
                r["raw_words_per_s"] for run in runs for r in run[mode][engine]), 1)
        firsts = [(run[mode]["seqkit"][0], run[mode]["gensim"][0]) for run in runs]
        per_seed = {"seqkit_analogies": [s["analogies"]["total"][0] for s, _ in firsts],
                    "gensim_analogies": [g["analogies"]["Total accuracy"][0] for _, g in firsts],
                    "overlap": [s["overlap_with_gensim"]["mean"] for s, _ in firsts],
                    "valid_loss": [s["best_valid_loss"] for s, _ in firsts]}
        for k, xs in per_seed.items():
            row[k] = {"per_seed": xs, "mean": round(statistics.mean(xs), 3), "sd": round(statistics.stdev(xs), 3)}
        out[mode] = row
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
