"""Translation speed on Multi30k: preprocess, training and beam-search figures as one JSON line.

    python benchmarks/translation.py                       # quick: < 5 minutes on 2 cores
    python benchmarks/translation.py --precision bf16      # bf16 generation (training runs both)
    python benchmarks/translation.py --checkpoint CK.pt    # generation with a trained model, and
                                                           # CTranslate2 on it when seqkit[ct2] is in
    python benchmarks/translation.py --checkpoint CK.pt --generation-only   # the engines alone
    python benchmarks/translation.py --model lstm_luong_small   # any registered model or preset

Reads Multi30k from $SEQKIT_DATA/multi30k or ../shared/data/multi30k (or --data). MFU is model
FLOP/s (matmul FLOPs of forward + backward over real tokens, attention included) divided by a
matmul peak measured in this process at the same precision, so runs on noisy machines compare.
The Transformer's FLOPs come from its formula over real tokens; other models' are counted by
torch's FlopCounterMode on the same batches (the matmuls and convolutions of a forward and a
backward pass each, padding included).
Training runs in a child process per precision (fp32, then bf16 autocast), so each reports its
own peak RSS. Without --checkpoint, generation uses the briefly trained fp32 model with output
length capped by max_len_a/b = 1.2/10, so its sentences/s are indicative only. With --checkpoint
seqkit's engine also runs with plain (unpacked) weights and with quantize=int8; with
the ctranslate2 package, the comparison runs each engine in a process of its own
(``engine_worker.py``: seqkit's Translator as seqkit-generate runs it; CTranslate2's
``translate_batch`` as its users drive it, no torch in its process): CTranslate2's best thread
layout is picked first, then the two engines alternate ``--rounds`` times on the same sentences,
and ``gen_vs_ct2_{b64,b1}`` / ``gen_vs_ct2_int8_{b64,b1}`` are the medians of the per-round ratios
(the machine drifts over minutes; every round is kept beside them). ``--ct2-in-process`` adds the
old same-process figures under ``ct2_in_process``, a diagnostic only: there the two OpenMP runtimes
slow each other. ``--generation-only`` skips preprocessing and training. Start-up is timed as whole
`seqkit-generate` processes translating one stdin sentence (``startup_s_ct2``: engine=ctranslate2
on the export, which imports no torch).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch

import seqkit
from seqkit.core.allocator import keep_freed_memory, limit_onednn_cache
from seqkit.core.cpu import cpu_info, has_bf16_units
from seqkit.core.registry import CRITERIA, MODELS, OPTIMIZERS, TASKS, TOKENIZERS
from seqkit.generation import GenerationConfig
from seqkit.generation.base import as_list
from seqkit.generation.translator import Translator, pack_for_search
from seqkit.models.transformer import TransformerConfig
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tasks.translation import TranslationConfig

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
def find_data(arg: str | None, folder: str = "multi30k", probe: str = "train.de.gz",
              prepare: str = "examples/translation/multi30k/prepare.sh") -> str:
    """``arg``, else ``$SEQKIT_DATA/folder``, else ``../shared/data/folder``: the first holding ``probe``."""
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (arg, os.path.join(os.environ.get("SEQKIT_DATA", ""), folder),
                 os.path.join(here, "..", "..", "shared", "data", folder)):
        if cand and os.path.isfile(os.path.join(cand, probe)):
            return cand
    sys.exit(f"{sys.argv[0]}: {folder} not found; pass --data or set SEQKIT_DATA ({prepare} downloads it)")


def matmul_peak(dtype: torch.dtype, n: int = 2048, reps: int = 3) -> float:
    """Best-of-3 FLOP/s of ``reps`` n x n x n matmuls at ``dtype`` on all threads (2048: the issue's
    definition of the MFU peak)."""
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


def train_figures(bin_dir: str, model_name: str, precision: str, updates: int, save: str = "") -> dict:
    """Train ``model_name`` for 5 + ``updates`` batches of 4,096 tokens at ``precision``: tokens/s and MFU
    of the timed ``updates``, and this process' peak RSS (so run it in a process of its own)."""
    if precision != "fp32":
        limit_onednn_cache()  # as seqkit-train does (seqkit/training/precision.py)
    torch.manual_seed(1)
    task = TASKS.build(TranslationConfig(data=bin_dir))
    mcfg = dataclasses.replace(MODELS.choices()[model_name], share_all_embeddings=True)
    model = task.build_model(mcfg)
    crit = task.build_criterion(CRITERIA.choices()["label_smoothed_cross_entropy"])
    opt = OPTIMIZERS.build(OPTIMIZERS.choices()["adam"], model.parameters())
    ds = task.load_dataset("train")
    batches = ds.batches(4096, seed=1, epoch=1)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    model.train()
    tokens = flops = 0.0
    timed = []
    for i, b in enumerate(batches[: 5 + updates]):
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
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if not isinstance(mcfg, TransformerConfig):
        with autocast:
            flops = counted_flops(model, crit, timed)
    peak = matmul_peak(DTYPES[precision])
    if save:
        torch.save(model.state_dict(), save)
    return {"parameters": sum(p.numel() for p in model.parameters()), "train_tokens_per_s": round(tokens / secs, 1),
            "train_model_gflops": round(flops / secs / 1e9, 2), "matmul_peak_gflops": round(peak / 1e9, 2),
            "train_mfu": round(flops / secs / peak, 3), "train_peak_rss_mb": round(rss)}


