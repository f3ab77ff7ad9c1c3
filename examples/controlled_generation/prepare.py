"""Attribute-prefixed text for a language model, and the requests it is evaluated on.

    python examples/controlled_generation/prepare.py --sst2 DIR --classifier CK --out DIR [--limit N]

Each SST-2 sentence (GLUE's train.tsv: the language model's training text; dev.tsv: its
validation text) is measured as the verifier measures a continuation: its number of words
(whitespace tokens) and its sentiment (the classifier's most probable label, SST-2's 0/1 read as
negative/positive; seqkit.verify.attributes), and written behind that request:

    words=9 sentiment=positive : the film is a charming , often affecting journey .

The requests are prompts alone (``words=N sentiment=S :``): the grid of ``--words`` counts times
the classifier's sentiments, ``--valid-repeats`` times in requests_valid.txt (where the sampling
temperature is chosen) and ``--test-repeats`` times in requests_test.txt (where it is reported).
Every combination also occurs in training: what is new at evaluation is the text, not the request.
prepare.json holds the counts and how often the measured sentiment is SST-2's gold label.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from typing import List, Tuple

from seqkit.core.errors import SeqkitError
from seqkit.verify.attributes import SST2_NAMES, SentimentMeter, count_words, format_request


def read_sst2(path: str, limit: int = 0) -> List[Tuple[str, str]]:
    """``(sentence, gold label)`` rows of a GLUE SST-2 TSV (header ``sentence<TAB>label``), empty ones
    skipped; ``limit`` > 0: the first ``limit`` rows only (a smoke run)."""
    rows = []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if header is None or header[:2] != ["sentence", "label"]:
            raise SeqkitError(f"{path}: expected GLUE SST-2's header 'sentence<TAB>label', got {header}")
        for row in reader:
            if row and row[0].strip():
                rows.append((" ".join(row[0].split()), row[1]))
            if limit and len(rows) >= limit:
                break
    return rows


def measure(rows: List[Tuple[str, str]], meter: SentimentMeter) -> Tuple[List[str], float]:
    """The training lines of ``rows``, each behind its measured request, and the share of rows whose
    measured sentiment is their gold label."""
    sentiments = meter([s for s, _ in rows], batch_size=256)
    lines = [format_request(count_words(s), sentiment, s) for (s, _), sentiment in zip(rows, sentiments)]
    agree = sum(SST2_NAMES.get(gold, gold) == sentiment for (_, gold), sentiment in zip(rows, sentiments))
    return lines, agree / max(len(rows), 1)


def requests(words: range, sentiments: List[str], repeats: int) -> List[str]:
    """The grid of requests, each ``repeats`` times: every word count with every sentiment."""
    return [format_request(n, s) for _ in range(repeats) for n in words for s in sentiments]


def write_lines(path: str, lines: List[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def main(argv: List[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sst2", required=True, help="folder holding GLUE SST-2's train.tsv and dev.tsv")
    p.add_argument("--classifier", required=True, help="the SST-2 classifier checkpoint that measures sentiment")
    p.add_argument("--out", required=True, help="folder for train.txt, valid.txt, requests_*.txt, prepare.json")
    p.add_argument("--limit", type=int, default=0, help="the first N training sentences only (smoke runs)")
    p.add_argument("--words", default="5-20", help="word counts of the requests, FIRST-LAST (default 5-20)")
    p.add_argument("--valid-repeats", type=int, default=2, help="copies of the grid in requests_valid.txt")
    p.add_argument("--test-repeats", type=int, default=4, help="copies of the grid in requests_test.txt")
    p.add_argument("--threads", type=int, default=2, help="torch threads of the classifier")
    a = p.parse_args(argv)
    first, _, last = a.words.partition("-")
    if not (first.isdigit() and last.isdigit() and 1 <= int(first) <= int(last)):
        raise SeqkitError(f"--words {a.words}: write FIRST-LAST, e.g. 5-20")
    meter = SentimentMeter(a.classifier, threads=a.threads)
    os.makedirs(a.out, exist_ok=True)
    report = {"classifier": os.path.abspath(a.classifier), "sentiments": meter.names}
    for split, name in (("train", "train.tsv"), ("valid", "dev.tsv")):
        rows = read_sst2(os.path.join(a.sst2, name), a.limit if split == "train" else 0)
        lines, agree = measure(rows, meter)
        write_lines(os.path.join(a.out, f"{split}.txt"), lines)
        report[split] = {"lines": len(lines), "words": sum(count_words(s) for s, _ in rows),
                         "measured_sentiment_is_gold": round(agree, 4)}
    grid = range(int(first), int(last) + 1)
    for split, repeats in (("valid", a.valid_repeats), ("test", a.test_repeats)):
        write_lines(os.path.join(a.out, f"requests_{split}.txt"), requests(grid, meter.names, repeats))
        report[f"requests_{split}"] = len(grid) * len(meter.names) * repeats
    with open(os.path.join(a.out, "prepare.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except SeqkitError as e:
        sys.exit(f"prepare.py: error: {e}")
