"""The rule's table for a WORK folder of examples/distillation/sst2/run.sh: one row per run (best
epoch and accuracy on the held-out split of train, dev accuracy, macro-F1 and MCC at that
checkpoint), then each student's mean ± sd over its seeds and the differences of the means.

    python examples/distillation/sst2/summarize.py WORK [OUT.md]

Reads WORK/<run>/score_dev.txt and WORK/<run>/checkpoints/train_log.jsonl; writes markdown to
OUT.md (default: stdout) and the same figures as JSON beside it (OUT.json).
"""

import json
import re
import statistics
import sys
from pathlib import Path


def run_row(folder: Path) -> dict:
    scores = {m.group(1): float(m.group(2)) for m in
              re.finditer(r"^(accuracy|macro_f1|mcc) = ([\d.]+)", (folder / "score_dev.txt").read_text(), re.M)}
    records = [json.loads(line) for line in (folder / "checkpoints" / "train_log.jsonl").read_text().splitlines()]
    valid = [r for r in records if r.get("tag") == "valid"]
    train = [r for r in records if r.get("tag") == "train"]
    best = max(valid, key=lambda r: r["accuracy"])  # checkpoint_best: the first epoch of the highest accuracy
    return {"run": folder.name, "updates": max(r["update"] for r in train + valid), "epochs": len(valid),
            "best_epoch": best["epoch"], "carved_valid": best["accuracy"], **scores}


def main(argv):
    work = Path(argv[0])
    rows = [run_row(d) for d in sorted(work.iterdir()) if (d / "score_dev.txt").is_file()]
    groups = {}
    for r in rows:
        groups.setdefault(re.sub(r"-s\d+$", "", r["run"]), []).append(r["accuracy"])
    means = {g: {"mean": statistics.mean(v), "sd": statistics.stdev(v) if len(v) > 1 else 0.0, "n": len(v)}
             for g, v in groups.items()}
    lines = ["| run | updates | best epoch (carved valid) | carved valid | **dev accuracy** | macro-F1 | MCC |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['run']} | {r['updates']:,} | {r['best_epoch']} of {r['epochs']} | {r['carved_valid']:.2f} | "
              f"{r['accuracy']:.2f} | {r['macro_f1']:.2f} | {r['mcc']:.2f} |" for r in rows]
    lines += ["", "| group | seeds | dev accuracy, mean ± sd |", "| --- | --- | --- |"]
    lines += [f"| {g} | {m['n']} | {m['mean']:.2f} ± {m['sd']:.2f} |" for g, m in means.items()]
    diffs = {f"{s}-kd − {s}": means[f"{s}-kd"]["mean"] - means[s]["mean"]
             for s in ("dan", "cnn") if s in means and f"{s}-kd" in means}
    lines += [""] + [f"- {k}: {v:+.2f}" for k, v in diffs.items()]
    text = "\n".join(lines) + "\n"
    if len(argv) > 1:
        Path(argv[1]).write_text(text, encoding="utf-8")
        Path(argv[1]).with_suffix(".json").write_text(json.dumps(
            {"runs": rows, "groups": means, "differences": diffs}, indent=1) + "\n", encoding="utf-8")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
