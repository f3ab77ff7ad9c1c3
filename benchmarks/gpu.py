"""Training and generation speed on one GPU (Tatoeba de-en) as one JSON object: seqkit-train as a user
runs it beside a bare training loop, and seqkit's beam search beside HuggingFace transformers'.

    python benchmarks/gpu.py --out benchmarks/results/DATE_h100.json       # one H100: sized for about 6 minutes
    python benchmarks/gpu.py --workdir /tmp/gpu-bench            # keep (and reuse) the preprocessed corpus
    python benchmarks/gpu.py --precisions bf16 --models transformer_base     # a part of the grid
    python benchmarks/gpu.py --dry-run                           # every step on the CPU: toy corpus, tiny model

Each measured program is a child process of its own, started as a user's would be: seqkit-train per
configuration while ``nvidia-smi`` samples the GPU; the bare loop and the matmul peaks (``--child
bare``); each translation engine (``--child seqkit``, ``--child transformers``; these children are
in ``gpu_children.py``) on a checkpoint trained here and exported with ``seqkit-export format=huggingface``. Tokens/s count real target
tokens; MFU, the Transformer's matmul FLOPs of forward and backward over real tokens
(``translation.train_flops``). A part that does not run says why (``skipped``, or ``error``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

import torch

from gpu_children import CHILDREN, read_source, significant  # benchmarks/gpu_children.py: the measured child programs
from translation import train_flops  # benchmarks/translation.py, beside this file

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TEST_PAIRS = 1000  # Tatoeba's seeded test split
# dense bf16 (= fp16) tensor-core peaks of NVIDIA's data sheets, TFLOP/s without sparsity; the first
# name contained in the device's name wins ("NVIDIA H100 80GB HBM3" is the SXM part)
BF16_SPEC_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H200 NVL", 835.0), ("H100", 989.0),
                    ("H200", 989.0), ("A100", 312.0), ("L40S", 362.0), ("L40", 181.0), ("L4", 121.0))


@dataclasses.dataclass
class Plan:
    """What one run measures (the GPU's grid; :func:`dry_plan` is its small CPU copy)."""

    precisions: List[str] = dataclasses.field(default_factory=lambda: ["bf16", "fp16"])
    max_tokens: List[int] = dataclasses.field(default_factory=lambda: [16384, 65536])
    models: List[str] = dataclasses.field(default_factory=lambda: ["transformer_base", "transformer_big"])
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
                               train_seconds=0.0, max_update=6, log_tokens=2048, bare_warmup=1, bare_updates=4,
                               checkpoint_precision="fp32", checkpoint_model="transformer_tiny", checkpoint_seconds=0.0,
                               checkpoint_updates=10, checkpoint_max_tokens=2048, gen_sentences=32, max_len=20,
                               vocab_size=300, matmul_n=1024)


def tail(text: str, n: int = 1500) -> str:
    return text[-n:].strip()


def run_process(cmd: List[str], work: str, what: str, timeout: float = 900) -> Tuple[Any, float]:
    """Run ``cmd`` in ``work``: (the finished process, or a line saying how it failed; wall seconds)."""
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"{what} ran past {timeout:.0f} s", time.perf_counter() - t0
    wall = time.perf_counter() - t0
    return (done if done.returncode == 0 else f"{what} exited {done.returncode}: {tail(done.stderr)}"), wall


# -- the machine -------------------------------------------------------------------------------------
def gpu_index() -> str:
    """The physical GPU the children's cuda:0 is, for nvidia-smi's -i."""
    return os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"


