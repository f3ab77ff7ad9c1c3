"""Training-step time of the label-smoothed loss's two paths as one JSON line: the logits path
(``(B, T, V)`` logits, every position through the log-softmax) beside the fused path (the scored
rows' features projected a block at a time, ``target_index``), on the Multi30k recipe's model
(transformer_small, one 8,000-symbol embedding shared by source, target and output) and random
token-budget batches of Multi30k's lengths.

    python benchmarks/fused_loss.py                                  # CPU, fp32, 4,096-token batches
    python benchmarks/fused_loss.py --device cuda --precision bf16 --max-tokens 16384
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from typing import Any, Dict, List

import numpy as np
import torch

from seqkit.criteria.cross_entropy import LabelSmoothedCrossEntropyConfig, LabelSmoothedCrossEntropyCriterion
from seqkit.data.dictionary import Dictionary
from seqkit.models.transformer import TransformerModel, transformer_small


def batches(n: int, max_tokens: int, pad: int, vocab: int, rng: np.random.Generator) -> List[Dict[str, Any]]:
    """Token-budget batches of sentences 8-24 tokens long (Multi30k's range), sorted by length."""
    out = []
    for _ in range(n):
        T = int(rng.integers(10, 24))
        B = max_tokens // T
        tgt_len = np.clip(T - rng.integers(0, 3, B), 2, T)
        src_len = np.clip(T - rng.integers(0, 4, B), 2, T)
        mask_t = np.arange(T)[None, :] < tgt_len[:, None]
        mask_s = np.arange(T)[None, :] < src_len[:, None]
        tgt = np.where(mask_t, rng.integers(4, vocab, (B, T)), pad)
        tgt[np.arange(B), tgt_len - 1] = 2  # eos
        prev = np.where(mask_t, np.concatenate([np.zeros((B, 1), np.int64), tgt[:, :-1]], axis=1), pad)
        src = np.where(mask_s, rng.integers(4, vocab, (B, T)), pad)
        sample = {"net_input": {"src_tokens": torch.from_numpy(src), "src_lengths": torch.from_numpy(src_len),
                                "prev_output_tokens": torch.from_numpy(prev)},
                  "target": torch.from_numpy(tgt), "ntokens": int(tgt_len.sum()), "nsentences": B,
                  "src_padded": bool((src_len < T).any()),
                  "target_index": torch.from_numpy(np.flatnonzero(tgt.reshape(-1) != pad))}
        out.append(sample)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=8, help="timed steps per path (after 2 untimed), alternating")
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads; the CPU time (not wall time) is compared, "
                                                           "so a busy machine shifts both paths alike")
    args = ap.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    d = Dictionary([f"w{i}" for i in range(args.vocab - 4)])
    torch.manual_seed(1)
    cfg = dataclasses.replace(transformer_small(), share_all_embeddings=True)
    model = TransformerModel(cfg, d, d).to(device).train()
    task = type("Task", (), {"ignore_index": d.pad()})()
    crit = LabelSmoothedCrossEntropyCriterion(LabelSmoothedCrossEntropyConfig(), task)
    data = batches(args.steps + 2, args.max_tokens, d.pad(), len(d), np.random.default_rng(1))
    data = [{k: ({n: t.to(device) for n, t in v.items()} if isinstance(v, dict) else
                 v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in s.items()} for s in data]
    paths = {"logits": lambda s: {k: v for k, v in s.items() if k != "target_index"}, "fused": lambda s: s}
    times: Dict[str, List[float]] = {p: [] for p in paths}
    clock = time.perf_counter if device.type == "cuda" else time.process_time
    for i, sample in enumerate(data):
        for name in (paths if i % 2 else reversed(list(paths))):  # alternate which goes first
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = clock()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
                loss, _, _ = crit(model, paths[name](sample))
            loss.backward()
            model.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if i >= 2:
                times[name].append((clock() - t0) * 1000)
    out = {"benchmark": "fused_loss", "device": device.type, "precision": args.precision, "max_tokens": args.max_tokens,
           "vocab": len(d), "threads": torch.get_num_threads(), "steps": args.steps}
    for name, ts in times.items():
        out[f"{name}_{'ms' if device.type == 'cuda' else 'cpu_ms'}"] = round(statistics.median(ts), 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