def train_in_child(args: argparse.Namespace, bin_dir: str, precision: str, save: str) -> dict:
    """:func:`train_figures` in a fresh process of this script (its last stdout line is the JSON)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--train-child", bin_dir, "--model", args.model,
           "--precision", precision, "--train-updates", str(args.train_updates), "--save", save]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"benchmarks/translation.py: {precision} training failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def timed_runs(translator, sources, batch_size: int, repeats: int) -> tuple:
    """(median sentences/s, all runs, matmul peak GFLOP/s after each run, the last run's best hypothesis
    of each sentence by id)."""
    runs, peaks, best = [], [], {}
    for _ in range(repeats):  # the median of a few runs: this kind of VM is noisy
        rate, best = one_run(translator, sources, batch_size)
        runs.append(round(rate, 2))
        peaks.append(round(matmul_peak(torch.float32) / 1e9))  # the machine's speed just then
    return statistics.median(runs), runs, peaks, best


def one_run(translator, sources, batch_size: int) -> tuple:
    """(sentences/s, the best hypothesis of each sentence by id) of one pass over ``sources``."""
    t0 = time.perf_counter()
    best = {r["id"]: r["hypos"][0] for r in translator.generate_batches(sources, batch_size)}
    return len(best) / (time.perf_counter() - t0), best


def differ(a: dict, b: dict) -> int:
    """How many sentences' best hypotheses differ (token for token) between two runs."""
    return sum(as_list(a[i]["tokens"]) != as_list(b[i]["tokens"]) for i in a)


def bleu(translator, best: dict, refs: list) -> float:
    """sacreBLEU of the detokenized best hypotheses (ids 0..n-1) against the first n references."""
    import sacrebleu

    hyps = [translator.hypothesis_text(best[i])["text"] for i in range(len(best))]
    return round(sacrebleu.corpus_bleu(hyps, [refs[: len(hyps)]]).score, 2)


class RawCT2:
    """CTranslate2's own search, without the Translator's second search of the sentences it leaves
    unfinished at the max length: what the speed comparison times."""

    def __init__(self, translator: Any):  # a CT2Translator
        self.engine = translator.engine

    def generate_batches(self, sources, batch_size: int):
        return ({"id": i, "hypos": h} for i, h in enumerate(self.engine.generate(sources, batch_size)))


def paired_ratio(ours: Any, theirs: Any, sources: list, batch_size: int, rounds: int) -> tuple:
    """seqkit's and CTranslate2's sentences/s timed back to back, ``rounds`` times: (the median of
    the per-round ratios, the ratios), which the machine's drift over minutes does not bias."""
    ratios = []
    for _ in range(rounds):
        mine, _ = one_run(ours, sources, batch_size)
        other, _ = one_run(theirs, sources, batch_size)
        ratios.append(round(mine / other, 3))
    return statistics.median(ratios), ratios


