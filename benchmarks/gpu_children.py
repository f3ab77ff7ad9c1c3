"""The programs ``benchmarks/gpu.py`` measures in child processes of their own (``gpu.py --child MODE
SPEC``): the matmul peaks and the bare training loop (``bare``), and each translation engine on the
same checkpoint (``seqkit``, ``transformers``). Each takes the JSON spec gpu.py writes and returns a
dict of figures, which the child prints as one JSON line."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Dict, List, Optional, Tuple

import torch

from translation import matmul_peak, train_flops  # benchmarks/translation.py, beside this file

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def significant(x: Optional[float], digits: int = 3) -> Optional[float]:
    """``x`` rounded to ``digits`` significant figures (a tiny MFU stays above 0)."""
    return None if x is None else float(f"{x:.{digits}g}")


# -- the bare loop (a child process) -----------------------------------------------------------------
def device_matmul_peak(device: torch.device, dtype: torch.dtype, n: int) -> float:
    """FLOP/s of an n x n x n matmul: on a GPU the best of 5 timings (cuda events) of 3 matmuls, fp32
    without TF32; on a CPU translation.py's timing."""
    if device.type != "cuda":
        return matmul_peak(dtype, n)
    torch.set_float32_matmul_precision("highest")  # fp32 is fp32: no TF32
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            a @ b
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return 3 * 2 * n**3 / best


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def to_device(sample: Any, device: torch.device) -> Any:
    if isinstance(sample, torch.Tensor):
        return sample.to(device)
    if isinstance(sample, dict):
        return {k: to_device(v, device) for k, v in sample.items()}
    return sample


def bare_loop(task: Any, ds: Any, device: torch.device, run: Dict[str, Any], warmup: int,
              updates: int) -> Dict[str, Any]:
    """The model, criterion and fused Adam of seqkit-train's run on batches already on the device:
    what the hardware gives with nothing else around the step."""
    from seqkit.core.registry import CRITERIA, MODELS, OPTIMIZERS

    torch.manual_seed(1)
    mcfg = dataclasses.replace(MODELS.choices()[run["model"]], share_all_embeddings=True)
    model = task.build_model(mcfg).to(device).train()
    crit = task.build_criterion(CRITERIA.choices()["label_smoothed_cross_entropy"])
    opt = OPTIMIZERS.build(dataclasses.replace(OPTIMIZERS.choices()["adam"], impl="fused"), model.parameters())
    if device.type == "cuda":  # padded as seqkit-train pads on a GPU (dataset.required_seq_len_multiple)
        ds.length_multiple, ds.length_cap = 8, min(model.max_positions())
    pad, vocab, flops, samples = task.tgt_dict.pad(), len(task.tgt_dict), 0.0, []
    for i, batch in enumerate(ds.batches(run["max_tokens"], 0, seed=1, epoch=1)[: warmup + updates]):
        sample = ds.collate(batch)
        if i >= warmup:  # real tokens only, as for seqkit-train
            flops += train_flops(mcfg, vocab, sample["net_input"]["src_lengths"].double(),
                                 sample["target"].ne(pad).sum(1).double())
        samples.append(to_device(sample, device))
    scaler = torch.amp.GradScaler(device.type, enabled=run["precision"] == "fp16")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for i, sample in enumerate(samples):
        if i == warmup:
            sync(device)
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=DTYPES[run["precision"]], enabled=run["precision"] != "fp32"):
            loss, _, _ = crit(model, sample)
        scaler.scale(loss / sample["ntokens"]).backward()
        scaler.step(opt)
        scaler.update()
    sync(device)
    seconds, timed_updates = time.perf_counter() - t0, len(samples) - warmup  # an epoch may hold fewer batches
    tokens = sum(s["ntokens"] for s in samples[warmup:])
    memory = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None
    del model, opt, samples
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"tokens_per_s": round(tokens / seconds, 1), "model_flops_per_s": flops / seconds, "updates": timed_updates,
            "peak_allocated_mib": None if memory is None else round(memory)}


