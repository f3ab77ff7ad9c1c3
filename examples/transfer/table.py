"""The transfer table of one task: every row finetune.sh wrote under WORK_DIR/runs/TASK, as markdown.
Runs of one body and mode with several seeds (SEED=N, folders ...-sN) make one row: the reported
score as mean ± sample sd over the seeds, each seed's score with the epoch chosen on the held-out
split, and the mean wall time (per device where it is not the CPU).
Usage: python table.py WORK_DIR TASK"""

import glob
import json
import os
import statistics
import sys
from collections import defaultdict

work, task = sys.argv[1:3]
metric = "f1" if task == "conll" else "accuracy"
reported = "testb entity F1" if task == "conll" else "dev accuracy"
groups = defaultdict(list)
for path in sorted(glob.glob(os.path.join(work, "runs", task, "*", "row.json"))):
    with open(path, encoding="utf-8") as f:
        r = json.load(f)
    groups[(r["body"], r["mode"], r.get("lr"))].append(r)

print(f"| body | mode | {reported}: mean ± sd | each seed (epoch chosen on the held-out split) "
      "| trainable parameters | share | weights saved | updates | wall |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for (body, mode, _), runs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    runs.sort(key=lambda r: r.get("seed", 1))
    scores = [r[metric] for r in runs]
    mean = statistics.mean(scores)
    spread = f"{mean:.2f} ± {statistics.stdev(scores):.2f}" if len(scores) > 1 else f"{mean:.2f} (one seed)"
    each = ", ".join(f"s{r.get('seed', 1)} {r[metric]:.2f} (e{r.get('chosen_epoch', '?')})" for r in runs)
    r = runs[0]
    share = 100.0 * r["trainable"] / max(r["total"], 1)
    # wall time per device (a row's seeds may have run on different machines)
    devices = sorted({x.get("device", "cpu") for x in runs})
    wall = ", ".join(f"{statistics.mean(x['wall_s'] for x in runs if x.get('device', 'cpu') == d) / 60:.1f} min"
                     + (f" ({d})" if len(devices) > 1 or d != "cpu" else "") for d in devices)
    print(f"| {body} | {mode} | {spread} | {each} | {r['trainable']:,} of {r['total']:,} | {share:.3g}% "
          f"| {r['weights_bytes'] / 1e6:.3f} MB | {r['updates']} | {wall} |")
