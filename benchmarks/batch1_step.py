"""Where a batch-1, beam-5 sentence of seqkit's engine spends its time, for a Transformer checkpoint.

    python benchmarks/batch1_step.py CHECKPOINT [--sentences 300] [--variants flat,compiled-freeze]

Prints one JSON line: the CPU (model, bf16/AMX flags, fp32 matmul peak) and, for each variant of
the decoder step, sentences/s at batch 1 over the first ``--sentences`` test_2016_flickr sentences
(three passes, each after a warm-up), the time split into decoder steps, encoder and the search
loop around them, and a hash of the translations (variants must agree). Variants:

- ``flat``: the step seqkit runs (``seqkit/generation/transformer_step.py``, prepacked weights);
- ``compiled``, ``compiled-freeze``, ``compiled-cpp-freeze``: the same layers and output projection
  as one ``torch.compile(dynamic=True)`` graph on plain weights, then with inductor's ``freezing``
  (it prepacks the weights itself), then with its C++ wrapper too (compile time reported apart).

Also: the step's matmuls alone, called in a loop over the decoder's weights as a step calls them
(prepacked fp32, ``F.linear``, the dynamic int8 of ``quantize=int8``, weight-only int8), one
layer's attention pieces against the candidates that would replace them (attention as matmul,
softmax, matmul; a preallocated cache written in place), and the ATen calls a decoder step and a
whole sentence make. Each variant runs in a process of its own (``--child``).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from seqkit.core.allocator import keep_freed_memory
from seqkit.core.cpu import cpu_info
from seqkit.generation.translator import Translator
from seqkit.models.base import STATIC
from translation import find_data, matmul_peak  # (benchmarks/translation.py, beside this script)


class CompiledCore(torch.nn.Module):
    """The decoder layers and output projection of a post- or pre-norm Transformer as one function
    of ``(B, C)`` rows, for ``torch.compile`` (the flat step's arithmetic on plain weights)."""

    def __init__(self, model):
        super().__init__()
        self.layers, self.norm, self.model = model.decoder_layers, model.decoder_norm, model

    def forward(self, x, pasts, order, cks, cvs, mask):  # x (B, C) -> logits (B, V), new keys/values
        B, new = x.size(0), []
        for i, layer in enumerate(self.layers):
            sa, ca, ffn = layer.self_attn, layer.cross_attn, layer.ffn
            H, D, scale = sa.num_heads, sa.head_dim, sa.sdpa_scale

            def self_attention(h):
                qkv = F.linear(h, sa.qkv_proj.weight, sa.qkv_proj.bias).view(B, 3, H, 1, D)
                kv = qkv[:, 1:]  # (B, 2, H, 1, D)
                if pasts is not None:
                    past = pasts[i] if order is None else pasts[i].index_select(0, order)
                    kv = torch.cat([past, kv], dim=3)
                new.append(kv)
                out = F.scaled_dot_product_attention(qkv[:, 0], kv[:, 0], kv[:, 1], scale=scale)  # (B, H, 1, D)
                return F.linear(out.view(B, H * D), sa.out_proj.weight, sa.out_proj.bias)

            def cross_attention(h):
                G, Hc = cks[i].size(0), ca.num_heads
                q = F.linear(h, ca.q_proj.weight, ca.q_proj.bias).view(G, B // G, Hc, D).transpose(1, 2)
                out = F.scaled_dot_product_attention(q, cks[i], cvs[i], attn_mask=mask, scale=scale)
                return F.linear(out.transpose(1, 2).reshape(B, Hc * D), ca.out_proj.weight, ca.out_proj.bias)

            def feed_forward(h):
                return F.linear(ffn.activation(F.linear(h, ffn.fc1.weight, ffn.fc1.bias)), ffn.fc2.weight, ffn.fc2.bias)

            for res, f in ((layer.self_res, self_attention), (layer.cross_res, cross_attention), (layer.ffn_res, feed_forward)):
                x = x + f(res.norm(x)) if res.normalize_before else res.norm(x + f(x))
        return self.model._project(self.norm(x)), new


def install_compiled(model, variant: str) -> None:
    import torch._inductor.config as inductor

    inductor.freezing = "freeze" in variant
    inductor.cpp_wrapper = "cpp" in variant
    core = torch.compile(CompiledCore(model).eval(), dynamic=True)
    n = len(model.decoder_layers)

    def step(tokens, cache, step):
        B, keep = tokens.size(0), cache[f"{STATIC}keep"]
        mask = None if bool(keep.all()) else keep[:, None, None, :]
        order = cache.pop("order", None)
        x = model._embed_target(tokens, step).view(B, -1)
        pasts = [cache[f"{i}.kv"] for i in range(n)] if step > 0 else None
        logits, new = core(x, pasts, order, [cache[f"{STATIC}{i}.ck"] for i in range(n)],
                           [cache[f"{STATIC}{i}.cv"] for i in range(n)], mask)
        for i in range(n):
            cache[f"{i}.kv"] = new[i]
        return logits

    model.step_plan = step


def matmul_set(model, reps: int = 300) -> dict:
    """Microseconds for one step's matmuls at 5 rows, weight after weight as the decoder reads them."""
    weights = []
    for layer in model.decoder_layers:
        for lin in (layer.self_attn.qkv_proj, layer.self_attn.out_proj, layer.cross_attn.q_proj,
                    layer.cross_attn.out_proj, layer.ffn.fc1, layer.ffn.fc2):
            weights.append((lin.weight.detach(), None if lin.bias is None else lin.bias.detach()))
    weights.append((model.tgt_embed.weight.detach() if model.output_proj is None else model.output_proj.weight.detach(), None))
    xs = {w.size(1): torch.randn(5, w.size(1)) for w, _ in weights}
    packed = [torch.ops.mkldnn._reorder_linear_weight(w) for w, _ in weights]
    dynamic = []
    for w, b in weights:
        lin = torch.nn.Linear(w.size(1), w.size(0), bias=b is not None)
        lin.weight.data.copy_(w)
        if b is not None:
            lin.bias.data.copy_(b)
        dynamic.append(torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(lin), {torch.nn.Linear}, dtype=torch.qint8))
    int8 = []  # weight-only int8: one scale per output row
    for w, _ in weights:
        scale = w.abs().amax(1).clamp(min=1e-8) / 127
        int8.append(((w / scale[:, None]).round().to(torch.int8).contiguous(), scale.contiguous()))
    kinds = {
        "packed_fp32": lambda i, w, b: torch.ops.mkldnn._linear_pointwise(xs[w.size(1)], packed[i], b, "none", [], ""),
        "f_linear_fp32": lambda i, w, b: F.linear(xs[w.size(1)], w, b),
        "dynamic_int8": lambda i, w, b: dynamic[i](xs[w.size(1)]),
        "weight_only_int8": lambda i, w, b: torch._weight_int8pack_mm(xs[w.size(1)], *int8[i]),
    }
    out = {"decoder_weight_mb": round(sum(w.numel() for w, _ in weights) * 4 / 1e6, 2)}
    with torch.inference_mode():
        for name, f in kinds.items():
            runs = []
            for _ in range(3):
                for _ in range(20):
                    for i, (w, b) in enumerate(weights):
                        f(i, w, b)
                t = time.perf_counter()
                for _ in range(reps):
                    for i, (w, b) in enumerate(weights):
                        f(i, w, b)
                runs.append(round((time.perf_counter() - t) / reps * 1e6, 1))
            out[f"matmul_set_us_{name}"] = runs
    return out


def small_ops(model, t: int = 15, S: int = 16, reps: int = 3000) -> dict:
    """Microseconds of one layer's attention pieces at batch 1, beam 5 (5 rows), step ``t``,
    source length ``S``, in the model's head shape: what the issue's candidates would replace."""
    sa = model.decoder_layers[0].self_attn
    H, D, scale = sa.num_heads, sa.head_dim, sa.sdpa_scale
    scale = D**-0.5 if scale is None else scale  # None: SDPA's own 1 / sqrt(D)
    q, kv, new = torch.randn(5, H, 1, D), torch.randn(5, 2, H, t, D), torch.randn(5, 2, H, 1, D)
    qc, keys, values = torch.randn(1, H, 5, D), torch.randn(1, H, S, D), torch.randn(1, H, S, D)
    order = torch.tensor([0, 0, 1, 2, 3])
    buf, out = torch.zeros(5, 2, H, 200, D), torch.zeros(5, 2, H, 200, D)

    def manual(q, k, v):
        return torch.softmax((q * scale) @ k.transpose(-1, -2), -1) @ v

    def prealloc():  # a cache preallocated for 200 steps, reordered into a second buffer, the new step written in place
        torch.index_select(buf[:, :, :, :t], 0, order, out=out[:, :, :, :t])
        out[:, :, :, t : t + 1].copy_(new)

    ops = {
        "self_attention_sdpa": lambda: F.scaled_dot_product_attention(q, kv[:, 0], kv[:, 1], scale=scale),
        "self_attention_matmul_softmax_matmul": lambda: manual(q, kv[:, 0], kv[:, 1]),
        "cross_attention_sdpa": lambda: F.scaled_dot_product_attention(qc, keys, values, scale=scale),
        "cross_attention_matmul_softmax_matmul": lambda: manual(qc, keys, values),
        "cache_index_select_cat": lambda: torch.cat([kv.index_select(0, order), new], dim=3),
        "cache_preallocated_in_place": prealloc,
    }
    result = {}
    with torch.inference_mode():
        for name, f in ops.items():
            runs = []
            for _ in range(3):
                for _ in range(100):
                    f()
                t0 = time.perf_counter()
                for _ in range(reps):
                    f()
                runs.append(round((time.perf_counter() - t0) / reps * 1e6, 1))
            result[f"op_us_{name}"] = runs
    return result


def aten_calls(tr, source) -> dict:
    """Top-level ATen calls of one decoder step (step 5) and of a whole sentence."""
    from torch.profiler import ProfilerActivity, profile

    model, plan, seen = tr.model, tr.model.step_plan, {}

    def step(tokens, cache, i):
        if i != 5:
            return plan(tokens, cache, i)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            out = plan(tokens, cache, i)
        seen["step"] = sum(e.cpu_parent is None for e in prof.events())
        return out

    model.step_plan = step
    list(tr.generate_batches([source], 1))
    model.step_plan = plan
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        list(tr.generate_batches([source], 1))
    return {"aten_calls_decoder_step": seen.get("step"), "aten_calls_sentence": sum(e.cpu_parent is None for e in prof.events())}


def child(args: argparse.Namespace) -> dict:
    keep_freed_memory()
    tr = Translator.from_checkpoint(args.checkpoint, beam=5, max_len_a=0, max_len_b=200,
                                    packed_weights=args.child == "flat")
    path = os.path.join(find_data(args.data), "test_2016_flickr.de.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        sources = [tr.task.encode_source(line.rstrip("\n")) for line in f][: args.sentences]
    model, out = tr.model, {"variant": args.child}
    if args.child == "flat":
        out.update(aten_calls(tr, sources[3]))
        out.update(matmul_set(model))
        out.update(small_ops(model))
    else:
        install_compiled(model, args.child)
    t = time.perf_counter()
    list(tr.generate_batches(sources[:8], 1))  # warm-up (and compiling)
    out["warmup_s"] = round(time.perf_counter() - t, 1)
    plan, encode, clock = model.step_plan, model.encode, {"dec": 0.0, "enc": 0.0, "steps": 0}

    def timed_step(tokens, cache, i):
        t0 = time.perf_counter()
        logits = plan(tokens, cache, i)
        clock["dec"] += time.perf_counter() - t0
        clock["steps"] += 1
        return logits

    def timed_encode(*a, **k):
        t0 = time.perf_counter()
        enc = encode(*a, **k)
        clock["enc"] += time.perf_counter() - t0
        return enc

    model.step_plan, model.encode = timed_step, timed_encode
    for key in ("sent_per_s", "decoder_ms_per_step", "encoder_ms_per_sentence", "search_loop_ms_per_step"):
        out[key] = []
    N = len(sources)
    for _ in range(3):
        clock.update(dec=0.0, enc=0.0, steps=0)
        t = time.perf_counter()
        best = {r["id"]: r["hypos"][0]["tokens"].tolist() for r in tr.generate_batches(sources, 1)}
        seconds = time.perf_counter() - t
        out["sent_per_s"].append(round(N / seconds, 2))
        out["decoder_ms_per_step"].append(round(1000 * clock["dec"] / clock["steps"], 3))
        out["encoder_ms_per_sentence"].append(round(1000 * clock["enc"] / N, 3))
        out["search_loop_ms_per_step"].append(round(1000 * (seconds - clock["dec"] - clock["enc"]) / clock["steps"], 3))
    out["steps_per_sentence"] = round(clock["steps"] / N, 2)
    out["translations_md5"] = hashlib.md5(json.dumps([best[i] for i in range(N)]).encode()).hexdigest()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", help="a seqkit Transformer translation checkpoint")
    ap.add_argument("--data", help="folder with Multi30k's test_2016_flickr.de.gz")
    ap.add_argument("--sentences", type=int, default=300, help="first test sentences, at batch 1")
    ap.add_argument("--variants", default="flat,compiled,compiled-freeze,compiled-cpp-freeze")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    result = dict(cpu_info(), checkpoint=args.checkpoint, sentences=args.sentences, threads=torch.get_num_threads(),
                  fp32_matmul_peak_gflops=round(matmul_peak(torch.float32) / 1e9))
    for variant in args.variants.split(","):
        cmd = [sys.executable, os.path.abspath(__file__), args.checkpoint, "--sentences", str(args.sentences),
               "--child", variant] + (["--data", args.data] if args.data else [])
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"batch1_step.py: variant {variant} failed:\n{r.stderr[-2000:]}")
        result[variant] = json.loads(r.stdout.strip().splitlines()[-1])
    result["fp32_matmul_peak_gflops_after"] = round(matmul_peak(torch.float32) / 1e9)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
