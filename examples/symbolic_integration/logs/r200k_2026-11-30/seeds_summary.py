"""Mean and sd (n-1) over seeds of the two data-size arms on valid (issue 61)."""
import json, re, statistics as st
arms = {"50k": ["results-valid-50k.json", "results-valid-50k-s2.json", "results-valid-50k-s3.json"],
        "all": ["results-valid-cos.json", "results-valid-all-s2.json", "results-valid-all-s3.json"]}
logs = {"50k": ["train-50k.log", "train-50k-s2.log", "train-50k-s3.log"],
        "all": ["train-cos.log", "train-all-s2.log", "train-all-s3.log"]}
out = {}
for arm, files in arms.items():
    rows = []
    for f, lg in zip(files, logs[arm]):
        try:
            d = json.load(open(f))
        except FileNotFoundError:
            continue
        loss = re.findall(r"\[valid\].*?update 6500 \| loss ([0-9.]+)", open(lg).read())
        rows.append({"file": f, "exact1": d["exact_match_beam1"], "v1": d["verified_beam1"],
                     "v10": d["verified_beam10"], "valid_loss": float(loss[-1]) if loss else None})
    out[arm] = {"runs": rows}
    for k in ("exact1", "v1", "v10", "valid_loss"):
        xs = [r[k] for r in rows if r[k] is not None]
        if len(xs) >= 2:
            out[arm][k] = {"mean": round(st.mean(xs), 4), "sd": round(st.stdev(xs), 4), "n": len(xs)}
print(json.dumps(out, indent=1))
