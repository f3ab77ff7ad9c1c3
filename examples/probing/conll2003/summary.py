"""One table of run.sh's probes: per body and task, the best layer by accuracy and by
selectivity, and the random body's; the layer where each task peaks, lower for part of speech
than for entities being the pattern the literature reports (Tenney et al., 2019; Hewitt & Liang),
and the scalar mix's centre of gravity (Tenney et al.: the mean layer under the mix's weights);
then the same best selectivities counted only on words whose gold label is not the task's most
frequent one (NER: not ``O``, where a probe that answers ``O`` everywhere scores 83%).
Probes run with ``report=test`` add the figures to quote: the layer chosen on eng.testa (by
accuracy) and its accuracy and selectivity on eng.testb, scored once.
Usage: python summary.py WORK_DIR BODY ..."""

import json
import os
import sys

work, bodies = sys.argv[1], sys.argv[2:]
print("| body | task | majority | best layer (accuracy) | best layer (selectivity) | scalar mix (weights) | "
      "mix centre (layer) | random body: best accuracy | random body: best selectivity | "
      "off the common label: best selectivity | random body: same | chosen on testa: layer -> testb accuracy "
      "(selectivity) | random body: same |")
print("| --- " * 13 + "|")
for body in bodies:
    for task in ("pos", "chunk", "ner"):
        paths = [os.path.join(work, body, f"{task}{suffix}.json") for suffix in ("", "-random")]
        if not all(os.path.isfile(p) for p in paths):
            continue
        r, rnd = (json.load(open(p, encoding="utf-8")) for p in paths)

        def best(res, key):
            if not all(key in x for x in res["layers"]):
                return "-"  # results of a seqkit-probe before the figure existed
            row = max(res["layers"], key=lambda x: x[key])
            return f"{row['layer']}: {row[key]}" + (f" (ctrl {row['control']})" if key == "accuracy" else "")

        def chosen(res):
            c = res.get("chosen")
            if not c:
                return "-"  # run without report=
            return f"{c['layer']} -> {c['report_accuracy']} ({c.get('report_selectivity', '-')})"

        mix = r.get("mix", {})
        weights = ", ".join(f"{w:.2f}" for w in mix.get("weights", []))
        # Tenney et al.'s centre of gravity: the mix's mean layer, sum of l * w_l
        centre = f"{sum(i * w for i, w in enumerate(mix['weights'])):.2f}" if mix.get("weights") else "-"
        print(f"| {body} | {task} | {r['majority']} | {best(r, 'accuracy')} | {best(r, 'selectivity')} | "
              f"{mix.get('accuracy', '-')} ({weights}) | {centre} | {best(rnd, 'accuracy')} | {best(rnd, 'selectivity')} | "
              f"{best(r, 'rare_selectivity')} | {best(rnd, 'rare_selectivity')} | {chosen(r)} | {chosen(rnd)} |")
