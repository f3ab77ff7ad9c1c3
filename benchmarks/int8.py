"""fp32 against int8 weights (`quantize=int8`) for one classifier, tagger or language-model checkpoint:
its score and its speed, each run a process of its own (`seqkit-generate`, or `seqkit-eval-lm` for a
language model), the two precisions alternated.

    python benchmarks/int8.py CHECKPOINT DATA [--split valid] [--rounds 3] [--batch 64] [--threads 2]
                              [--tokens-per-sample 128]

Prints one JSON line: the CPU (model, bf16/AMX flags, an fp32 matmul peak measured before and after),
and per precision the scores (seqkit-score's figures on the split: accuracy, macro-F1, F1 and MCC
for classification; entity F1 and token accuracy for tagging; perplexity per token and per word for a
language model) and examples/s (tokens/s for a language model) of every round with their median.
Translation has `benchmarks/translation.py --checkpoint` (its *_int8 fields)."""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import torch

from seqkit.core.checkpoints import load
from seqkit.core.cpu import cpu_info
from seqkit.core.errors import SeqkitError
from translation import matmul_peak  # (benchmarks/translation.py, beside this script)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"int8.py: {' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    return r


def one(args, quantize, out):
    """Score the split once at `quantize` (none or int8): (examples or tokens /s, {metric: score})."""
    if args.lm:
        r = run(["seqkit-eval-lm", f"path={args.checkpoint}", f"task.data={args.data}", f"gen_subset={args.split}",
                 f"tokens_per_sample={args.tokens_per_sample}", f"quantize={quantize}", f"common.threads={args.threads}"])
        e = json.loads(r.stdout.strip().splitlines()[-1])
        return e["tokens_per_s"], {k: e[k] for k in ("ppl", "word_ppl", "loss") if k in e}
    r = run(["seqkit-generate", f"path={args.checkpoint}", f"task.data={args.data}", f"gen_subset={args.split}",
             f"batch_size={args.batch}", f"results_path={out}", f"quantize={quantize}",
             f"common.threads={args.threads}"])
    per_s = float(re.search(r"\(([\d.]+) (?:sentences|examples)/s\)", r.stderr).group(1))
    s = run(["seqkit-score", f"hyp={out}/generate-{args.split}.txt", "output_format=json"])
    scores = {m["metric"]: m["score"] for m in map(json.loads, s.stdout.splitlines())}
    return per_s, scores


def main():
    p = argparse.ArgumentParser()
    p.add_argument("checkpoint")
    p.add_argument("data")
    p.add_argument("--split", default="valid")
    p.add_argument("--rounds", type=int, default=3, help="fp32/int8 alternations (a speed ratio: the median of >= 3)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tokens-per-sample", type=int, default=128, help="a language model's scored block length")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    try:
        args.lm = load(args.checkpoint)["cfg"]["task"]["name"] == "language_modeling"
    except SeqkitError as e:
        sys.exit(f"int8.py: error: {e}")
    row = {**cpu_info(), "checkpoint": os.path.abspath(args.checkpoint), "split": args.split,
           **({"tokens_per_sample": args.tokens_per_sample} if args.lm else {"batch": args.batch}), "threads": args.threads,
           "fp32_matmul_peak_gflops_before": round(matmul_peak(torch.float32) / 1e9)}
    with tempfile.TemporaryDirectory() as tmp:
        for q in ("none", "int8"):
            row[q] = {"per_s_rounds": []}
        for i in range(args.rounds):
            for q in ("none", "int8"):
                per_s, scores = one(args, q, os.path.join(tmp, f"{q}{i}"))
                row[q]["per_s_rounds"].append(per_s)
                row[q]["scores"] = scores  # the same every round (the weights are fixed)
    for q in ("none", "int8"):
        row[q]["per_s"] = round(statistics.median(row[q]["per_s_rounds"]), 1)
    row["speedup"] = round(row["int8"]["per_s"] / row["none"]["per_s"], 2)  # of the medians
    row["speedup_rounds"] = [round(b / a, 2) for a, b in zip(row["none"]["per_s_rounds"], row["int8"]["per_s_rounds"])]
    row["fp32_matmul_peak_gflops_after"] = round(matmul_peak(torch.float32) / 1e9)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
