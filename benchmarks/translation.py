"""Translation speed on Multi30k: preprocess, training and beam-search figures as one JSON line.

    python benchmarks/translation.py                       # quick: < 5 minutes on 2 cores
    python benchmarks/translation.py --precision bf16      # autocast bf16 training and generation
    python benchmarks/translation.py --checkpoint CK.pt    # generation with a trained model
    python benchmarks/translation.py --model lstm_luong_small   # any registered model or preset

Reads Multi30k from $SEQKIT_DATA/multi30k or ../shared/data/multi30k (or --data). MFU is model
FLOP/s (matmul FLOPs of forward + backward over real tokens, attention included) divided by a
matmul peak measured in this process at the same precision, so runs on noisy machines compare.
The Transformer's FLOPs come from its formula over real tokens; other models' are counted by
torch's FlopCounterMode on the same batches (the matmuls and convolutions of a forward and a
backward pass each, padding included).
Without --checkpoint, generation uses the briefly trained benchmark model with output length
capped by max_len_a/b = 1.2/10, so its sentences/s are indicative only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import sys
import tempfile
import time

import torch

import seqkit
from seqkit.allocator import keep_freed_memory
from seqkit.generation import GenerationConfig
from seqkit.generation.translator import Translator
from seqkit.models.transformer import TransformerConfig
from seqkit.preprocess import PreprocessConfig, preprocess
from seqkit.registry import CRITERIA, MODELS, OPTIMIZERS, TASKS, TOKENIZERS
from seqkit.tasks.translation import TranslationConfig

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def find_data(arg: str | None) -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (arg, os.path.join(os.environ.get("SEQKIT_DATA", ""), "multi30k"),
                 os.path.join(here, "..", "..", "shared", "data", "multi30k")):
        if cand and os.path.isfile(os.path.join(cand, "train.de.gz")):
            return cand
    sys.exit("benchmarks/translation.py: Multi30k not found; pass --data or set SEQKIT_DATA "
             "(examples/translation/multi30k/prepare.sh downloads it)")


def matmul_peak(dtype: torch.dtype, n: int = 1024, reps: int = 20) -> float:
    """Best-of-3 FLOP/s of an n x n x n matmul at ``dtype``."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 * reps / best


def train_flops(cfg: TransformerConfig, vocab: int, src_lens: torch.Tensor, tgt_lens: torch.Tensor) -> float:
    """Forward + backward matmul FLOPs of one batch (3x forward), counting real tokens only."""
    d, f = cfg.embed_dim, cfg.ffn_dim
    S, T = float(src_lens.sum()), float(tgt_lens.sum())
    enc = cfg.encoder_layers * (S * (4 * d * d + 2 * d * f) + 2 * d * float((src_lens**2).sum()))
    dec = cfg.decoder_layers * (T * (4 * d * d + 2 * d * d + 2 * d * f) + S * 2 * d * d
                                + 2 * d * float((tgt_lens**2).sum()) + 2 * d * float((tgt_lens * src_lens).sum()))
    out = T * d * vocab
    return 3 * 2 * (enc + dec + out)


