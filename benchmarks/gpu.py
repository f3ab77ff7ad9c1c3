"""Training and generation speed on one GPU (Tatoeba de-en) as one JSON object: seqkit-train as a user
runs it beside a bare training loop, and seqkit's beam search beside HuggingFace transformers'.

    python benchmarks/gpu.py --out benchmarks/results/DATE_h100.json       # one H100: ~6 minutes with --variants default
    python benchmarks/gpu.py --workdir /tmp/gpu-bench            # keep (and reuse) the preprocessed corpus
    python benchmarks/gpu.py --precisions bf16 --models transformer_base     # a part of the grid
    python benchmarks/gpu.py --precisions bf16 --variants fp32_weights,default,pack,compile,all --parts train
    python benchmarks/gpu.py --dry-run                           # every step on the CPU: toy corpus, tiny model
    python benchmarks/gpu.py --time-limit 480 --out X.json       # what cannot end in 480 s is skipped; X.json
                                                                 # is rewritten after every step ("complete")

Each measured program is a child process of its own, started as a user's would be: seqkit-train per
configuration while ``nvidia-smi`` samples the GPU; the bare loop and the matmul peaks (``--child
bare``); each translation engine (``--child seqkit``, ``--child transformers``; these children are
in ``gpu_children.py``) on a checkpoint trained here and exported with ``seqkit-export format=huggingface``. Tokens/s count real target
tokens; MFU, the Transformer's matmul FLOPs of forward and backward over real tokens
(``translation.train_flops``). Every argument is checked before anything runs (a bad one is one line
on stderr); a part that does not run says why in one line (``skipped``, and ``error`` where its
figures would be).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import random
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

import torch

from gpu_children import CHILDREN, read_source, significant  # benchmarks/gpu_children.py: the measured child programs
from gpu_machine import Budget, GpuSampler, busy_share, environment, run_process, write_json  # benchmarks/gpu_machine.py
from arguments import Parser, comma_list, one_of, out_file, positive, tatoeba_data  # benchmarks/arguments.py
from translation import train_flops  # benchmarks/translation.py, beside this file

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TEST_PAIRS = 1000  # Tatoeba's seeded test split
PRECISIONS = ("fp32", "bf16", "fp16")
PARTS = ("train", "generation")


@dataclasses.dataclass(frozen=True)
class Variant:
    """seqkit-train overrides on top of the grid's settings, and the precision they need (None: any)."""

    overrides: Tuple[str, ...] = ()
    precision: Optional[str] = None


# common.param_dtype=auto (the default) already holds bf16/fp16 weights on a GPU where it can:
# fp32_weights is the path before it (fp32 weights, autocast)
PACK, COMPILE, BF16_WEIGHTS = "dataset.pack=true", "common.compile=true", "common.param_dtype=bf16"
VARIANTS = {"default": Variant(), "pack": Variant((PACK,)), "compile": Variant((COMPILE,)),
            "bf16_weights": Variant((BF16_WEIGHTS,), "bf16"), "fp32_weights": Variant(("common.param_dtype=fp32",)),
            "all": Variant((PACK, COMPILE, BF16_WEIGHTS), "bf16")}


def compiles(plan: "Plan", variant: Optional[str] = None) -> bool:
    """Whether seqkit-train runs compiled: the variant's overrides or ``--extra`` say so."""
    overrides = [*(VARIANTS[variant].overrides if variant else ()), *plan.extra]
    return any(o.replace(" ", "").lower() == COMPILE for o in overrides)


@dataclasses.dataclass
class Plan:
    """What one run measures (the GPU's grid; :func:`dry_plan` is its small CPU copy)."""

    precisions: List[str] = dataclasses.field(default_factory=lambda: ["bf16", "fp16"])
    max_tokens: List[int] = dataclasses.field(default_factory=lambda: [16384, 65536])
    models: List[str] = dataclasses.field(default_factory=lambda: ["transformer_base", "transformer_big"])
    variants: List[str] = dataclasses.field(default_factory=lambda: ["default", "all"])  # names in VARIANTS
    extra: List[str] = dataclasses.field(default_factory=list)  # overrides of every seqkit-train run
    train_seconds: float = 8.0  # seqkit-train's training time per configuration (0: max_update alone)
    max_update: int = 2000  # and its update limit
    log_tokens: int = 163840  # budget tokens between log records: common.log_interval = log_tokens / max_tokens
    bare_warmup: int = 5  # bare loop: untimed updates, then timed ones
    bare_updates: int = 30
    checkpoint_precision: str = "bf16"  # the generation checkpoint's training
    checkpoint_model: str = "transformer_base"
    checkpoint_seconds: float = 90.0
    checkpoint_updates: int = 0
    checkpoint_max_tokens: int = 16384
    gen_sentences: int = TEST_PAIRS  # test sentences translated, beam 5, batches of 64
    max_len: int = 200  # longest translation (tokens before </s>)
    vocab_size: int = 16000  # joint sentencepiece BPE
    matmul_n: int = 8192  # the matmul peaks' n x n x n


