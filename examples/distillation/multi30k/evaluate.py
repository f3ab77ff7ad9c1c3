"""Score and time the teacher and the students of run.sh: BLEU and chrF2 at beam 5 and greedy
(batch 64) on valid (where choices are made) and test_2016_flickr (reported), and sentences/s on
test at batch 64 and batch 1 for both searches, each the median of REPEATS runs (default 3; every
run kept in the row), each model's checkpoint_best. Appends to WORK_DIR/results.jsonl and rewrites
WORK_DIR/results.md, which also holds a row per student trained with several seeds (folders
NAME-s1, NAME-s2, ...): each BLEU as mean ± sd over the seeds, each speed ratio's range.
Usage: [REPEATS=3] python evaluate.py WORK_DIR MODEL_DIR_NAME ...
       python evaluate.py --table WORK_DIR MODEL_DIR_NAME ...   (results.md again from each model's
       last row in results.jsonl, nothing run)
Every seqkit-generate runs in its own process, one after another (nothing else should run).

``generate`` and ``score`` are also the pruning sweep's (examples/pruning/sweep.py)."""

import json
import os
import re
import statistics
import subprocess
import sys
import time

import torch

from seqkit.core.checkpoints import unique_tensors


def sh(cmd):
    """Run ``cmd``; its stderr's tail and exit on failure."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    return r


def generate(ck, data, split, out, beam, batch, threads=2):
    """seqkit-generate of checkpoint ``ck`` on ``split`` of ``data`` into ``out``; returns its speed,
    sentences (or examples) per second. ``beam``: None for a classifier or tagger (no search)."""
    r = sh(["seqkit-generate", f"path={ck}", f"task.data={data}", f"gen_subset={split}",
            *([f"generation.beam={beam}"] if beam is not None else []),
            f"batch_size={batch}", f"results_path={out}", f"common.threads={threads}"])
    return float(re.search(r"\(([\d.]+) (?:sentences|examples)/s\)", r.stderr).group(1))


def score(hyp, metrics=None):
    """seqkit-score of ``hyp`` (``metrics``: a list, or None for the task's default): {metric: score}."""
    s = sh(["seqkit-score", f"hyp={hyp}"] + ([f"metrics=[{','.join(metrics)}]"] if metrics else [])
           + ["output_format=json"])
    return {m["metric"]: m["score"] for m in map(json.loads, s.stdout.splitlines())}


def main():
    table_only = sys.argv[1:2] == ["--table"]
    work, names = sys.argv[1 + table_only], sys.argv[2 + table_only:]
    if table_only:
        with open(os.path.join(work, "results.jsonl"), encoding="utf-8") as f:
            last = {r["model"]: r for r in map(json.loads, f)}
        return write_tables(work, [last[n] for n in names if n in last])
    repeats = int(os.environ.get("REPEATS", "3"))
    data = os.path.join(work, "data-bin")
    rows = []
    for name in names:
        ck = os.path.join(work, name, "checkpoints", "checkpoint_best.pt")
        if not os.path.isfile(ck):
            print(f"evaluate.py: {ck} not found: skipped", file=sys.stderr)
            continue
        state = torch.load(ck, map_location="cpu", weights_only=False)
        params = sum(t.numel() for t in unique_tensors(state["model"]))
        log = open(os.path.join(work, name, "train.log"), encoding="utf-8").read()
        done = re.findall(r"\| done: .*?; (\d+) updates", log)
        row = {"model": name, "parameters": params, "updates": int(done[-1]) if done else None,
               "when": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
        for beam in (5, 1):
            out = os.path.join(work, name, f"beam{beam}-valid")
            generate(ck, data, "valid", out, beam, 64)
            scores = score(f"{out}/generate-valid.txt", ["bleu", "chrf"])
            row[f"valid_beam{beam}_bleu"], row[f"valid_beam{beam}_chrf"] = scores["bleu"], round(scores["chrf"], 2)
            for batch in (64, 1):
                out = os.path.join(work, name, f"beam{beam}-b{batch}")
                runs = [generate(ck, data, "test", out, beam, batch) for _ in range(repeats)]
                row[f"beam{beam}_b{batch}_sent_per_s"] = statistics.median(runs)
                row[f"beam{beam}_b{batch}_runs"] = runs
                if batch == 64:
                    scores = score(f"{out}/generate-test.txt", ["bleu", "chrf"])
                    row[f"beam{beam}_bleu"], row[f"beam{beam}_chrf"] = scores["bleu"], round(scores["chrf"], 2)
        print(json.dumps(row), flush=True)
        rows.append(row)
    with open(os.path.join(work, "results.jsonl"), "a", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")

    write_tables(work, rows)


def write_tables(work, rows):
    """results.md: a row per model, then a row per seeded student (mean ± sd over its seeds)."""
    teacher = next((r for r in rows if r["model"] == "teacher"), None)
    lines = ["| model | parameters | updates | valid BLEU beam 5 | valid BLEU greedy | BLEU beam 5 | BLEU greedy "
             "| chrF2 beam 5 | chrF2 greedy | sent/s b64 beam 5 | b64 greedy | b1 beam 5 | b1 greedy |",
             "| --- |" + " --- |" * 12]
    speeds = ("beam5_b64", "beam1_b64", "beam5_b1", "beam1_b1")

    def ratio(r, key):  # against the teacher at beam 5, the same batch size
        return r[f"{key}_sent_per_s"] / teacher["beam5_" + key.split("_")[1] + "_sent_per_s"]

    for r in rows:
        cells = [r["model"], f"{r['parameters']:,}", f"{r['updates']:,}" if r["updates"] else "-",
                 r["valid_beam5_bleu"], r["valid_beam1_bleu"], r["beam5_bleu"], r["beam1_bleu"], r["beam5_chrf"],
                 r["beam1_chrf"]]
        cells += [f"{r[f'{key}_sent_per_s']}" + (f" ({ratio(r, key):.2f}x)" if teacher else "") for key in speeds]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    groups = {}
    for r in rows:
        m = re.fullmatch(r"(.+)-s(\d+)", r["model"])
        if m:
            groups.setdefault(m.group(1), []).append(r)
    groups = {name: runs for name, runs in groups.items() if len(runs) > 1}
    if groups:
        lines += ["", "| model: mean ± sd over seeds | seeds | valid BLEU beam 5 | valid BLEU greedy | BLEU beam 5 "
                  "| BLEU greedy | chrF2 beam 5 | chrF2 greedy | x teacher beam 5: b64 beam 5 | b64 greedy "
                  "| b1 beam 5 | b1 greedy |", "| --- |" + " --- |" * 11]
        for name, runs in groups.items():
            cells = [name, len(runs)]
            for key in ("valid_beam5_bleu", "valid_beam1_bleu", "beam5_bleu", "beam1_bleu", "beam5_chrf", "beam1_chrf"):
                v = [r[key] for r in runs]
                cells.append(f"{statistics.mean(v):.2f} ± {statistics.stdev(v):.2f}")
            for key in speeds:
                v = [ratio(r, key) for r in runs] if teacher else []
                cells.append(f"{min(v):.2f}-{max(v):.2f}x" if v else "-")
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    note = ("BLEU: valid, then test_2016_flickr; speeds on test, each the median of its runs (every run in "
            "results.jsonl); ratios against the teacher at beam 5 and the same batch size")
    with open(os.path.join(work, "results.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n\n" + note + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