def ct2_figures(args: argparse.Namespace, sets: dict, ours: dict, export_dir: str, refs: list, tr: Any) -> dict:
    """CTranslate2 on the checkpoint: sentences/s at fp32 and int8 for each thread layout of the cores,
    the best layout's figure under the plain key, how many best hypotheses differ from seqkit's (fp32),
    the BLEU of the batch-64 set, and seqkit's engine ``tr`` against the best fp32 layout timed
    back to back (``gen_vs_ct2_*_paired``)."""
    threads = torch.get_num_threads()
    layouts = {64: sorted({(1, threads), (threads, 1)}), 1: sorted({(1, threads), (1, 1)})}  # (inter, intra)
    out: dict = {"ct2_layouts": {}}
    for compute in ("float32", "int8"):
        suffix = "" if compute == "float32" else "_int8"
        for key, (subset, bs) in sets.items():
            best_rate, best = 0.0, None
            for inter, intra in layouts[bs]:
                ct2 = Translator.from_checkpoint(args.checkpoint, engine="ctranslate2", compute_type=compute,
                                                inter_threads=inter, intra_threads=intra, ctranslate2_dir=export_dir,
                                                gen_cfg=GenerationConfig(beam=5))
                rate, _, _, hyps = timed_runs(RawCT2(ct2), subset, bs, args.gen_repeats)
                out["ct2_layouts"][f"{compute} {key} inter {inter} x intra {intra}"] = rate
                if rate > best_rate:
                    best_rate, out[f"ct2_threads_{key}{suffix}"], best = rate, f"inter {inter} x intra {intra}", ct2
                # only the best layout's translator is kept: one with intra_threads >= 2 that has run
                # halves torch's speed at batch 1 for as long as it exists (measured: 30 -> 17 sent/s)
                del ct2
            out[f"ct2_gen_sent_per_s_{key}{suffix}"] = best_rate
            # the thread layout does not change the translations: compare and score the last one's
            if compute == "float32":  # parity with seqkit's engine on the same sentences
                out[f"ct2_differ_{key}"] = differ(ours[key], hyps)
                # and what seqkit-generate engine=ctranslate2 prints (unfinished sentences searched again)
                printed = {r["id"]: r["hypos"][0] for r in best.generate_batches(subset, bs)}
                out[f"ct2_engine_differ_{key}"] = differ(ours[key], printed)
                out[f"gen_vs_ct2_{key}_paired"], out[f"gen_vs_ct2_{key}_paired_runs"] = paired_ratio(
                    tr, RawCT2(best), subset, bs, args.gen_repeats)
            if key == "b64":
                out[f"ct2_bleu{suffix}"] = bleu(best, hyps, refs)
            del best
    return out


WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine_worker.py")