def dry_plan() -> Plan:
    """Every step at toy size on the CPU. fp32 training: bf16 is ~8x slower there at these sizes (oneDNN
    builds its kernels for each new batch shape), and the path through seqkit-train is the same."""
    return dataclasses.replace(Plan(), precisions=["fp32", "fp16"], max_tokens=[1024, 2048], models=["transformer_tiny"],
                               variants=["default", "pack"], train_seconds=0.0, max_update=6, log_tokens=2048,
                               bare_warmup=1, bare_updates=4,
                               checkpoint_precision="fp32", checkpoint_model="transformer_tiny", checkpoint_seconds=0.0,
                               checkpoint_updates=10, checkpoint_max_tokens=2048, gen_sentences=32, max_len=20,
                               vocab_size=300, matmul_n=1024)


# -- the corpus ------------------------------------------------------------------------------------
def split_tatoeba(folder: str, raw: str, test: int, seed: int = 1) -> None:
    """Tatoeba's ``deu.txt`` (English<TAB>German, no official split) as a seeded split: ``test`` pairs
    for ``raw/test.{de,en}``, the rest for ``raw/train.{de,en}``."""
    with open(os.path.join(folder, "deu.txt"), encoding="utf-8") as f:
        pairs = [line.rstrip("\n").split("\t")[:2] for line in f if "\t" in line]
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    os.makedirs(raw, exist_ok=True)
    for split, ids in (("test", order[:test]), ("train", order[test:])):
        for lang, side in (("de", 1), ("en", 0)):
            with open(os.path.join(raw, f"{split}.{lang}"), "w", encoding="utf-8") as f:
                f.writelines(pairs[i][side] + "\n" for i in ids)


def tatoeba_folder(arg: Optional[str]) -> str:
    """``--data``, else what ``examples/corpus.py`` finds ($SEQKIT_DATA, ../shared/data, examples/raw) or downloads."""
    if arg:
        return arg
    done, _ = run_process([sys.executable, os.path.join(REPO, "examples", "corpus.py"), "tatoeba_deu_eng"], REPO,
                          "examples/corpus.py", log=False)
    if isinstance(done, str):
        sys.exit(f"benchmarks/gpu.py: {done} (or pass --data FOLDER holding deu.txt)")
    return done.stdout.strip()


def prepare_data(args: argparse.Namespace, plan: Plan, work: str) -> Dict[str, Any]:
    """The raw splits and ``work/bin`` (seqkit-preprocess, joint BPE), made once per work folder."""
    raw, bin_dir = os.path.join(work, "raw"), os.path.join(work, "bin")
    info: Dict[str, Any] = {"corpus": "toy" if args.dry_run else "tatoeba_deu_eng", "vocab_size": plan.vocab_size}
    if os.path.isfile(os.path.join(bin_dir, "preprocess.json")):
        info.update(preprocess_seconds=None, preprocess_reused=True)
        return info
    if args.dry_run:
        from seqkit.data.toy_corpus import make_corpus  # what the quickstart translates

        make_corpus(raw, 3000, 0, 200, seed=1)
    else:
        split_tatoeba(tatoeba_folder(args.data), raw, TEST_PAIRS)
    cmd = [sys.executable, "-m", "seqkit.cli.preprocess", "source_lang=de", "target_lang=en", f"trainpref={raw}/train",
           f"testpref={raw}/test", f"destdir={bin_dir}", "overwrite=true", "tokenizer=sentencepiece_bpe",
           f"tokenizer.vocab_size={plan.vocab_size}", f"workers={min(8, os.cpu_count() or 1)}"]
    done, wall = run_process(cmd, work, "seqkit-preprocess")
    if isinstance(done, str):
        sys.exit(f"benchmarks/gpu.py: {done}")
    info.update(preprocess_seconds=round(wall, 1), preprocess_reused=False)
    return info