def bare_child(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Matmul peaks, then the bare loop of each run in ``spec``."""
    import seqkit
    from seqkit.core.registry import TASKS
    from seqkit.tasks.translation import TranslationConfig

    device = torch.device(spec["device"])
    out = {f"matmul_peak_tflops_{p}": significant(device_matmul_peak(device, DTYPES[p], spec["matmul_n"]) / 1e12, 4)
           for p in ("bf16", "fp32")}
    seqkit.import_builtin_components()
    task = TASKS.build(TranslationConfig(data=spec["data"]))
    ds = task.load_dataset("train")
    out["runs"] = [bare_loop(task, ds, device, run, spec["warmup"], spec["updates"]) for run in spec["runs"]]
    return out


# -- generation (one child process per engine) ---------------------------------------------------------
def before_eos(ids: List[int], eos: int) -> List[int]:
    """A translation's ids up to its first </s> (batched generate pads finished rows with </s>/pad)."""
    return ids[: ids.index(eos)] if eos in ids else ids


def engine_figures(task: Any, best: Dict[int, List[int]], seconds: float) -> Dict[str, Any]:
    """Sentences/s, and each sentence's ids and text in input order. Both engines' ids become text
    here, seqkit's way (dictionary pieces, then the sentencepiece decoder), so texts compare alike."""
    ids = [best[i] for i in range(len(best))]
    text = [task.detokenize(task.pieces(x)) for x in ids]
    return {"sent_per_s": round(len(ids) / seconds, 1), "ids": ids, "text": text}


def read_source(path: str, n: int) -> List[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f][:n]


def timed(device: torch.device, translate: Any) -> Tuple[Dict[int, List[int]], float]:
    sync(device)
    t0 = time.perf_counter()
    best = translate()
    sync(device)
    return best, time.perf_counter() - t0


def seqkit_child(spec: Dict[str, Any]) -> Dict[str, Any]:
    """seqkit's engine as seqkit-generate drives it (``Translator``), at each precision."""
    from seqkit.generation.base import as_list
    from seqkit.generation.translator import Translator

    device, lines, batch = torch.device(spec["device"]), read_source(spec["source"], spec["n"]), spec["batch"]
    out = {}
    for precision in spec["precisions"]:
        tr = Translator.from_checkpoint(spec["checkpoint"], device=spec["device"], precision=precision,
                                        beam=spec["beam"], lenpen=1.0, max_len_a=0, max_len_b=spec["max_len"], min_len=1)
        sources, eos = [tr.task.encode_source(line) for line in lines], tr.task.tgt_dict.eos()

        def translate(todo: List[List[int]]) -> Dict[int, List[int]]:
            results = tr.generate_batches(todo, batch)
            return {r["id"]: before_eos(as_list(r["hypos"][0]["tokens"]), eos) for r in results}

        translate(sources[: spec["warmup"]])  # kernels, allocator
        out[precision] = engine_figures(tr.task, *timed(device, lambda: translate(sources)))
        del tr
    return out


def transformers_child(spec: Dict[str, Any]) -> Dict[str, Any]:
    """transformers' ``generate`` on the FSMT export, as its users drive it: AutoTokenizer, the model
    cast to the precision, batches of the same size in the same longest-first order as seqkit's.
    ``{"skipped": why}`` when transformers does not import (the ``hf`` extra not installed)."""
    try:
        import transformers
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
    except ImportError as e:
        if isinstance(e, ModuleNotFoundError) and e.name == "transformers":
            return {"skipped": "transformers is not installed (pip install 'seqkit[hf]')"}
        return {"skipped": f"transformers does not import ({str(e).splitlines()[0] if str(e) else type(e).__name__})"}

    from seqkit.core.checkpoints import load_for_inference

    device, lines, batch = torch.device(spec["device"]), read_source(spec["source"], spec["n"]), spec["batch"]
    task, _ = load_for_inference(spec["checkpoint"])  # seqkit's detokenizer (engine_figures)
    tok = AutoTokenizer.from_pretrained(spec["hf"])
    lengths = [len(ids) for ids in tok(lines)["input_ids"]]
    order = sorted(range(len(lines)), key=lambda i: -lengths[i])
    batches = [order[i : i + batch] for i in range(0, len(order), batch)]
    todo = [(ids, tok([lines[i] for i in ids], return_tensors="pt", padding=True)) for ids in batches]
    warm = [(list(range(spec["warmup"])), tok(lines[: spec["warmup"]], return_tensors="pt", padding=True))]
    out: Dict[str, Any] = {"version": transformers.__version__}
    for precision in spec["precisions"]:
        model = AutoModelForSeq2SeqLM.from_pretrained(spec["hf"]).to(device=device, dtype=DTYPES[precision]).eval()
        cfg = model.config
        banned = [cfg.pad_token_id, cfg.bos_token_id]  # seqkit's search never emits them

        def translate(work: List[Tuple[List[int], Any]]) -> Dict[int, List[int]]:
            best = {}
            with torch.inference_mode():
                for ids, enc in work:
                    gen = model.generate(**enc.to(device), num_beams=spec["beam"], do_sample=False,
                                         max_new_tokens=spec["max_len"] + 1, min_new_tokens=1, early_stopping=True,
                                         length_penalty=1.0, suppress_tokens=banned)
                    for i, row in zip(ids, gen[:, 1:].tolist()):  # after the decoder's start token
                        best[i] = before_eos(row, cfg.eos_token_id)
            return best

        translate(warm)  # kernels, allocator
        out[precision] = engine_figures(task, *timed(device, lambda: translate(todo)))
        del model
    return out


CHILDREN = {"bare": bare_child, "seqkit": seqkit_child, "transformers": transformers_child}
