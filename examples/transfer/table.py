"""The transfer table of one task: every row finetune.sh wrote under WORK_DIR/runs/TASK, as markdown.
Usage: python table.py WORK_DIR TASK"""

import glob
import json
import os
import sys

work, task = sys.argv[1:3]
metric = "f1" if task == "conll" else "accuracy"
rows = []
for path in sorted(glob.glob(os.path.join(work, "runs", task, "*", "row.json"))):
    with open(path, encoding="utf-8") as f:
        rows.append(json.load(f))
print(f"| body | mode | {metric} | trainable parameters | share | weights saved | checkpoint file | updates | wall |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in sorted(rows, key=lambda r: (r["body"], r["mode"])):
    share = 100.0 * r["trainable"] / max(r["total"], 1)
    print(f"| {r['body']} | {r['mode']} | {r[metric]:.2f} | {r['trainable']:,} of {r['total']:,} | {share:.3g}% "
          f"| {r['weights_bytes'] / 1e6:.3f} MB | {r['checkpoint_bytes'] / 1e6:.2f} MB | {r['updates']} "
          f"| {r['wall_s'] / 60:.1f} min |")