def flops_per_token(bin_dir: str, models: List[str]) -> Dict[str, Any]:
    """Training pairs, target tokens, and each model's forward + backward FLOPs per real target token
    averaged over the whole training split (the formula is a sum over sentences, so this is exact
    for an epoch; a log interval's batches are a sample of it)."""
    import seqkit
    from seqkit.core.registry import MODELS, TASKS
    from seqkit.tasks.translation import TranslationConfig

    seqkit.import_builtin_components()
    task = TASKS.build(TranslationConfig(data=bin_dir))
    ds = task.load_dataset("train")
    src, tgt = torch.tensor(ds.src_sizes, dtype=torch.float64), torch.tensor(ds.tgt_sizes, dtype=torch.float64)
    vocab = len(task.tgt_dict)
    per_token = {m: train_flops(MODELS.choices()[m], vocab, src, tgt) / float(tgt.sum()) for m in models}
    return {"train_pairs": len(ds), "train_target_tokens": int(tgt.sum()), "dictionary_size": vocab,
            "flops_per_target_token": per_token}


# -- seqkit-train, as a user runs it -------------------------------------------------------------------
def train_command(bin_dir: str, save_dir: str, precision: str, max_tokens: int, model: str, device: str,
                  seconds: float, updates: int, *extra: str) -> List[str]:
    """seqkit-train as a user types it, stopping after ``seconds`` of training or ``updates`` (0: no limit)."""
    return [sys.executable, "-m", "seqkit.cli.train", f"task.data={bin_dir}", f"checkpoint.save_dir={save_dir}",
            "checkpoint.reset=true", "dataset.valid_subset=", f"model={model}", "model.share_all_embeddings=true",
            f"common.precision={precision}", f"common.device={device}", f"dataset.max_tokens={max_tokens}",
            f"optimization.stop_time_hours={seconds / 3600:.6f}", f"optimization.max_update={updates}",
            "common.log_format=json", *extra]


def train_records(save_dir: str) -> List[Dict[str, Any]]:
    path = os.path.join(save_dir, "train_log.jsonl")
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [r for r in (json.loads(line) for line in f if line.strip()) if r.get("tag") == "train"]


def run_train(cmd: List[str], work: str, save_dir: str, timeout: float) -> Tuple[Any, float]:
    shutil.rmtree(save_dir, ignore_errors=True)  # train_log.jsonl is appended to
    os.makedirs(save_dir)
    return run_process(cmd, work, "seqkit-train", timeout)


def run_name(run: Dict[str, Any]) -> str:
    return f"{run['precision']}_{run['max_tokens']}_{run['model']}_{run['variant']}"


