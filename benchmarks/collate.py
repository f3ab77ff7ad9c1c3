"""Collation time of translation batches (Tatoeba de-en, joint BPE 16k, as ``benchmarks/gpu.py``
prepares it) as one JSON line: the vectorised ``LanguagePairDataset.collate`` beside the row-by-row
padding it replaced, median wall and CPU milliseconds over N token-budget batches of 16k and
64k tokens.

    python benchmarks/collate.py --workdir /tmp/collate-bench      # keep (and reuse) the preprocessed corpus
    python benchmarks/collate.py --multiple 8 --n 50               # lengths rounded to 8, as on a GPU

The prefetch thread collates while the loop runs and shares the GIL with it, so collation time is
time the training loop's Python can lose on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from gpu import Plan, prepare_data  # benchmarks/gpu.py: the same corpus and preprocessing  # noqa: E402

from seqkit.data.dictionary import Dictionary  # noqa: E402
from seqkit.data.indexed_dataset import IndexedDataset  # noqa: E402
from seqkit.data.pair_dataset import LanguagePairDataset  # noqa: E402


def row_by_row(ds: LanguagePairDataset, indices: np.ndarray) -> Dict[str, Any]:
    """The collation this replaced (one tensor per sentence, padded row by row); its time is the
    comparison (tests/test_collate.py holds it as the reference the outputs are checked against)."""
    idx = [int(i) for i in indices]
    src = [ds.src[i] for i in idx]
    pad = ds.src_dict.pad()
    tgt = [ds.tgt[i] for i in idx]
    return {"id": torch.tensor(idx, dtype=torch.long),
            "net_input": {"src_tokens": ds.pad_batch(src, pad),
                          "src_lengths": torch.tensor([len(s) for s in src], dtype=torch.long),
                          "prev_output_tokens": ds.pad_batch([t[:-1] for t in tgt], pad, prepend=ds.tgt_dict.bos())},
            "target": ds.pad_batch(tgt, pad), "ntokens": int(sum(len(t) for t in tgt)), "nsentences": len(idx)}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def median_ms(fn: Callable[[np.ndarray], Any], batches: List[np.ndarray]) -> Tuple[float, float]:
    """Median wall and CPU milliseconds of ``fn`` over ``batches`` (CPU time: what the collating
    thread costs; it also holds on a machine busy with other work, where wall time does not)."""
    fn(batches[0])  # warm the page cache and numpy's code paths
    wall, cpu = [], []
    for b in batches:
        t0, c0 = time.perf_counter(), time.thread_time()
        fn(b)
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.thread_time() - c0) * 1000)
    return round(statistics.median(wall), 2), round(statistics.median(cpu), 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", help="work folder (default: a temporary one); its preprocessed corpus is reused")
    ap.add_argument("--data", help="folder holding Tatoeba's deu.txt (default: examples/corpus.py finds it)")
    ap.add_argument("--n", type=int, default=30, help="batches timed per size (the median is reported)")
    ap.add_argument("--multiple", type=int, default=1, help="dataset.required_seq_len_multiple (8 on a GPU)")
    ap.add_argument("--sizes", default="16384,65536", help="max_tokens of the timed batches")
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="seqkit-collate-")
    os.makedirs(work, exist_ok=True)
    prepare_data(argparse.Namespace(dry_run=False, data=args.data), Plan(), work)
    bin_dir = os.path.join(work, "bin")
    src_dict = Dictionary.load(os.path.join(bin_dir, "dict.de.txt"))
    tgt_dict = Dictionary.load(os.path.join(bin_dir, "dict.en.txt"))
    ds = LanguagePairDataset(IndexedDataset(os.path.join(bin_dir, "train.de-en.de")),
                             IndexedDataset(os.path.join(bin_dir, "train.de-en.en")), src_dict, tgt_dict)
    ds.length_multiple = args.multiple
    torch.set_num_threads(1)  # the prefetch thread's situation: one core beside the loop
    out: Dict[str, Any] = {"benchmark": "collate", "cpu": cpu_model(), "corpus": "tatoeba_deu_eng",
                           "train_pairs": len(ds), "length_multiple": args.multiple, "n": args.n}
    rng = np.random.default_rng(1)
    for max_tokens in (int(s) for s in args.sizes.split(",")):
        batches = ds.batches(max_tokens, seed=1, epoch=1)
        picked = [batches[i] for i in rng.choice(len(batches), size=min(args.n, len(batches)), replace=False)]
        key = f"{max_tokens // 1024}k"
        out[f"tokens_{key}"] = int(statistics.median(int(ds.tgt_sizes[b].sum()) for b in picked))
        out[f"collate_ms_{key}"], out[f"collate_cpu_ms_{key}"] = median_ms(ds.collate, picked)
        out[f"row_by_row_ms_{key}"], out[f"row_by_row_cpu_ms_{key}"] = median_ms(lambda b: row_by_row(ds, b), picked)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
