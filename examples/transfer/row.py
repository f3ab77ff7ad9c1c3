"""One row of a transfer table from a fine-tuning run's folder (finetune.sh): the score, the
trainable-parameter line's figures, the best checkpoint's size (the file, and the model tensors it
holds: what serving needs next to the base) and the wall time.
Usage: python row.py RUN_DIR TASK BODY MODE SECONDS [LEARNING_RATE]"""

import json
import os
import re
import sys

run, task, body, mode, seconds = sys.argv[1:6]
rate = float(sys.argv[6]) if len(sys.argv) > 6 else None
log = open(os.path.join(run, "train.log"), encoding="utf-8").read()
trainable, total = re.search(r"trainable parameters: ([\d,]+) of ([\d,]+)", log).groups()
score = open(os.path.join(run, "score.txt"), encoding="utf-8").read()
metric = "f1" if task == "conll" else "accuracy"
found = re.search(r"^accuracy = ([\d.]+)", score, re.M) if metric == "accuracy" else re.search(
    r"^entity_f1 = ([\d.]+)", score, re.M)
updates = re.findall(r"\| update (\d+) \|", log)
# what serving needs: the model tensors the checkpoint holds (the file also holds the optimizer's state)
import torch  # noqa: E402

state = torch.load(os.path.join(run, "checkpoints", "checkpoint_best.pt"), map_location="cpu", weights_only=True)
weights = sum(t.numel() * t.element_size() for t in state["model"].values())
print(json.dumps({
    "task": task, "body": body, "mode": mode, metric: float(found.group(1)) if found else None,
    "trainable": int(trainable.replace(",", "")), "total": int(total.replace(",", "")),
    "checkpoint_bytes": os.path.getsize(os.path.join(run, "checkpoints", "checkpoint_best.pt")),
    "weights_bytes": weights,
    "updates": int(updates[-1]) if updates else None, "wall_s": int(seconds), "lr": rate,
}))