def train_figures(plan: Plan, bin_dir: str, work: str, run: Dict[str, Any], device: str, flops: float,
                  peaks: Dict[str, Optional[float]], budget: Optional[Budget] = None) -> Dict[str, Any]:
    """One configuration through seqkit-train (the variant's overrides, then ``--extra``): tokens/s
    (median of the log intervals after the first), MFU, GPU busy share and peak memory while it
    trained, distinct batch shapes, padding and the data wait where the log has them."""
    name = run_name(run)
    save_dir = os.path.join(work, "runs", name)
    interval = max(1, plan.log_tokens // run["max_tokens"])
    cmd = train_command(bin_dir, save_dir, run["precision"], run["max_tokens"], run["model"], device, plan.train_seconds,
                        plan.max_update, "checkpoint.no_save=true", f"common.log_interval={interval}",
                        *VARIANTS[run["variant"]].overrides, *plan.extra)
    sampler = GpuSampler(os.path.join(work, f"nvidia-smi_{name}.csv")) if device == "cuda" else None
    budget = budget or Budget(None)
    done, wall = run_train(cmd, work, save_dir, timeout=budget.timeout(4 * plan.train_seconds + 300))
    samples = sampler.stop() if sampler is not None else []
    if isinstance(done, str):
        return {"error": done}
    budget.ran(plan.train_seconds, compiles(plan, run["variant"]), wall)  # a failed run says nothing of the time
    records = train_records(save_dir)
    if len(records) < 2:
        return {"error": f"{len(records)} train log records: too few to leave the first out (raise --train-seconds)"}
    later = records[1:]  # the first interval holds the warm-up
    intervals = [r["tokens_per_s"] for r in later]
    rate = statistics.median(intervals)
    waits = [r["data_wait"] for r in later if isinstance(r.get("data_wait"), (int, float))]
    busy, count = busy_share(samples, records[0]["time"], records[-1]["time"])
    last = records[-1]
    params = re.search(r"([\d,]+) parameters", done.stderr)
    return {"parameters": int(params.group(1).replace(",", "")) if params else None, "tokens_per_s": rate,
            "tokens_per_s_intervals": intervals, **mfus(rate * flops, peaks, run["precision"]),
            "updates": last["update"], "loss": last.get("loss"), "wall_s": round(wall, 1), "gpu_busy": busy,
            "gpu_samples": count,
            "peak_gpu_memory_mib": max((mem for _, _, mem in samples), default=None),
            "distinct_shapes": last.get("distinct_shapes"), "padding": last.get("padding"),
            "data_wait": statistics.median(waits) if waits else None}


def mfus(flops_per_s: float, peaks: Dict[str, Optional[float]], precision: str) -> Dict[str, Optional[float]]:
    """Model FLOP/s over the spec peak (``mfu``) and over the measured matmul peak of the run's
    precision (``mfu_measured``; fp16 runs on bf16's tensor cores); null where a peak is."""
    measured = peaks["fp32" if precision == "fp32" else "bf16"]
    return {"mfu": significant(flops_per_s / peaks["spec"]) if peaks["spec"] else None,
            "mfu_measured": significant(flops_per_s / measured) if measured else None}


def run_child(mode: str, spec: Dict[str, Any], work: str, timeout: float = 900) -> Dict[str, Any]:
    """This script's ``--child mode`` in a fresh process: its JSON, or ``{"error": ...}``."""
    done, _ = run_process([sys.executable, os.path.abspath(__file__), "--child", mode, json.dumps(spec)], work,
                          f"--child {mode}", timeout)
    if isinstance(done, str):
        return {"error": done}
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": f"--child {mode} printed no JSON line"}


GENERATION_GUESS = 120.0  # seconds of export and the two engines' translations, a guess for --time-limit


def generation(plan: Plan, bin_dir: str, work: str, device: str, skipped: Dict[str, str],
               budget: Optional[Budget] = None) -> Dict[str, Any]:
    """Train the checkpoint, export it for transformers, translate the test sentences with each
    engine at fp32 and bf16, and count the translations that differ."""
    budget = budget or Budget(None)
    why = budget.refuses("generation", budget.train_need(plan.checkpoint_seconds, compiles(plan)) + GENERATION_GUESS)
    if why:
        skipped["generation"] = why
        return {"skipped": why}
    save_dir = os.path.join(work, "checkpoint")
    cmd = train_command(bin_dir, save_dir, plan.checkpoint_precision, plan.checkpoint_max_tokens, plan.checkpoint_model,
                        device, plan.checkpoint_seconds, plan.checkpoint_updates, "checkpoint.no_epoch_checkpoints=true",
                        "lr_scheduler.warmup_updates=1000",
                        f"common.log_interval={max(1, 10 * plan.log_tokens // plan.checkpoint_max_tokens)}", *plan.extra)
    done, wall = run_train(cmd, work, save_dir, timeout=budget.timeout(3 * plan.checkpoint_seconds + 300))
    if isinstance(done, str):
        skipped["generation"] = done
        return {"error": done}
    last = (train_records(save_dir) or [{}])[-1]
    out: Dict[str, Any] = {"checkpoint": {"model": plan.checkpoint_model, "precision": plan.checkpoint_precision,
                                          "max_tokens": plan.checkpoint_max_tokens,
                                          "updates": last.get("update"), "loss": last.get("loss"),
                                          "train_s": last.get("train_wall"), "wall_s": round(wall, 1)}}
    checkpoint, hf = os.path.join(save_dir, "checkpoint_last.pt"), os.path.join(work, "hf")
    exported, wall = run_process([sys.executable, "-m", "seqkit.cli.export", "format=huggingface", f"path={checkpoint}",
                                  f"output={hf}", "overwrite=true"], work, "seqkit-export format=huggingface",
                                 budget.timeout(900))
    out["export_s"] = round(wall, 1)
    source = os.path.join(work, "raw", "test.de")
    spec = {"checkpoint": checkpoint, "hf": hf, "source": source, "n": plan.gen_sentences, "device": device,
            "precisions": ["fp32", "bf16"], "beam": 5, "batch": 64, "max_len": plan.max_len,
            "warmup": min(64, plan.gen_sentences // 4)}  # sentences translated untimed first
    out.update(sentences=len(read_source(source, plan.gen_sentences)), beam=5, batch=64, max_len=plan.max_len)
    engines = {"seqkit": run_child("seqkit", spec, work, budget.timeout(900))}
    engines["transformers"] = ({"error": exported} if isinstance(exported, str)
                               else run_child("transformers", spec, work, budget.timeout(900)))
    for name, figures in engines.items():  # the child says when transformers does not import
        if "skipped" in figures or "error" in figures:
            why = figures.pop("skipped", None) or figures["error"]
            skipped[name if name == "transformers" else "seqkit_generation"] = why
    ours, theirs = engines["seqkit"], engines["transformers"]
    for name, figures in (("seqkit", ours), ("transformers", theirs)):
        out[f"{name}_sent_per_s"] = {p: figures[p]["sent_per_s"] if p in figures else None for p in spec["precisions"]}
        if "error" in figures:
            out[f"{name}_error"] = figures["error"]
    out["transformers_version"] = theirs.get("version")
    out["seqkit_bf16_vs_fp32_differ"] = (sum(a != b for a, b in zip(ours["fp32"]["ids"], ours["bf16"]["ids"]))
                                         if "fp32" in ours and "bf16" in ours else None)
    for key, field in (("differ_ids", "ids"), ("differ_text", "text")):
        out[key] = {p: sum(a != b for a, b in zip(ours[p][field], theirs[p][field])) if p in ours and p in theirs
                    else None for p in spec["precisions"]}
    pairs = zip(ours["fp32"]["text"], theirs["fp32"]["text"]) if "fp32" in ours and "fp32" in theirs else []
    out["first_differences"] = [{"seqkit": a, "transformers": b} for a, b in pairs if a != b][:3]
    return out


# -- the whole run -----------------------------------------------------------------------------------
BARE_GUESS = 60.0  # seconds of the bare-loop process (matmul peaks, the bare runs), a guess for --time-limit


def grid(plan: Plan, bin_dir: str, work: str, device: str, bare_all: bool, result: Dict[str, Any],
         skipped: Dict[str, str], budget: Budget, save: Any) -> None:
    """The bare-loop process (matmul peaks into ``result``), then seqkit-train for every configuration
    and variant (the variants of a configuration one after another, so an A/B pair runs close in time),
    its rows on ``result["configs"]``; ``save()`` after each step."""
    per_token = result["data"].pop("flops_per_target_token")
    configs = [{"precision": p, "max_tokens": t, "model": m} for p in plan.precisions for t in plan.max_tokens
               for m in plan.models]
    if device == "cpu" and "fp16" in plan.precisions:
        skipped["fp16"] = "fp16 (autocast with loss scaling) is a GPU setting: not run on the CPU"
    for name in plan.variants:
        needs = VARIANTS[name].precision
        if needs and any(p != needs for p in plan.precisions):
            skipped[f"variant {name}"] = f"{' '.join(VARIANTS[name].overrides)} goes with precision {needs} only"
    todo = [c for c in configs if not (device == "cpu" and c["precision"] == "fp16")]
    first = f"{plan.precisions[0]} x {plan.models[0]}"
    beside = [c for c in todo if bare_all or f"{c['precision']} x {c['model']}" == first]
    why = budget.refuses("the bare loop", BARE_GUESS)
    bare = {"error": why} if why else run_child(
        "bare", {"data": bin_dir, "device": device, "runs": beside, "warmup": plan.bare_warmup,
                 "updates": plan.bare_updates, "matmul_n": plan.matmul_n}, work, budget.timeout(900))
    if "error" in bare:
        skipped["bare"] = bare["error"]
    result["matmul_peak_n"] = plan.matmul_n
    peaks = {"spec": result["bf16_spec_tflops"] and result["bf16_spec_tflops"] * 1e12}
    for p in ("bf16", "fp32"):
        result[f"matmul_peak_tflops_{p}"] = bare.get(f"matmul_peak_tflops_{p}")
        peaks[p] = bare[f"matmul_peak_tflops_{p}"] * 1e12 if f"matmul_peak_tflops_{p}" in bare else None
    bare_runs = dict(zip((json.dumps(c) for c in beside), bare.get("runs", [])))

    def row_of(config: Dict[str, Any], variant: str) -> Dict[str, Any]:
        run = {**config, "variant": variant}
        row: Dict[str, Any] = {**run, "flops_per_target_token": significant(per_token[run["model"]], 4)}
        needs = VARIANTS[variant].precision
        if config not in todo or (needs and needs != config["precision"]):
            return {**row, "skipped": skipped["fp16"] if config not in todo else skipped[f"variant {variant}"]}
        why = budget.refuses(f"train {run_name(run)}", budget.train_need(plan.train_seconds, compiles(plan, variant)))
        if why:
            skipped[f"train {run_name(run)}"] = why
            return {**row, "skipped": why}
        row["train"] = train_figures(plan, bin_dir, work, run, device, per_token[run["model"]], peaks, budget)
        if "error" in row["train"]:
            skipped[f"train {run_name(run)}"] = row["train"]["error"]
        figures = dict(bare_runs.get(json.dumps(config)) or {})
        if not figures:
            beside_why = bare.get("error") or f"run beside {first} only (--bare-all: beside every one)"
            return {**row, "bare": {"skipped": beside_why}}
        flops_s = figures.pop("model_flops_per_s")
        row["bare"] = {**figures, **mfus(flops_s, peaks, run["precision"])}
        if "tokens_per_s" in row["train"]:
            row["train_over_bare"] = round(row["train"]["tokens_per_s"] / figures["tokens_per_s"], 3)
        return row

    result["configs"] = []
    save()
    for config in configs:
        for variant in plan.variants:
            result["configs"].append(row_of(config, variant))
            save()


# -- the arguments: every one checked before anything runs ------------------------------------------
def seqkit_refuses(models: List[str], extra: List[str]) -> Optional[str]:
    """Why seqkit refuses ``--models`` (each must be a registered model or preset with the encoder-decoder
    Transformer's config, which the FLOP count reads) or ``--extra`` (seqkit-train's own check, in this
    process, on top of the grid's settings; a key the grid sets has its own option), or None."""
    import seqkit
    from seqkit.cli.common import ConfigBuilder, parse_argv
    from seqkit.core.errors import SeqkitError
    from seqkit.core.registry import MODELS
    from seqkit.models.transformer import TransformerConfig
    from seqkit.training.config import TrainConfig

    seqkit.import_builtin_components()
    choices = MODELS.choices()
    usable = [name for name, cfg in choices.items() if isinstance(cfg, TransformerConfig)]
    for name in models:
        if name not in usable:
            near = difflib.get_close_matches(name, usable, n=1) if name not in choices else []
            why = "is not an encoder-decoder Transformer" if name in choices else "is not a seqkit model"
            return f"--models: {name!r} {why}{f' (did you mean {near[0]}?)' if near else ''}; valid: {', '.join(usable)}"
    base = train_command("data", "save", "fp32", 1024, "transformer_tiny", "cpu", 1.0, 1, "checkpoint.no_save=true",
                         "common.log_interval=1")[3:]
    ours = {o.split("=", 1)[0] for o in base}
    for o in extra:
        if "=" not in o or o.startswith("="):
            return f"--extra: {o!r} is not key=value"
        if o.split("=", 1)[0] in ours:
            return f"--extra: {o.split('=', 1)[0]} is set by the benchmark itself (it sets {', '.join(sorted(ours))})"
    try:
        if extra:
            parse_argv(ConfigBuilder("train", TrainConfig), [*base, *extra], "seqkit-train")
    except SeqkitError as e:
        return f"--extra: seqkit-train: {e}"
    return None


def parse_args() -> argparse.Namespace:
    ap = Parser(prog="benchmarks/gpu.py", description=__doc__.splitlines()[0])
    count, secs = positive(int, "a whole number"), positive(float, "a number of seconds")
    variants = "; ".join(f"{n}: {' '.join(v.overrides) or 'no override'}{' (bf16 only)' if v.precision else ''}"
                         for n, v in VARIANTS.items())
    add = ap.add_argument
    add("--dry-run", action="store_true", help="every step on the CPU: toy corpus, transformer_tiny")
    add("--out", type=out_file, help="also write the JSON object to this file (its folder must exist)")
    add("--workdir", help="work folder (default: a temporary one); its preprocessed corpus is reused")
    add("--data", type=tatoeba_data, help="folder holding Tatoeba's deu.txt (default: examples/corpus.py finds it)")
    add("--precisions", type=comma_list(one_of(PRECISIONS, "precision")), help="comma list of fp32, bf16, fp16 "
        "(bf16,fp16)")
    add("--max-tokens", type=comma_list(count), help="comma list of dataset.max_tokens (16384,65536)")
    add("--models", type=comma_list(str), help="comma list of models or presets (transformer_base,transformer_big)")
    add("--variants", type=comma_list(one_of(VARIANTS, "variant")),
        help=f"comma list of seqkit-train variants run for each configuration (default,all). {variants}")
    add("--extra", type=shlex.split, default=[], help='seqkit-train overrides of every training run: "k=v k=v"')
    add("--parts", type=comma_list(one_of(PARTS, "part")), default=list(PARTS),
        help="comma list of what to measure: train (the grid and the bare loop), generation")
    add("--train-seconds", type=secs, help="seqkit-train's training time per configuration (8)")
    add("--checkpoint-seconds", type=secs, help="training time of the generation checkpoint (90)")
    add("--gen-sentences", type=count, help="test sentences to translate (1000)")
    add("--time-limit", type=secs, help="seconds for the whole run: a step that would end past them is not started "
        "(listed in skipped); --out is rewritten after every step, complete: false until the end (none)")
    add("--bare-all", action="store_true",
        help="the bare loop beside every configuration (default: first precision x first model)")
    add("--child", nargs=2, metavar=("MODE", "SPEC"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return args
    if args.data and args.dry_run:
        ap.error("argument --data: not used by --dry-run (it trains on the toy corpus)")
    if args.workdir and os.path.exists(args.workdir) and not os.path.isdir(args.workdir):
        ap.error(f"argument --workdir: {args.workdir} is a file, not a folder")
    precisions = args.precisions or (dry_plan() if args.dry_run else Plan()).precisions
    for name in args.variants or []:
        needs = VARIANTS[name].precision
        if needs and needs not in precisions:
            ap.error(f"argument --variants: {name} goes with precision {needs}, which the grid lacks (--precisions)")
    why = seqkit_refuses(args.models or [], args.extra) if args.models or args.extra else None
    if why:
        ap.error(f"argument {why}")
    return args


def main() -> None:
    args = parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child[0]](json.loads(args.child[1]))))
        return
    budget = Budget(args.time_limit)
    plan = dry_plan() if args.dry_run else Plan()
    for name in ("precisions", "max_tokens", "models", "variants", "extra", "train_seconds", "checkpoint_seconds",
                 "gen_sentences"):
        if getattr(args, name):
            setattr(plan, name, getattr(args, name))
    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("benchmarks/gpu.py: no CUDA device (--dry-run runs every step on the CPU)")
    skipped: Dict[str, str] = {}
    result: Dict[str, Any] = {"dry_run": args.dry_run, "device": device, **environment(device),
                              "parts": args.parts, "variants": {v: list(VARIANTS[v].overrides) for v in plan.variants},
                              "extra": plan.extra, "time_limit": args.time_limit}
    if result["gpu_name"] is None:
        skipped["gpu_sampling"] = "no GPU / no nvidia-smi: gpu_busy and peak_gpu_memory_mib are null"
    if result["bf16_spec_tflops"] is None:
        skipped["mfu"] = (f"no bf16 spec peak known for {result['gpu_name'] or 'a CPU'}: mfu is null, mfu_measured "
                          "divides by the measured matmul peak")
    work = os.path.abspath(args.workdir) if args.workdir else tempfile.mkdtemp(prefix="seqkit-gpu-bench-")
    os.makedirs(work, exist_ok=True)
    bin_dir = os.path.join(work, "bin")

    def save(complete: bool = False) -> Dict[str, Any]:
        """The JSON so far (``complete`` at the end), rewritten on ``--out``."""
        whole = {**result, "skipped": skipped, "seconds": round(time.perf_counter() - budget.start, 1),
                 "complete": complete}
        if args.out:
            write_json(args.out, whole)
        return whole

    try:
        result["data"] = {**prepare_data(args, plan, work), **flops_per_token(bin_dir, plan.models)}
        save()
        if "train" in args.parts:
            grid(plan, bin_dir, work, device, args.bare_all, result, skipped, budget, save)
        if "generation" in args.parts:
            result["generation"] = generation(plan, bin_dir, work, device, skipped, budget)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(save(complete=True), ensure_ascii=False))


if __name__ == "__main__":
    main()
