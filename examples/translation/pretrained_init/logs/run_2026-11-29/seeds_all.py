"""Test BLEU and best valid loss of every init, size and seed in W, with mean ± sd over the seeds
(statistics.stdev: the sample sd); writes seeds_all.json beside this file and prints the table rows.

    python seeds_all.py /work/runs/pinit/W
"""
import json
import os
import re
import statistics as st
import sys

W = sys.argv[1] if len(sys.argv) > 1 else "/work/runs/pinit/W"


def bleu(step):
    text = open(f"{W}/{step}/test/score.txt").read()
    return float(re.search(r"BLEU = ([\d.]+)", text).group(1))


def best(step):
    log = open(f"{W}/logs/{step}.log").read()
    rows = [(int(m.group(1)), float(m.group(2)))
            for m in re.finditer(r"\[valid\] epoch \d+ \| update (\d+) \| loss ([\d.]+)", log)]
    low = min(loss for _, loss in rows)
    return f"{low} ({[u for u, loss in rows if loss == low][0]})"


def wall(step):
    return int(re.findall(r"train_wall (\d+)", open(f"{W}/logs/{step}.log").read())[-1])


out = {}
for data in ("data-bin-10", "data-bin"):
    for init in ("random", "xlm", "mass", "bart"):
        steps = [f"ft-{init}-{data}"] + [f"ft-{init}-{data}-seed{s}" for s in (2, 3)]
        steps = [s for s in steps if os.path.exists(f"{W}/{s}/test/score.txt")]
        b = [bleu(s) for s in steps]
        row = {"steps": steps, "bleu": b, "best_valid": [best(s) for s in steps], "train_wall": [wall(s) for s in steps]}
        if len(b) > 1:
            row["mean"], row["sd"] = round(st.mean(b), 2), round(st.stdev(b), 2)
        out[f"{init} {data}"] = row
        print(init, data, " / ".join(f"{x:.2f}" for x in b),
              f"{row.get('mean', '–')} ± {row.get('sd', '–')}", " / ".join(row["best_valid"]), row["train_wall"])
json.dump(out, open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds_all.json"), "w"), indent=1)
# the differences of the means the README names, per size
diffs = {}
for data in ("data-bin-10", "data-bin"):
    for a, b in (("xlm", "random"), ("mass", "random"), ("bart", "random"), ("bart", "xlm"), ("xlm", "mass"),
                 ("bart", "mass")):
        diffs[f"{a} - {b} {data}"] = round(out[f"{a} {data}"]["mean"] - out[f"{b} {data}"]["mean"], 2)
print(diffs)
out["differences of the means"] = diffs
json.dump(out, open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds_all.json"), "w"), indent=1)