def counted_flops(model, crit, samples) -> float:
    """Forward + backward FLOPs of ``samples``, counted by torch as they run (a backward after each
    forward also frees its graph: forwards alone, with autograd on, kept every graph alive)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        for sample in samples:
            loss, _, _ = crit(model, sample)
            loss.backward()
    model.zero_grad(set_to_none=True)
    return float(counter.get_total_flops())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="folder with Multi30k's {train,val,test_2016_flickr}.{de,en}.gz")
    ap.add_argument("--precision", choices=sorted(DTYPES), default="fp32")
    ap.add_argument("--checkpoint", help="trained checkpoint for the generation figures")
    ap.add_argument("--model", default="transformer_small",
                    help="registered model or preset to train (with share_all_embeddings=true): transformer_small, "
                         "lstm_luong_small, convs2s_small, ...")
    ap.add_argument("--train-updates", type=int, default=40, help="timed training updates (after 5 warm-up)")
    ap.add_argument("--gen-sentences", type=int, default=1000, help="test sentences for batch 64")
    ap.add_argument("--gen-sentences-b1", type=int, default=100, help="test sentences for batch 1")
    ap.add_argument("--gen-repeats", type=int, default=3, help="generation runs per figure; the median is reported")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = ap.parse_args()
    keep_freed_memory()  # as every seqkit command does (seqkit/allocator.py)
    if args.threads:
        torch.set_num_threads(args.threads)
    seqkit.import_builtin_components()
    src = find_data(args.data)
    choices = MODELS.choices()
    if args.model not in choices:
        sys.exit(f"benchmarks/translation.py: unknown --model {args.model!r}; valid: {', '.join(choices)}")
    result = {"model": args.model, "precision": args.precision, "threads": torch.get_num_threads()}
    with tempfile.TemporaryDirectory() as tmp:
        # -- preprocess: the whole corpus, joint 8k BPE, 2 workers ------------------------------
        pcfg = PreprocessConfig(source_lang="de", target_lang="en", trainpref=f"{src}/train", validpref=f"{src}/val",
                                testpref=f"{src}/test_2016_flickr", destdir=f"{tmp}/bin", workers=2,
                                tokenizer=dataclasses.replace(TOKENIZERS.choices()["sentencepiece_bpe"], vocab_size=8000))
        stats = preprocess(pcfg)
        result["preprocess_lines_per_s"] = round(stats["lines_per_s"])
        result["preprocess_seconds"] = round(stats["seconds"], 2)

        # -- training: the recipe's model, token-budget batches of 4096 -------------------------
        torch.manual_seed(1)
        task = TASKS.build(TranslationConfig(data=f"{tmp}/bin"))
        mcfg = dataclasses.replace(choices[args.model], share_all_embeddings=True)
        model = task.build_model(mcfg)
        result["parameters"] = sum(p.numel() for p in model.parameters())
        crit = task.build_criterion(CRITERIA.choices()["label_smoothed_cross_entropy"])
        opt = OPTIMIZERS.build(OPTIMIZERS.choices()["adam"], model.parameters())
        ds = task.load_dataset("train")
        batches = ds.batches(4096, seed=1, epoch=1)
        autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16")
        model.train()
        tokens = flops = 0.0
        timed = []
        for i, b in enumerate(batches[: 5 + args.train_updates]):
            sample = ds.collate(b)
            if i == 5:  # warm-up done
                t0 = time.perf_counter()
            if i >= 5:
                tokens += sample["ntokens"]
                timed.append(sample)
                if isinstance(mcfg, TransformerConfig):
                    flops += train_flops(mcfg, len(task.tgt_dict), sample["net_input"]["src_lengths"].float(),
                                         sample["target"].ne(0).sum(1).float())
            opt.zero_grad(set_to_none=True)
            with autocast:
                loss, n, _ = crit(model, sample)
            (loss / n).backward()
            opt.step()
        secs = time.perf_counter() - t0
        if not isinstance(mcfg, TransformerConfig):
            with autocast:
                flops = counted_flops(model, crit, timed)
        peak = matmul_peak(DTYPES[args.precision])
        result.update(train_tokens_per_s=round(tokens / secs, 1), train_model_gflops=round(flops / secs / 1e9, 2),
                      matmul_peak_gflops=round(peak / 1e9, 2), train_mfu=round(flops / secs / peak, 3),
                      train_updates_timed=args.train_updates)

        # -- generation: beam 5 on test_2016_flickr, batch 64 and batch 1 -------------------------
        if args.checkpoint:
            tr = Translator.from_checkpoint(args.checkpoint, precision=args.precision, gen_cfg=GenerationConfig(beam=5))
            test = tr.task  # the checkpoint's own dictionaries: re-encode the raw test text
            from seqkit.io import read_lines

            sources = [test.encode_source(line) for line in read_lines(f"{src}/test_2016_flickr.de.gz")]
        else:
            gcfg = GenerationConfig(beam=5, max_len_a=1.2, max_len_b=10)
            tr = Translator(task, model.eval(), gcfg, torch.device("cpu"), args.precision)
            test_ds = task.load_dataset("test", with_target=False)
            sources = [test_ds.src[i].tolist() for i in range(len(test_ds))]
        result["checkpoint"] = args.checkpoint
        for key, n, bs in (("gen_sent_per_s_b64", args.gen_sentences, 64), ("gen_sent_per_s_b1", args.gen_sentences_b1, 1)):
            subset, runs, peaks = sources[:n], [], []
            for _ in range(args.gen_repeats):  # the median of a few runs: this kind of VM is noisy
                t0 = time.perf_counter()
                done = sum(1 for _ in tr.generate_batches(subset, bs))
                runs.append(round(done / (time.perf_counter() - t0), 2))
                peaks.append(round(matmul_peak(torch.float32) / 1e9))  # the machine's speed just then
            result[key] = sorted(runs)[len(runs) // 2]
            result[key.replace("per_s", "runs")] = runs
            result[key.replace("sent_per_s", "fp32_peak_gflops")] = peaks
            result[key.replace("per_s", "count")] = done
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
