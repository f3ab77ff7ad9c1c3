"""seqkit's word2vec against gensim's ``Word2Vec`` on the same token stream, the same settings and the
same threads (issue 62, part 1): words/s, analogies and nearest-neighbour overlap. One JSON line.

    # from a work dir where examples/ is the checkout's (a link) and the folder was prepared as in
    # examples/word2vec/README.md; gensim lives in a venv of its own (no torch there):
    python3.11 -m venv gensim-venv && gensim-venv/bin/pip install gensim
    nice -n 10 python /path/to/benchmarks/word2vec_gensim.py --gensim-python gensim-venv/bin/python \\
        --data wt2-w2v/data-bin --save-root wt2-w2v --logs examples/word2vec/logs --out RESULT.json
    # seqkit with more settings (after the config's), for both modes or one:
    ... --seqkit-args optimizer=pair_sgd skipgram:optimizer.lr=0.025 cbow:optimizer.lr=0.05

Runs in seqkit's venv. Per mode (skipgram, cbow) it alternates ``--rounds`` times: seqkit (the
README's ``seqkit-train --config examples/word2vec/config.yaml ... common.threads=1``, a process of
its own), then gensim (this script with ``--worker`` under ``--gensim-python``, a process of its
own that imports no torch), so the machine's load falls on both. Each run's log goes to ``--logs``
and starts with its command; seqkit's checkpoints are then read with ``seqkit-embed`` (analogies,
the probe words' 10 nearest words), logged the same way.

The token stream: the training split of the data folder, decoded from its memory-mapped ids with
its dictionary, one sentence per line (the line's final ``</s>`` is no word), ``<unk>`` kept in
the text; gensim discards ``<unk>`` from its vocabulary (``trim_rule``), as seqkit drops it before
subsampling and windows: in both it counts as a raw word and is never trained or evaluated.
gensim's ``min_count`` is the rarest word's count, so the two vocabularies are the same words.

Words/s, both counted the same way over the training only (vocabulary building, validation and
checkpoints excluded): ``raw_words_per_s`` = corpus words processed (``<unk>`` included; each
epoch is every word once) / training wall seconds, and ``effective_words_per_s`` = the words kept
by subsampling (``<unk>`` excluded): gensim's "effective words", seqkit's ``ntokens``. seqkit's
seconds are the sum of its epochs' (the train log's one line per epoch: ``tokens_per_s`` and
``kept``, the share of raw words kept); gensim's are ``model.train()``'s wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SINGLE = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # both engines' children
TRAIN_LINE = re.compile(r"\[train\] epoch (\d+) \| update (\d+) \|.*tokens_per_s ([\d.]+) \| kept ([\d.]+)")
VALID_LINE = re.compile(r"\[valid\] epoch (\d+) \| update (\d+) \| loss ([\d.]+)")


# -- gensim's side (runs under --gensim-python: gensim and numpy only) ----------------------------------------
def worker(a: argparse.Namespace) -> None:
    import logging

    from gensim.models import Word2Vec
    from gensim.utils import RULE_DEFAULT, RULE_DISCARD

    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO)
    with open(a.corpus, encoding="utf-8") as f:
        sentences = [line.split() for line in f]
    model = Word2Vec(vector_size=a.dim, window=a.window, negative=a.negative, hs=0, sample=a.sample,
                     min_count=a.min_count, sg=int(a.mode == "skipgram"), cbow_mean=1, ns_exponent=0.75,
                     workers=1, epochs=a.epochs, seed=a.seed)
    t0 = time.perf_counter()
    model.build_vocab(sentences, trim_rule=lambda w, c, m: RULE_DISCARD if w == "<unk>" else RULE_DEFAULT)
    vocab_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    effective, raw = model.train(sentences, total_examples=model.corpus_count, epochs=model.epochs)
    train_s = time.perf_counter() - t0
    wv = model.wv
    _, sections = wv.evaluate_word_analogies(a.questions, restrict_vocab=len(wv), case_insensitive=False)
    probes = open(a.probes, encoding="utf-8").read().split()
    print(json.dumps({
        "vocab_size": len(wv), "min_count": a.min_count, "epochs": a.epochs, "alpha": model.alpha,
        "min_alpha": model.min_alpha, "build_vocab_s": round(vocab_s, 2), "train_s": round(train_s, 2),
        "raw_words": raw, "effective_words": effective, "raw_words_per_s": round(raw / train_s, 1),
        "effective_words_per_s": round(effective / train_s, 1), "kept": round(100.0 * effective / raw, 2),
        "analogies": {s["section"]: [len(s["correct"]), len(s["correct"]) + len(s["incorrect"])] for s in sections},
        "neighbours": {w: [[n, round(c, 4)] for n, c in wv.most_similar(w, topn=10)] for w in probes}}))


# -- seqkit's side and the orchestration (seqkit's venv) --------------------------------------------------------
def write_corpus(data: str, path: str) -> dict:
    """The training split as text, one line per sentence; returns the counts the runs are checked against."""
    import numpy as np

    from seqkit.data.dictionary import Dictionary
    from seqkit.data.indexed_dataset import IndexedDataset

    d = Dictionary.load(os.path.join(data, "dict.text.txt"))
    ds = IndexedDataset(os.path.join(data, "train.text"))
    symbols = np.array(d.symbols, dtype=object)
    tokens = np.asarray(ds.tokens, dtype=np.int64)
    offsets, sizes = np.asarray(ds._offsets), np.asarray(ds.sizes)
    with open(path, "w", encoding="utf-8") as f:
        for start, size in zip(offsets[:-1], sizes):
            if size > 1:  # the final </s> is no word
                f.write(" ".join(symbols[tokens[start:start + size - 1]]) + "\n")
    counts = np.bincount(tokens, minlength=len(d))
    words = counts[4:]  # the dictionary's specials first: <pad> <s> </s> <unk>
    return {"raw_words_per_epoch": int(sizes.sum() - (sizes > 0).sum()), "unk": int(counts[d.unk()]),
            "word_types": int((words > 0).sum()), "min_count": int(words[words > 0].min()),
            "longest_line": int(sizes.max() - 1)}


def logged(cmd: list, log: str, env: dict | None = None) -> str:
    """Run ``cmd``, its log starting with the command; returns its stdout."""
    with open(log, "w", encoding="utf-8") as f:
        f.write(f"# (work dir {os.getcwd()}, {time.strftime('%Y-%m-%d %H:%M')}) {' '.join(cmd)}\n")
        f.flush()
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, text=True, env={**os.environ, **(env or {})})
        f.write(r.stdout)
    if r.returncode:
        sys.exit(f"word2vec_gensim.py: error: {' '.join(cmd)} failed (exit {r.returncode}); see {log}")
    return r.stdout


def seqkit_run(a: argparse.Namespace, mode: str, rnd: int, corpus: dict) -> dict:
    save = os.path.join(a.save_root, mode if rnd == 1 else f"{mode}-{rnd}")
    if os.path.exists(save):
        sys.exit(f"word2vec_gensim.py: error: {save} exists (seqkit-train would resume it); remove it or pick "
                 "another --save-root")
    cmd = ["seqkit-train", "--config", "examples/word2vec/config.yaml", f"task.data={a.data}"]
    cmd += ([] if mode == "skipgram" else ["task.mode=cbow"]) + [f"checkpoint.save_dir={save}", "common.threads=1"]
    cmd += a.seqkit_args.get(mode, [])
    log = os.path.join(a.logs, f"{mode}-{rnd}.log")
    logged(cmd, log, SINGLE)
    text = open(log, encoding="utf-8").read()
    epochs = [(int(e), int(u), float(t), float(k)) for e, u, t, k in TRAIN_LINE.findall(text)]
    valid = [float(v) for _, _, v in VALID_LINE.findall(text)]
    raw = corpus["raw_words_per_epoch"]
    seconds = sum(raw * k / 100.0 / t for _, _, t, k in epochs)  # each epoch's effective words / its rate
    effective = sum(raw * k / 100.0 for _, _, _, k in epochs)
    return {"log": log, "checkpoint": os.path.join(save, "checkpoint_best.pt"), "updates": epochs[-1][1],
            "epochs": len(epochs), "epoch_tokens_per_s": [t for _, _, t, _ in epochs], "epoch_kept": [k for *_, k in epochs],
            "train_s": round(seconds, 2), "raw_words": raw * len(epochs), "effective_words": round(effective),
            "raw_words_per_s": round(raw * len(epochs) / seconds, 1), "effective_words_per_s": round(effective / seconds, 1),
            "valid_loss": valid, "best_valid_loss": min(valid)}


def seqkit_eval(a: argparse.Namespace, run: dict, name: str) -> None:
    """seqkit-embed's analogies and the probe words' 10 nearest words, into ``run``."""
    out = logged(["seqkit-embed", f"path={run['checkpoint']}", f"analogies={a.questions}"],
                 os.path.join(a.logs, f"embed-{name}-analogies.log"))
    rows = [line.split("\t") for line in out.splitlines()[1:]]
    run["analogies"] = {r[0]: [int(r[1]), int(r[2])] for r in rows}
    words = open(a.probes, encoding="utf-8").read().split()
    out = logged(["seqkit-embed", f"path={run['checkpoint']}", "k=10", f"words={' '.join(words)}"],
                 os.path.join(a.logs, f"embed-{name}-neighbours.log"))
    hits: dict = {}
    for line in out.splitlines():
        tag, *rest = line.split("\t")
        if tag.startswith("Q-"):
            hits[rest[0]] = []
        elif tag.startswith("N-"):
            hits[list(hits)[-1]].append([rest[1], float(rest[0])])
    run["neighbours"] = hits


def gensim_run(a: argparse.Namespace, mode: str, rnd: int, corpus_file: str, corpus: dict, epochs: int) -> dict:
    cmd = [a.gensim_python, os.path.abspath(__file__), "--worker", "--corpus", corpus_file, "--mode", mode,
           "--epochs", str(epochs), "--min-count", str(corpus["min_count"]), "--questions", a.questions,
           "--probes", a.probes, "--seed", str(a.seed)]
    log = os.path.join(a.logs, f"gensim-{mode}-{rnd}.log")
    run = json.loads(logged(cmd, log, {**SINGLE, "PYTHONHASHSEED": "0"}).strip().splitlines()[-1])
    if run["vocab_size"] != corpus["word_types"] or run["raw_words"] != corpus["raw_words_per_epoch"] * epochs:
        sys.exit(f"word2vec_gensim.py: error: gensim saw {run['vocab_size']} words and {run['raw_words']} raw words, "
                 f"seqkit {corpus['word_types']} and {corpus['raw_words_per_epoch'] * epochs}; see {log}")
    return {"log": log, **run}


def overlap(x: dict, y: dict) -> dict:
    """|top-10 of x ∩ top-10 of y| / 10 per probe word, and their mean."""
    per = {w: len({n for n, _ in x[w]} & {n for n, _ in y[w]}) / 10 for w in x}
    return {"per_word": per, "mean": round(sum(per.values()) / len(per), 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help="(internal) gensim's side, under --gensim-python")
    p.add_argument("--corpus"), p.add_argument("--min-count", type=int), p.add_argument("--epochs", type=int)
    p.add_argument("--mode", default="skipgram")
    p.add_argument("--dim", type=int, default=100), p.add_argument("--window", type=int, default=5)
    p.add_argument("--negative", type=int, default=5), p.add_argument("--sample", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1, help="gensim's seed (seqkit's: --seqkit-args common.seed=N)")
    p.add_argument("--data", default="wt2-w2v/data-bin"), p.add_argument("--save-root", default="wt2-w2v")
    p.add_argument("--logs", default="examples/word2vec/logs"), p.add_argument("--out")
    p.add_argument("--gensim-python", default="gensim-venv/bin/python")
    p.add_argument("--questions", default="examples/word2vec/questions-wikitext2.txt")
    p.add_argument("--probes", default="examples/word2vec/probe-words.txt")
    p.add_argument("--modes", nargs="+", default=["skipgram", "cbow"])
    p.add_argument("--rounds", type=int, default=2, help="seqkit/gensim alternations per mode")
    p.add_argument("--seqkit-args", nargs="*", default=[], metavar="[MODE:]KEY=VALUE",
                   help="more seqkit-train settings, for every mode or (cbow:optimizer.lr=0.05) for one")
    a = p.parse_args()
    if a.worker:
        return worker(a)
    given, a.seqkit_args = a.seqkit_args, {m: [] for m in a.modes}
    for arg in given:
        mode, _, setting = arg.partition(":") if arg.split("=", 1)[0].count(":") else ("", "", arg)
        if mode and mode not in a.modes:
            p.error(f"--seqkit-args {arg}: {mode} is not one of --modes {' '.join(a.modes)}")
        for m in ([mode] if mode else a.modes):
            a.seqkit_args[m].append(setting)
    import torch

    sys.path.insert(0, HERE)
    from translation import matmul_peak  # (benchmarks/translation.py, beside this script)

    from seqkit.core import rowkernels
    from seqkit.core.cpu import cpu_info

    torch.set_num_threads(1)
    os.makedirs(a.logs, exist_ok=True)
    row = {**cpu_info(), "threads": 1, "seqkit_args": a.seqkit_args, "gensim_seed": a.seed, "fp32_matmul_peak_gflops_1thread_before": round(matmul_peak(torch.float32) / 1e9),
           # what model.kernel=auto and optimizer.impl=auto (the config's) run in seqkit-train
           "seqkit_kernels": "native" if rowkernels.available() else f"torch: {rowkernels.why_unavailable()}"}
    with tempfile.TemporaryDirectory() as tmp:
        corpus_file = os.path.join(tmp, "train.txt")
        row["corpus"] = corpus = write_corpus(a.data, corpus_file)
        for mode in a.modes:
            runs = row[mode] = {"seqkit": [], "gensim": []}
            for rnd in range(1, a.rounds + 1):
                load = os.getloadavg()[0]
                runs["seqkit"].append({"loadavg_1min_before": load, **seqkit_run(a, mode, rnd, corpus)})
                s = runs["seqkit"][-1]
                epochs = s["epochs"]  # the updates are whole passes (README: 5 epochs of 514 batches)
                load = os.getloadavg()[0]
                runs["gensim"].append({"loadavg_1min_before": load, **gensim_run(a, mode, rnd, corpus_file, corpus, epochs)})
                seqkit_eval(a, s, f"{mode}-{rnd}")
                s["overlap_with_gensim"] = overlap(s["neighbours"], runs["gensim"][-1]["neighbours"])
            for engine in ("seqkit", "gensim"):
                for k in ("raw_words_per_s", "effective_words_per_s"):
                    runs[f"{engine}_{k}_median"] = round(statistics.median(r[k] for r in runs[engine]), 1)
            runs["raw_words_per_s_ratio"] = [round(s["raw_words_per_s"] / g["raw_words_per_s"], 3)
                                             for s, g in zip(runs["seqkit"], runs["gensim"])]
    row["fp32_matmul_peak_gflops_1thread_after"] = round(matmul_peak(torch.float32) / 1e9)
    line = json.dumps(row)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(line + "\n")
    print(line)


if __name__ == "__main__":
    main()