def nvidia_smi(*fields: str) -> Optional[List[str]]:
    """One nvidia-smi query of our GPU (None without nvidia-smi or when it fails)."""
    if shutil.which("nvidia-smi") is None:
        return None
    done = subprocess.run(["nvidia-smi", "-i", gpu_index(), f"--query-gpu={','.join(fields)}",
                           "--format=csv,noheader,nounits"], capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return [v.strip() for v in done.stdout.strip().splitlines()[0].split(",")]


def spec_tflops(name: Optional[str]) -> Optional[float]:
    for key, tflops in BF16_SPEC_TFLOPS:
        if name and key in name:
            return tflops
    return None


def environment(device: str) -> Dict[str, Any]:
    """GPU name, driver, memory (nvidia-smi: nothing here touches CUDA, so no context of this process
    sits in the children's memory figures), versions, the CPU, and the bf16 spec peak."""
    from seqkit.core.cpu import cpu_info

    smi = nvidia_smi("name", "driver_version", "memory.total") if device == "cuda" else None
    name = smi[0] if smi else None
    return {"gpu_name": name, "driver_version": smi[1] if smi else None,
            "gpu_memory_mib": float(smi[2]) if smi else None, "torch_version": torch.__version__,
            "cuda_version": torch.version.cuda, "python_version": sys.version.split()[0], **cpu_info(),
            "bf16_spec_tflops": spec_tflops(name)}


def parse_sample(line: str) -> Optional[Tuple[float, float, float]]:
    """``timestamp, utilization.gpu, memory.used`` of nvidia-smi's csv (no units) -> (unix time, busy %,
    MiB); None for a line that is not one (a value of ``[N/A]``, a cut line)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 3:
        return None
    try:
        when = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()  # local time, as time.time()
        return when, float(parts[1]), float(parts[2])
    except ValueError:
        return None


class GpuSampler:
    """``nvidia-smi -lms 250`` in a background process for as long as a child runs."""

    def __init__(self, path: str):
        self.file = open(path, "w+", encoding="utf-8")
        query = "--query-gpu=timestamp,utilization.gpu,memory.used"
        lines = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []  # every sample on disk when it is stopped
        self.proc = subprocess.Popen([*lines, "nvidia-smi", "-i", gpu_index(), query, "--format=csv,noheader,nounits",
                                      "-lms", "250"], stdout=self.file, stderr=subprocess.DEVNULL)

    def stop(self) -> List[Tuple[float, float, float]]:
        self.proc.terminate()
        self.proc.wait()
        self.file.seek(0)
        samples = [parse_sample(line) for line in self.file]
        self.file.close()
        return [s for s in samples if s is not None]


def busy_share(samples: List[Tuple[float, float, float]], start: float, end: float) -> Tuple[Optional[float], int]:
    """Mean GPU utilization (0-1) of the samples taken from ``start`` to ``end``, and their count."""
    inside = [busy for when, busy, _ in samples if start <= when <= end]
    return (round(statistics.mean(inside) / 100, 3) if inside else None), len(inside)


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
                          "examples/corpus.py")
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
    with open(os.path.join(save_dir, "train_log.jsonl"), encoding="utf-8") as f:
        return [r for r in (json.loads(line) for line in f if line.strip()) if r.get("tag") == "train"]


def run_train(cmd: List[str], work: str, save_dir: str, timeout: float) -> Tuple[Any, float]:
    shutil.rmtree(save_dir, ignore_errors=True)  # train_log.jsonl is appended to
    os.makedirs(save_dir)
    return run_process(cmd, work, "seqkit-train", timeout)


def train_figures(plan: Plan, bin_dir: str, work: str, run: Dict[str, Any], device: str, flops: float,
                  peaks: Dict[str, Optional[float]]) -> Dict[str, Any]:
    """One configuration through seqkit-train: tokens/s (median of the log intervals after the first),
    MFU, GPU busy share and peak memory while it trained, distinct batch shapes and padding."""
    name = f"{run['precision']}_{run['max_tokens']}_{run['model']}"
    save_dir = os.path.join(work, "runs", name)
    interval = max(1, plan.log_tokens // run["max_tokens"])
    cmd = train_command(bin_dir, save_dir, run["precision"], run["max_tokens"], run["model"], device, plan.train_seconds,
                        plan.max_update, "checkpoint.no_save=true", f"common.log_interval={interval}")
    sampler = GpuSampler(os.path.join(work, f"nvidia-smi_{name}.csv")) if device == "cuda" else None
    done, wall = run_train(cmd, work, save_dir, timeout=4 * plan.train_seconds + 300)
    samples = sampler.stop() if sampler is not None else []
    if isinstance(done, str):
        return {"error": done}
    records = train_records(save_dir)
    if len(records) < 2:
        return {"error": f"{len(records)} train log records: too few to leave the first out (raise --train-seconds)"}
    intervals = [r["tokens_per_s"] for r in records[1:]]  # the first interval holds the warm-up
    rate = statistics.median(intervals)
    busy, count = busy_share(samples, records[0]["time"], records[-1]["time"])
    last = records[-1]
    params = re.search(r"([\d,]+) parameters", done.stderr)
    return {"parameters": int(params.group(1).replace(",", "")) if params else None, "tokens_per_s": rate,
            "tokens_per_s_intervals": intervals, **mfus(rate * flops, peaks, run["precision"]),
            "updates": last["update"], "loss": last.get("loss"), "wall_s": round(wall, 1), "gpu_busy": busy,
            "gpu_samples": count,
            "peak_gpu_memory_mib": max((mem for _, _, mem in samples), default=None),
            "distinct_shapes": last.get("distinct_shapes"), "padding": last.get("padding")}


def mfus(flops_per_s: float, peaks: Dict[str, Optional[float]], precision: str) -> Dict[str, Optional[float]]:
    """Model FLOP/s over the spec peak (``mfu``) and over the measured matmul peak of the run's
    precision (``mfu_measured``; fp16 runs on bf16's tensor cores); null where a peak is."""
    measured = peaks["fp32" if precision == "fp32" else "bf16"]
    return {"mfu": significant(flops_per_s / peaks["spec"]) if peaks["spec"] else None,
            "mfu_measured": significant(flops_per_s / measured) if measured else None}


def run_child(mode: str, spec: Dict[str, Any], work: str) -> Dict[str, Any]:
    """This script's ``--child mode`` in a fresh process: its JSON, or ``{"error": ...}``."""
    done, _ = run_process([sys.executable, os.path.abspath(__file__), "--child", mode, json.dumps(spec)], work,
                          f"--child {mode}")
    return {"error": done} if isinstance(done, str) else json.loads(done.stdout.strip().splitlines()[-1])


def generation(plan: Plan, bin_dir: str, work: str, device: str, skipped: Dict[str, str]) -> Dict[str, Any]:
    """Train the checkpoint, export it for transformers, translate the test sentences with each
    engine at fp32 and bf16, and count the translations that differ."""
    save_dir = os.path.join(work, "checkpoint")
    cmd = train_command(bin_dir, save_dir, plan.checkpoint_precision, plan.checkpoint_max_tokens, plan.checkpoint_model,
                        device, plan.checkpoint_seconds, plan.checkpoint_updates, "checkpoint.no_epoch_checkpoints=true",
                        "lr_scheduler.warmup_updates=1000",
                        f"common.log_interval={max(1, 10 * plan.log_tokens // plan.checkpoint_max_tokens)}")
    done, wall = run_train(cmd, work, save_dir, timeout=3 * plan.checkpoint_seconds + 300)
    if isinstance(done, str):
        return {"error": done}
    last = (train_records(save_dir) or [{}])[-1]
    out: Dict[str, Any] = {"checkpoint": {"model": plan.checkpoint_model, "precision": plan.checkpoint_precision,
                                          "max_tokens": plan.checkpoint_max_tokens,
                                          "updates": last.get("update"), "loss": last.get("loss"),
                                          "train_s": last.get("train_wall"), "wall_s": round(wall, 1)}}
    checkpoint, hf = os.path.join(save_dir, "checkpoint_last.pt"), os.path.join(work, "hf")
    exported, wall = run_process([sys.executable, "-m", "seqkit.cli.export", "format=huggingface", f"path={checkpoint}",
                                  f"output={hf}", "overwrite=true"], work, "seqkit-export format=huggingface")
    out["export_s"] = round(wall, 1)
    source = os.path.join(work, "raw", "test.de")
    spec = {"checkpoint": checkpoint, "hf": hf, "source": source, "n": plan.gen_sentences, "device": device,
            "precisions": ["fp32", "bf16"], "beam": 5, "batch": 64, "max_len": plan.max_len,
            "warmup": min(64, plan.gen_sentences // 4)}  # sentences translated untimed first
    out.update(sentences=len(read_source(source, plan.gen_sentences)), beam=5, batch=64, max_len=plan.max_len)
    engines = {"seqkit": run_child("seqkit", spec, work)}
    if isinstance(exported, str):
        engines["transformers"] = {"error": exported}
    elif importlib.util.find_spec("transformers") is None:
        skipped["transformers"] = "transformers is not installed (pip install 'seqkit[hf]')"
    else:
        engines["transformers"] = run_child("transformers", spec, work)
    ours, theirs = engines["seqkit"], engines.get("transformers", {})
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
def grid(plan: Plan, bin_dir: str, work: str, device: str, bare_all: bool, result: Dict[str, Any],
         skipped: Dict[str, str]) -> List[Dict[str, Any]]:
    """The bare-loop process (matmul peaks into ``result``), then seqkit-train for every configuration."""
    per_token = result["data"].pop("flops_per_target_token")
    runs = [{"precision": p, "max_tokens": t, "model": m} for p in plan.precisions for t in plan.max_tokens
            for m in plan.models]
    if device == "cpu" and "fp16" in plan.precisions:
        skipped["fp16"] = "fp16 (autocast with loss scaling) is a GPU setting: not run on the CPU"
    todo = [r for r in runs if not (device == "cpu" and r["precision"] == "fp16")]
    first = f"{plan.precisions[0]} x {plan.models[0]}"
    beside = [r for r in todo if bare_all or f"{r['precision']} x {r['model']}" == first]
    bare = run_child("bare", {"data": bin_dir, "device": device, "runs": beside, "warmup": plan.bare_warmup,
                              "updates": plan.bare_updates, "matmul_n": plan.matmul_n}, work)
    result["matmul_peak_n"] = plan.matmul_n
    peaks = {"spec": result["bf16_spec_tflops"] and result["bf16_spec_tflops"] * 1e12}
    for p in ("bf16", "fp32"):
        result[f"matmul_peak_tflops_{p}"] = bare.get(f"matmul_peak_tflops_{p}")
        peaks[p] = bare[f"matmul_peak_tflops_{p}"] * 1e12 if f"matmul_peak_tflops_{p}" in bare else None
    bare_runs = dict(zip((json.dumps(r) for r in beside), bare.get("runs", [])))
    rows = []
    for run in runs:
        row: Dict[str, Any] = {**run, "flops_per_target_token": significant(per_token[run["model"]], 4)}
        rows.append(row)
        if run not in todo:
            row["skipped"] = skipped["fp16"]
            continue
        row["train"] = train_figures(plan, bin_dir, work, run, device, per_token[run["model"]], peaks)
        figures = bare_runs.get(json.dumps(run))
        if figures is None:
            row["bare"] = {"skipped": bare.get("error") or f"run beside {first} only (--bare-all: beside every one)"}
            continue
        flops_s = figures.pop("model_flops_per_s")
        row["bare"] = {**figures, **mfus(flops_s, peaks, run["precision"])}
        if "tokens_per_s" in row["train"]:
            row["train_over_bare"] = round(row["train"]["tokens_per_s"] / figures["tokens_per_s"], 3)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="every step on the CPU: toy corpus, transformer_tiny")
    ap.add_argument("--out", help="also write the JSON object to this file")
    ap.add_argument("--workdir", help="work folder (default: a temporary one); its preprocessed corpus is reused")
    ap.add_argument("--data", help="folder holding Tatoeba's deu.txt (default: examples/corpus.py finds it)")
    ap.add_argument("--precisions", help="comma list of the grid's precisions (bf16,fp16)")
    ap.add_argument("--max-tokens", help="comma list of dataset.max_tokens (16384,65536)")
    ap.add_argument("--models", help="comma list of models or presets (transformer_base,transformer_big)")
    ap.add_argument("--train-seconds", type=float, help="seqkit-train's training time per configuration (8)")
    ap.add_argument("--checkpoint-seconds", type=float, help="training time of the generation checkpoint (90)")
    ap.add_argument("--gen-sentences", type=int, help="test sentences to translate (1000)")
    ap.add_argument("--bare-all", action="store_true",
                    help="the bare loop beside every configuration (default: first precision x first model)")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "SPEC"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child[0]](json.loads(args.child[1]))))
        return
    started = time.perf_counter()
    plan = dry_plan() if args.dry_run else Plan()
    for name, kind in (("precisions", str), ("max_tokens", int), ("models", str)):
        if getattr(args, name):
            setattr(plan, name, [kind(v) for v in getattr(args, name).split(",")])
    for name in ("train_seconds", "checkpoint_seconds", "gen_sentences"):
        if getattr(args, name) is not None:
            setattr(plan, name, getattr(args, name))
    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("benchmarks/gpu.py: no CUDA device (--dry-run runs every step on the CPU)")
    skipped: Dict[str, str] = {}
    result: Dict[str, Any] = {"dry_run": args.dry_run, "device": device, **environment(device)}
    if result["gpu_name"] is None:
        skipped["gpu_sampling"] = "no GPU / no nvidia-smi: gpu_busy and peak_gpu_memory_mib are null"
    if result["bf16_spec_tflops"] is None:
        skipped["mfu"] = (f"no bf16 spec peak known for {result['gpu_name'] or 'a CPU'}: mfu is null, mfu_measured "
                          "divides by the measured matmul peak")
    work = args.workdir or tempfile.mkdtemp(prefix="seqkit-gpu-bench-")
    os.makedirs(work, exist_ok=True)
    bin_dir = os.path.join(work, "bin")
    try:
        result["data"] = {**prepare_data(args, plan, work), **flops_per_token(bin_dir, plan.models)}
        result["configs"] = grid(plan, bin_dir, work, device, args.bare_all, result, skipped)
        result["generation"] = generation(plan, bin_dir, work, device, skipped)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    result["skipped"] = skipped
    result["seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(result, ensure_ascii=False)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