class Worker:
    """An ``engine_worker.py`` process: one engine, loaded once, timed pass by pass on command."""

    def __init__(self, *argv: str):
        self.log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([sys.executable, WORKER, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, cwd=tempfile.gettempdir())
        self.ready = self._answer(" ".join(argv[:1]))

    def _answer(self, what: str) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.log.seek(0)
            sys.exit(f"benchmarks/translation.py: the {what} worker failed:\n{self.log.read()[-2000:]}")
        return json.loads(line)

    def run(self, batch: int, n: int) -> dict:
        self.proc.stdin.write(f"{batch} {n}\n")
        self.proc.stdin.flush()
        return self._answer("engine")

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()
        self.log.close()


def separate_process_figures(checkpoint: str, source: str, export_dir: str, sets: dict, rounds: int) -> dict:
    """seqkit's engine and CTranslate2 each in a process of its own (``engine_worker.py``), fp32 and
    int8: CTranslate2's best thread layout picked first (one timed pass each, after a warm-up), then
    the two engines alternated ``rounds`` times on the same sentences; ``gen_vs_ct2{_int8}_{b64,b1}``
    is the median of the per-round ratios (seqkit / CTranslate2), with every round's figures beside it
    and how many translations differ (pieces, first round)."""
    from seqkit.export.ct2 import cached_export

    folder = cached_export(checkpoint, export_dir)
    threads = len(os.sched_getaffinity(0))
    layouts = {64: sorted({(threads, 1), (1, threads)}), 1: sorted({(1, threads), (1, 1)})}  # (inter, intra)
    out: dict = {"separate_processes": "each engine in its own process, alternated"}
    for compute, quantize, suffix in (("float32", "none", ""), ("int8", "int8", "_int8")):
        ours = Worker("seqkit", checkpoint, source, "--quantize", quantize)
        for key, (n, bs) in sets.items():
            ours.run(bs, min(n, 32))  # warm-up
            best, best_rate = None, 0.0
            for inter, intra in layouts[bs]:
                w = Worker("ctranslate2", folder, source, "--compute", compute, "--inter", str(inter), "--intra", str(intra))
                w.run(bs, min(n, 32))
                rate = w.run(bs, n)["sent_per_s"]
                out[f"sep_ct2_layout{suffix}_{key}_inter{inter}_intra{intra}"] = rate
                if rate > best_rate:
                    best, best_rate = (inter, intra), rate
                w.close()
            theirs = Worker("ctranslate2", folder, source, "--compute", compute, "--inter", str(best[0]),
                            "--intra", str(best[1]))
            theirs.run(bs, min(n, 32))
            mine_rates, their_rates, ratios = [], [], []
            for r in range(rounds):
                a, b = ours.run(bs, n), theirs.run(bs, n)
                if r == 0:
                    out[f"sep_differ{suffix}_{key}"] = sum(x != y for x, y in zip(a["pieces"], b["pieces"]))
                mine_rates.append(a["sent_per_s"])
                their_rates.append(b["sent_per_s"])
                ratios.append(round(a["sent_per_s"] / b["sent_per_s"], 3))
            theirs.close()
            out[f"gen_vs_ct2{suffix}_{key}"] = statistics.median(ratios)
            out[f"gen_vs_ct2{suffix}_{key}_rounds"] = ratios
            out[f"sep_seqkit_sent_per_s{suffix}_{key}"] = mine_rates
            out[f"sep_ct2_sent_per_s{suffix}_{key}"] = their_rates
            out[f"sep_ct2_threads{suffix}_{key}"] = f"inter {best[0]} x intra {best[1]}"
            out[f"sep_sentences_{key}"] = n
        ours.close()
    return out


def startup_seconds(checkpoint: str, repeats: int = 3, engine: str = "seqkit", export_dir: str = "") -> float:
    """Median wall time of whole ``seqkit-generate`` processes translating one stdin sentence (beam 5)."""
    # run from elsewhere: a checkout's seqkit/ (no cli/ until installed) must not shadow the package
    cmd = [sys.executable, "-c", "from seqkit.cli.generate import main; main()", f"path={os.path.abspath(checkpoint)}",
           "input=-", f"engine={engine}"] + ([f"ctranslate2_dir={os.path.abspath(export_dir)}"] if export_dir else [])
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        done = subprocess.run(cmd, input="Ein Mann fährt Fahrrad.\n", capture_output=True, text=True,
                              cwd=tempfile.gettempdir())
        times.append(time.perf_counter() - t0)
        if done.returncode != 0:
            sys.exit(f"benchmarks/translation.py: seqkit-generate failed:\n{done.stderr[-2000:]}")
    return round(statistics.median(times), 2)


def train_section(args: argparse.Namespace, src: str, tmp: str, result: dict) -> None:
    """Preprocessing and training figures into ``result``; the fp32 model saved as ``tmp/model.pt``."""
    # -- preprocess: the whole corpus, joint 8k BPE, 2 workers ------------------------------
    pcfg = PreprocessConfig(source_lang="de", target_lang="en", trainpref=f"{src}/train", validpref=f"{src}/val",
                            testpref=f"{src}/test_2016_flickr", destdir=f"{tmp}/bin", workers=2,
                            tokenizer=dataclasses.replace(TOKENIZERS.choices()["sentencepiece_bpe"], vocab_size=8000))
    stats = preprocess(pcfg)
    result["preprocess_lines_per_s"] = round(stats["lines_per_s"])
    result["preprocess_seconds"] = round(stats["seconds"], 2)

    # -- training: the recipe's model, token-budget batches of 4096, fp32 then bf16 ----------
    bf16_units = has_bf16_units(result)
    run_bf16 = args.bf16_train == "yes" or (args.bf16_train == "auto" and bf16_units)
    if args.bf16_train == "auto" and not bf16_units:
        # without bf16 units torch's bf16 matmuls are emulated (this repo's AMD EPYC: ~1 GFLOP/s, 61
        # tokens/s), and 45 updates would take most of an hour
        result["train_bf16"] = "skipped: no AVX512-BF16, AMX or ARM bf16 on this CPU (--bf16-train yes runs it)"
    for precision in ("fp32", "bf16") if run_bf16 else ("fp32",):
        fig = train_in_child(args, f"{tmp}/bin", precision, f"{tmp}/model.pt" if precision == "fp32" else "")
        result["parameters"] = fig.pop("parameters")
        suffix = "" if precision == "fp32" else "_bf16"
        result.update({k + suffix: v for k, v in fig.items()})
    result["train_updates_timed"] = args.train_updates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="folder with Multi30k's {train,val,test_2016_flickr}.{de,en}.gz")
    ap.add_argument("--precision", choices=sorted(DTYPES), default="fp32", help="generation precision")
    ap.add_argument("--checkpoint", help="trained checkpoint for the generation figures")
    ap.add_argument("--model", default="transformer_small",
                    help="registered model or preset to train (with share_all_embeddings=true): transformer_small, "
                         "lstm_luong_small, convs2s_small, ...")
    ap.add_argument("--train-updates", type=int, default=40, help="timed training updates (after 5 warm-up)")
    ap.add_argument("--gen-sentences", type=int, default=1000, help="test sentences for batch 64")
    ap.add_argument("--gen-sentences-b1", type=int, default=300, help="test sentences for batch 1")
    ap.add_argument("--gen-repeats", type=int, default=3, help="generation runs per figure; the median is reported")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    ap.add_argument("--no-ct2", action="store_true", help="skip CTranslate2 even when it is installed")
    ap.add_argument("--ct2-in-process", action="store_true",
                    help="also time CTranslate2 inside this process (a diagnostic: the two OpenMP runtimes interfere)")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of the two engines in separate processes")
    ap.add_argument("--generation-only", action="store_true", help="skip preprocessing and training (needs --checkpoint)")
    ap.add_argument("--bf16-train", choices=("auto", "yes", "no"), default="auto",
                    help="bf16 training figures: auto runs them where the CPU has AVX512-BF16 or AMX")
    ap.add_argument("--train-child", metavar="BIN", help=argparse.SUPPRESS)  # internal: train_figures only
    ap.add_argument("--save", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    keep_freed_memory()  # as every seqkit command does (seqkit/core/allocator.py)
    if args.threads:
        torch.set_num_threads(args.threads)
    seqkit.import_builtin_components()
    if args.train_child:
        print(json.dumps(train_figures(args.train_child, args.model, args.precision, args.train_updates, args.save)))
        return
    src = find_data(args.data)
    choices = MODELS.choices()
    if args.model not in choices:
        sys.exit(f"benchmarks/translation.py: unknown --model {args.model!r}; valid: {', '.join(choices)}")
    if args.generation_only and not args.checkpoint:
        sys.exit("benchmarks/translation.py: --generation-only needs --checkpoint")
    result = {"model": args.model, "precision": args.precision, "threads": torch.get_num_threads(), **cpu_info(),
              "fp32_matmul_peak_gflops": round(matmul_peak(torch.float32) / 1e9)}
    with tempfile.TemporaryDirectory() as tmp:
        if not args.generation_only:
            train_section(args, src, tmp, result)

        # -- generation: beam 5 on test_2016_flickr, batch 64 and batch 1 -------------------------
        if args.checkpoint:
            tr = Translator.from_checkpoint(args.checkpoint, precision=args.precision, gen_cfg=GenerationConfig(beam=5))
            test = tr.task  # the checkpoint's own dictionaries: re-encode the raw test text
            from seqkit.core.io import read_lines

            sources = [test.encode_source(line) for line in read_lines(f"{src}/test_2016_flickr.de.gz")]
            refs = list(read_lines(f"{src}/test_2016_flickr.en.gz"))
        else:
            task = TASKS.build(TranslationConfig(data=f"{tmp}/bin"))
            model = task.build_model(dataclasses.replace(choices[args.model], share_all_embeddings=True))
            model.load_state_dict(torch.load(f"{tmp}/model.pt"))
            gcfg = GenerationConfig(beam=5, max_len_a=1.2, max_len_b=10)
            pack_for_search(model.eval(), True, "cpu", args.precision, "none")  # as seqkit-generate does
            tr = Translator(task, model, gcfg, torch.device("cpu"), args.precision)
            test_ds = task.load_dataset("test", with_target=False)
            sources = [test_ds.src[i].tolist() for i in range(len(test_ds))]
        result["checkpoint"] = args.checkpoint
        sets = {"b64": (sources[: args.gen_sentences], 64), "b1": (sources[: args.gen_sentences_b1], 1)}
        ours = {}
        for key, (subset, bs) in sets.items():
            rate, runs, peaks, ours[key] = timed_runs(tr, subset, bs, args.gen_repeats)
            result[f"gen_sent_per_s_{key}"], result[f"gen_sent_runs_{key}"] = rate, runs
            result[f"gen_fp32_peak_gflops_{key}"], result[f"gen_sent_count_{key}"] = peaks, len(subset)
        result["gen_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        if args.checkpoint:  # the same sentences through seqkit's engine with plain (unpacked) weights, then int8
            result["gen_bleu"] = bleu(tr, ours["b64"], refs)
            unpacked = {"precision": args.precision, "packed_weights": False}
            for name, kw in (("unpacked", unpacked), ("int8", {"quantize": "int8"})):
                other = Translator.from_checkpoint(args.checkpoint, gen_cfg=GenerationConfig(beam=5), **kw)
                for key, (subset, bs) in sets.items():
                    rate, _, _, best = timed_runs(other, subset, bs, args.gen_repeats)
                    result[f"gen_sent_per_s_{key}_{name}"] = rate
                    result[f"gen_{name}_differ_{key}"] = differ(ours[key], best)
                    if name == "int8" and key == "b64":
                        result["gen_bleu_int8"] = bleu(other, best, refs)
        have_ct2 = bool(args.checkpoint) and not args.no_ct2 and importlib.util.find_spec("ctranslate2") is not None
        if args.checkpoint and not args.no_ct2 and not have_ct2:
            result["ct2"] = "not installed (pip install 'seqkit[ct2]')"
        if have_ct2:
            sizes = {key: (len(subset), bs) for key, (subset, bs) in sets.items()}
            result.update(separate_process_figures(args.checkpoint, f"{src}/test_2016_flickr.de.gz", f"{tmp}/ct2", sizes,
                                                   args.rounds))
            if args.ct2_in_process:  # the diagnostic, under keys of its own
                inproc = ct2_figures(args, sets, ours, f"{tmp}/ct2", refs, tr)
                inproc["gen_vs_ct2_b64"] = round(result["gen_sent_per_s_b64"] / inproc["ct2_gen_sent_per_s_b64"], 3)
                inproc["gen_vs_ct2_b1"] = round(result["gen_sent_per_s_b1"] / inproc["ct2_gen_sent_per_s_b1"], 3)
                result["ct2_in_process"] = inproc
        if args.checkpoint:
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import torch"], check=True)
            result["import_torch_s"] = round(time.perf_counter() - t0, 2)
            result["startup_s"] = startup_seconds(args.checkpoint)
            if have_ct2:
                result["startup_s_ct2"] = startup_seconds(args.checkpoint, engine="ctranslate2", export_dir=f"{tmp}/ct2")
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
