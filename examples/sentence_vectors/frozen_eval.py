"""Frozen sentence vectors on a GLUE task, under the rule: choose on a split carved from train,
report dev once.

    python examples/sentence_vectors/frozen_eval.py CKPT sst2 $(python examples/corpus.py sst2) [options]
    python examples/sentence_vectors/frozen_eval.py CKPT rte $(python examples/corpus.py glue_rte) [options]

The checkpoint's sentence vectors (``seqkit-embed``'s, ``--pooling`` as there: ``auto`` for a
skip-thought or quick-thought run, ``mean`` for a pretraining body's contextual vectors,
``embeddings`` for the mean of any checkpoint's input word embeddings) stay fixed. A sentence gives
``u``; a pair the features ``[u; v; |u - v|; u * v]`` (Kiros et al.'s and SentEval's). A logistic
regression on the standardized features (seqkit-probe's linear probe, Adam, seeded) is trained on
train minus the carved split for each number of epochs of ``--epochs``; the count with the best
accuracy on the carved split is kept and that one classifier scores dev, once. The carve is the
recipes' (examples/classification/carve.sh): SST-2 10% of its sentences whole, others a seeded 5%
of the rows (seqkit/preprocess/carve.py). ``--seeds 1,2,3`` encodes the sentences once and repeats
the carve, the choice and the dev score per seed (the seed draws both the carve and the classifier);
the row then holds each seed's figures and their mean and sample sd. One JSON object is printed
(and written to ``--output``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from types import SimpleNamespace
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import torch

TASKS = {  # task -> (text columns, label column, carve share, carve unit)
    "sst2": (["sentence"], "label", 0.1, "sentence"),
    "rte": (["sentence1", "sentence2"], "label", 0.05, "example"),
}


def features(vec: Dict[str, np.ndarray], texts: Sequence[Tuple[str, ...]]) -> torch.Tensor:
    """``u`` of each single sentence, or ``[u; v; |u - v|; u * v]`` of each pair ``(N, F)``."""
    if len(texts[0]) == 1:
        return torch.from_numpy(np.stack([vec[t[0]] for t in texts]))
    u = np.stack([vec[t[0]] for t in texts])
    v = np.stack([vec[t[1]] for t in texts])
    return torch.from_numpy(np.concatenate([u, v, np.abs(u - v), u * v], axis=1))


def accuracy(pred: torch.Tensor, gold: torch.Tensor) -> float:
    return round(100.0 * float(pred.eq(gold).float().mean()), 2)


def parse(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint")
    p.add_argument("task", choices=sorted(TASKS))
    p.add_argument("data", help="folder of the task's train.tsv and dev.tsv")
    p.add_argument("--pooling", default="auto", choices=("auto", "mean", "embeddings"))
    p.add_argument("--epochs", default="2,5,10,20,40", help="epoch counts to choose from, on the carved split")
    p.add_argument("--lr", type=float, default=0.01, help="Adam's rate for the logistic regression")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--seeds", default="1", help="seeds of the carve and of the classifier, comma-separated: "
                                                "one row each, their mean and sd beside")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--output", default="", help="also write the JSON object here")
    args = p.parse_args(argv)
    try:
        args.seed_list = [int(x) for x in args.seeds.split(",") if x.strip()]
    except ValueError:
        args.seed_list = []
    if not args.seed_list or len(set(args.seed_list)) != len(args.seed_list):
        p.error(f"--seeds {args.seeds!r}: give distinct integers, e.g. 1,2,3")
    return args


def one_seed(vec: Dict[str, np.ndarray], train: Any, dev: Any, share: float, unit: str, grid: List[int],
             args: argparse.Namespace, seed: int) -> Dict:
    """One seed's carve of ``train``, the epoch count chosen on it and that classifier's dev accuracy."""
    from seqkit.analysis.probe import train_probe
    from seqkit.preprocess.carve import carve

    rest, held, _ = carve(train, share, seed, unit)
    labels = sorted(set(rest.labels))
    ids = {name: i for i, name in enumerate(labels)}
    splits = (("train", rest), ("held", held), ("dev", dev))
    x = {name: features(vec, s.texts) for name, s in splits}
    y = {name: torch.tensor([ids[v] for v in s.labels]) for name, s in splits}

    def fit(epochs: int, split: str) -> float:
        cfg = SimpleNamespace(epochs=epochs, lr=args.lr, batch_size=args.batch_size, seed=seed)
        pred, _ = train_probe([x["train"]], y["train"], [x[split]], len(labels), cfg)
        return accuracy(pred, y[split])

    held_scores = {e: fit(e, "held") for e in grid}
    chosen = max(grid, key=lambda e: (held_scores[e], -e))  # ties: fewer epochs
    majority = max(range(len(labels)), key=lambda k: int(y["train"].eq(k).sum()))
    return {"seed": seed, "features": int(x["train"].size(1)), "train": len(rest.texts), "held_out": len(held.texts),
            "dev": len(dev.texts), "held_accuracy_by_epochs": held_scores, "chosen_epochs": chosen,
            "dev_accuracy": fit(chosen, "dev"), "dev_majority": accuracy(torch.full_like(y["dev"], majority), y["dev"])}


def main(argv: List[str]) -> Dict:
    import seqkit
    from seqkit.analysis.sentence_vectors import SentenceEncoder
    from seqkit.core.checkpoints import load_for_inference
    from seqkit.data.labelled_text import read_classification

    args = parse(argv)
    seqkit.import_builtin_components()
    if args.threads:
        torch.set_num_threads(args.threads)
    columns, label, share, unit = TASKS[args.task]
    seeds = args.seed_list
    train = read_classification(os.path.join(args.data, "train.tsv"), columns, label)
    dev = read_classification(os.path.join(args.data, "dev.tsv"), columns, label)
    task, model = load_for_inference(args.checkpoint)
    encoder = SentenceEncoder(task, model, args.pooling, args.checkpoint)
    unique = sorted({s for split in (train, dev) for t in split.texts for s in t})
    # a sentence longer than the model's positions (a few RTE premises) is cut to them
    vec = dict(zip(unique, encoder.encode(unique, f"{args.task} sentences", 256, truncate=True)))
    grid = [int(e) for e in args.epochs.split(",")]
    runs = [one_seed(vec, train, dev, share, unit, grid, args, seed) for seed in seeds]
    row = {"checkpoint": os.path.abspath(args.checkpoint), "task": args.task, "pooling": args.pooling, **runs[0]}
    if len(runs) > 1:
        dev_acc = [r["dev_accuracy"] for r in runs]
        row = {**row, "seeds": runs, "dev_accuracy_mean": round(statistics.mean(dev_acc), 2),
               "dev_accuracy_sd": round(statistics.stdev(dev_acc), 2)}
    text = json.dumps(row)
    print(text)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return row


if __name__ == "__main__":
    main(sys.argv[1:])
