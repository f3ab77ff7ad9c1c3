"""The share of outputs that have the attributes their request asked for, per generation run.

    python examples/controlled_generation/evaluate.py --classifier CK --requests FILE --out FILE.json \
        greedy=GEN1.txt sampled_k1=GEN2.txt verified_k10=GEN3.txt [--pick]

Each GEN file is seqkit-generate's output on the requests (one prompt per line, in order) with
``generation.verifier=attributes``. A request's output is its V- line (the first of the beam or
samples that the verifier accepted), else its first D- line (the best hypothesis, which then
fails). Each output is measured again, with the verifier's own rule and classifier: words (the
count asked), sentiment (the label asked), both. That "both" holds exactly where the verifier
printed a V- line is checked: an output measured otherwise is an error, not a figure.

``--pick``: print the name of the run with the highest share of "both" (the first on ties), for
choosing a setting on the valid requests.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List

from seqkit.core.errors import SeqkitError
from seqkit.verify.attributes import SentimentMeter, count_words, parse_request


def outputs(path: str, prompts: List[str]) -> List[Dict[str, object]]:
    """Per prompt, in order: ``{"text", "verified"}`` from a seqkit-generate output file."""
    sources: Dict[int, str] = {}
    best: Dict[int, str] = {}
    kept: Dict[int, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            head, _, rest = line.rstrip("\n").partition("\t")
            kind, _, sid = head.partition("-")
            if not sid.isdigit():
                continue
            i = int(sid)
            if kind == "S":
                sources[i] = rest
            elif kind == "D" and i not in best:
                best[i] = rest.split("\t", 1)[1] if "\t" in rest else ""
            elif kind == "V":
                kept[i] = rest.split("\t", 1)[1] if "\t" in rest else ""
    if [sources.get(i) for i in range(len(prompts))] != prompts or len(sources) != len(prompts):
        raise SeqkitError(f"{path} is not seqkit-generate's output on these {len(prompts)} requests "
                          "(its S- lines differ)")
    return [{"text": kept.get(i, best.get(i, "")), "verified": i in kept} for i in range(len(prompts))]


def score(path: str, prompts: List[str], meter: SentimentMeter) -> Dict[str, object]:
    """The shares of one run's outputs that have the words, the sentiment, and both, as asked."""
    found = outputs(path, prompts)
    texts = [str(o["text"]) for o in found]
    nonempty = [i for i, t in enumerate(texts) if t.strip()]
    sentiments = dict(zip(nonempty, meter([texts[i] for i in nonempty], batch_size=256)))
    words = sentiment = both = 0
    for i, (prompt, o) in enumerate(zip(prompts, found)):
        asked = parse_request(prompt)
        w = count_words(texts[i]) == asked.words
        s = sentiments.get(i) == asked.sentiment
        if (w and s) != o["verified"]:
            raise SeqkitError(f"{path}: request {i} ({prompt}): measured {'' if w and s else 'not '}satisfied, but the "
                              f"verifier {'kept' if o['verified'] else 'kept nothing'} (timed-out or raised checks?)")
        words, sentiment, both = words + w, sentiment + s, both + (w and s)
    n = len(prompts)
    return {"file": os.path.abspath(path), "requests": n, "words": round(words / n, 4),
            "sentiment": round(sentiment / n, 4), "both": round(both / n, 4), "both_count": both}


def main(argv: List[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--classifier", required=True, help="the classifier checkpoint the verifier measured with")
    p.add_argument("--requests", required=True, help="the request file the runs were generated from")
    p.add_argument("--out", required=True, help="the JSON file to write")
    p.add_argument("--pick", action="store_true", help="print the name of the run with the highest 'both' share")
    p.add_argument("--setting", action="append", default=[], help="KEY=VALUE kept in the JSON's settings "
                                                                  "(how the runs were generated)")
    p.add_argument("runs", nargs="+", help="NAME=GENERATE_OUTPUT")
    a = p.parse_args(argv)
    with open(a.requests, encoding="utf-8") as f:
        prompts = [line.rstrip("\n") for line in f if line.strip()]
    if not prompts:
        raise SeqkitError(f"{a.requests} holds no requests")
    runs = {}
    for run in a.runs:
        name, eq, path = run.partition("=")
        if not eq or not name or not os.path.isfile(path):
            raise SeqkitError(f"{run!r}: write NAME=FILE with an existing seqkit-generate output file")
        runs[name] = path
    meter = SentimentMeter(a.classifier, threads=1)
    results = {name: score(path, prompts, meter) for name, path in runs.items()}
    settings = dict(s.partition("=")[::2] for s in a.setting)
    report = {"requests": os.path.abspath(a.requests), "classifier": os.path.abspath(a.classifier),
              "settings": settings, "runs": results}
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    if a.pick:
        print(max(results, key=lambda name: (results[name]["both"], -list(results).index(name))))
    else:
        for name, r in results.items():
            print(f"{name}: words {r['words']:.3f}, sentiment {r['sentiment']:.3f}, both {r['both']:.3f} "
                  f"({r['both_count']} of {r['requests']})")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except SeqkitError as e:
        sys.exit(f"evaluate.py: error: {e}")
