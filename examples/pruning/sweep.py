"""Prune one checkpoint to each share, score and time every pruned model: the rows of a pruning
table (seqkit-prune, seqkit-generate and seqkit-score, each in its own process, one at a time).

    python examples/pruning/sweep.py CHECKPOINT DATA OUT_DIR [--shares 0,0.1,...] [--methods heads,magnitude]
        [--split SPLIT] [--step 0.1] [--repeats 3] [--score-only]

Choose on one split, report on another: head importance is measured on DATA's `valid` split; a
method's settings (--step, the methods) are compared with --split valid and the chosen ones run
once on the reported split. Translation: BLEU and chrF2 at beam 5 (reported split: test),
sentences/s at batch 64 and 1. Classification: accuracy (reported split: valid1, GLUE's dev in a
folder prepared with carve_valid=, else valid), examples/s at batch 64. Each speed is the median of
--repeats runs (every run kept in the row); --score-only (a selection sweep) scores without timing.
Writes OUT_DIR/results.jsonl (one row per method and share), results.md, each seqkit-prune's log
(OUT_DIR/TAG/prune.log: the heads removed in each round) and, with matplotlib, pruning.png."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from seqkit.core.checkpoints import unique_tensors

# generate-and-score: the distillation example's, one copy for both recipes
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "distillation", "multi30k"))
from evaluate import generate, score, sh  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("checkpoint")
p.add_argument("data")
p.add_argument("out")
p.add_argument("--shares", default="0,0.1,0.2,0.3,0.4,0.5,0.6")
p.add_argument("--methods", default="heads,magnitude")
p.add_argument("--threads", type=int, default=2)
p.add_argument("--split", help="the split scored (default: test for translation; valid1 if DATA has it, else valid)")
p.add_argument("--step", type=float, help="seqkit-prune step= for method heads (default: seqkit-prune's)")
p.add_argument("--repeats", type=int, default=1, help="timed runs per batch size; the row holds their median and each")
p.add_argument("--score-only", action="store_true", help="one run at batch 64 for the score, no batch-1 timing")
args = p.parse_args()
os.makedirs(args.out, exist_ok=True)
state = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
translation = state["cfg"]["task"]["name"] == "translation"
del state
split = args.split or ("test" if translation else
                       "valid1" if os.path.exists(os.path.join(args.data, "valid1.input.idx")) else "valid")
print(f"scoring split {split}; head importance on {args.data}'s valid split", file=sys.stderr)


def evaluate(ck, tag):
    row = {"split": split}
    for batch in (64, 1) if translation and not args.score_only else (64,):
        out = os.path.join(args.out, tag, f"b{batch}")
        runs = [generate(ck, args.data, split, out, 5 if translation else None, batch, args.threads)
                for _ in range(1 if args.score_only else args.repeats)]
        row[f"per_s_b{batch}"], row[f"runs_b{batch}"] = statistics.median(runs), runs
        if batch == 64:
            scores = score(f"{out}/generate-{split}.txt", ["bleu", "chrf"] if translation else None)
            row.update({"bleu": scores["bleu"], "chrf": round(scores["chrf"], 2)} if translation
                       else {"accuracy": scores["accuracy"]})
    return row


rows = []
for method in args.methods.split(","):
    for share in map(float, args.shares.split(",")):
        tag = f"{method}-{share:g}"
        ck = args.checkpoint
        info = ""
        if share > 0:
            ck = os.path.join(args.out, f"{tag}.pt")
            t0 = time.time()
            # the data and step are head pruning's (magnitude pruning refuses them)
            heads = [f"data={args.data}", "subset=valid"] if method == "heads" else []
            heads += [f"step={args.step}"] if args.step is not None and method == "heads" else []
            r = sh(["seqkit-prune", f"path={args.checkpoint}", f"output={ck}", f"method={method}", f"share={share}",
                    f"threads={args.threads}", *heads])
            os.makedirs(os.path.join(args.out, tag), exist_ok=True)
            with open(os.path.join(args.out, tag, "prune.log"), "w", encoding="utf-8") as f:
                f.write(r.stderr)
            info = r.stderr.strip().splitlines()[-1].split("| ")[-1]
            prune_s = round(time.time() - t0, 1)
        pruned = torch.load(ck, map_location="cpu", weights_only=False)
        unique = unique_tensors(pruned["model"])
        params = sum(t.numel() for t in unique)
        nonzero = sum(int(t.count_nonzero()) for t in unique if t.is_floating_point())
        heads = sum(len(h) for h in pruned["cfg"]["model"].get("pruned_heads", {}).values())
        row = {"method": method, "share": share, "step": args.step, "parameters": params, "nonzero": nonzero, "heads_removed": heads,
               "prune_s": prune_s if share > 0 else 0.0, "seqkit_prune": info, **evaluate(ck, tag),
               "when": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
        print(json.dumps(row), flush=True)
        rows.append(row)
        if share > 0:
            os.remove(ck)  # (kept: the rows; a pruned model is one seqkit-prune away)

with open(os.path.join(args.out, "results.jsonl"), "w", encoding="utf-8") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows)
score = "bleu" if translation else "accuracy"
head = f"| method | share | parameters | nonzero | heads removed | {score} | " + (
    "chrF2 | sentences/s b64 | sentences/s b1 |" if translation else "examples/s b64 |")
lines = [head, "| --- |" * 1 + " --- |" * (head.count("|") - 2)]
for r in rows:
    cells = [r["method"], f"{r['share']:.0%}", f"{r['parameters']:,}", f"{r['nonzero']:,}", r["heads_removed"], r[score]]
    cells += [r["chrf"], r["per_s_b64"], r.get("per_s_b1", "-")] if translation else [r["per_s_b64"]]
    lines.append("| " + " | ".join(str(c) for c in cells) + " |")
with open(os.path.join(args.out, "results.md"), "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
subprocess.run(["seqkit-plot", "pruning", os.path.join(args.out, "results.jsonl"),
                f"output={os.path.join(args.out, 'pruning.png')}"])
