"""One row of a transfer table from a fine-tuning run's folder (finetune.sh): the score, the
trainable-parameter line's figures, the best checkpoint's size (the file, and the model tensors it
holds: what serving needs next to the base) and the wall time. With --base CK (in-context
classification: nothing trained, nothing saved) the row counts CK's parameters, none of them trained.
The row also names the split the epoch was chosen on, the chosen epoch and its score there (the
validation lines of train.log), the seed and the device it trained on (cpu or cuda).
Usage: python row.py RUN_DIR TASK BODY MODE SECONDS [LEARNING_RATE | --base CK] [--seed N] [--data DIR]
(--data: the run's data folder, whose preprocess.json says how its `valid` was carved)."""

import argparse
import json
import os
import re

import torch

from seqkit.core.checkpoints import unique_tensors

ap = argparse.ArgumentParser()
for name in ("run", "task", "body", "mode", "seconds"):
    ap.add_argument(name)
ap.add_argument("rate", nargs="?", type=float)
ap.add_argument("--base")
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--data")
args = ap.parse_args()
run, task, body, mode, seconds, base, rate = (args.run, args.task, args.body, args.mode, args.seconds, args.base,
                                              args.rate)
score = open(os.path.join(run, "score.txt"), encoding="utf-8").read()
metric = "f1" if task == "conll" else "accuracy"
found = re.search(r"^accuracy = ([\d.]+)", score, re.M) if metric == "accuracy" else re.search(
    r"^entity_f1 = ([\d.]+)", score, re.M)


def chosen_on(data):
    """The carved split a GLUE row chose on, as the data folder's preprocess.json records it."""
    carved = json.load(open(os.path.join(data, "preprocess.json"), encoding="utf-8")).get("carved") if data else None
    if not carved:
        return "valid"
    share = f"{100 * carved['share']:g}%"
    if carved.get("unit") == "sentence":
        return f"valid ({share} of train's sentences, whole: carve_unit=sentence)"
    return f"valid ({share} of train's rows)"


chosen = {}
if base:  # nothing trained: the base's parameters, no file of the row's own
    state = torch.load(base, map_location="cpu", weights_only=False)
    trainable, total = 0, sum(t.numel() for t in unique_tensors(state["model"]))
    checkpoint_bytes = weights = 0
    updates, device = [], None
else:
    log = open(os.path.join(run, "train.log"), encoding="utf-8").read()
    trainable, total = (int(x.replace(",", "")) for x in re.search(
        r"trainable parameters: ([\d,]+) of ([\d,]+)", log).groups())
    updates = re.findall(r"\| update (\d+) \|", log)
    device = re.search(r"; device (\w+)", log)  # cpu or cuda: wall times are only compared within one
    # the validation score of each epoch (the split checkpoint_best is chosen on); the first best wins
    by_epoch = [(int(e), float(v)) for e, v in re.findall(rf"\[valid\] epoch (\d+) \|.*?\| {metric} ([\d.]+)", log)]
    if by_epoch:
        epoch, value = max(by_epoch, key=lambda ev: (ev[1], -ev[0]))
        chosen = {"chosen_on": "testa" if task == "conll" else chosen_on(args.data),
                  "chosen_epoch": epoch, "chosen_score": value, "valid_by_epoch": [v for _, v in by_epoch]}
    # what serving needs: the model tensors the checkpoint holds (the file also holds the optimizer's state)
    best = os.path.join(run, "checkpoints", "checkpoint_best.pt")
    state = torch.load(best, map_location="cpu", weights_only=True)
    weights = sum(t.numel() * t.element_size() for t in state["model"].values())
    checkpoint_bytes = os.path.getsize(best)
print(json.dumps({
    "task": task, "body": body, "mode": mode, metric: float(found.group(1)) if found else None,
    "trainable": trainable, "total": total, "checkpoint_bytes": checkpoint_bytes, "weights_bytes": weights,
    "updates": int(updates[-1]) if updates else 0, "wall_s": int(seconds), "lr": rate, "seed": args.seed,
    "device": device.group(1) if device else "cpu",
    **chosen,
}))
