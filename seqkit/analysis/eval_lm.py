"""Perplexity of a language-model checkpoint on a binarized split (``seqkit-eval-lm``), or the
loss and accuracy at the scored positions of a masked-LM or denoising checkpoint
(:func:`evaluate_noised`), each beside the unigram baseline of the same vocabulary.

Every token of the split is scored exactly once. With ``context_window`` C the split is cut into
blocks of ``tokens_per_sample`` T scored tokens, each reading up to C earlier tokens first (input
length T + C, which must fit the model's positions), so tokens near a block's start are scored
with real left context (fairseq's ``--context-window``). Reported: the mean loss in base 2, the
per-token perplexity, and the per-word perplexity (the same total log-likelihood divided by the
split's words as ``seqkit-preprocess`` counted them: whitespace tokens plus one end of line each),
which compares word-level and subword models, and the perplexity of the training split's unigram
distribution (add-one smoothed) on the same tokens: the no-context baseline.

Continuation perplexity (``prefix_length`` K, a prefix LM's measure): each block's first K tokens
are read and not scored, only the rest of the block is. A prefix-LM checkpoint reads those K
bidirectionally, any other language model causally, on the same blocks, so both score exactly the
same tokens with the same context (:mod:`seqkit.data.lm_dataset`). Per-word perplexity is then
left out (the split's word count covers its prefixes too), and the unigram baseline is taken on
the scored tokens alone.

A Transformer-XL checkpoint (a model with memory, ``model.mem_len``) reads the split as one stream,
segment after segment of ``tokens_per_sample`` tokens, each reading the ``mem_len`` positions
before it as memory (every token scored once; ``mem_len=0``: each segment alone): its evaluation
context is ``mem_len``, so ``context_window`` is refused for it, and so is ``max_tokens`` (one row).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any, Collection, Dict, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import MISSING

from seqkit.core.config import CommonConfig, check_compile, check_param_dtype
from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.settings import Reads, refuse_unread
from seqkit.generation.config import QUANTIZE, check_quantize
from seqkit.generation.quantize import quantize_int8

NOISED = ("masked_lm", "denoising", "permutation_lm")  # scored at masked / noised / predicted positions


@dataclass
class EvalLMConfig:
    common: CommonConfig = arg(help="seeds, precision, device, threads", factory=CommonConfig)
    task: Any = arg(MISSING, "the task; task.data locates the binarized split (hydra group `task`)")
    path: str = arg("", "language-model checkpoint to evaluate")
    gen_subset: str = arg("test", "binarized split of task.data to score")
    tokens_per_sample: int = arg(0, "tokens scored per block (0: the checkpoint's task.tokens_per_sample)", ge=0)
    context_window: int = arg(0, "earlier tokens each block reads without scoring them", ge=0)
    prefix_length: int = arg(-1, "each block's first this many tokens read, not scored: continuation perplexity "
                                 "(a prefix LM reads them bidirectionally, a causal LM causally); -1: the "
                                 "checkpoint's task.prefix_length (0 for a causal LM)", ge=-1)
    max_tokens: int = arg(8192, "input tokens per batch", ge=1)
    mem_len: int = arg(-1, "a transformer_xl checkpoint: positions of the earlier segments each segment reads as "
                           "memory (its evaluation context; 0: none); -1: the checkpoint's model.mem_len", ge=-1)
    quantize: str = arg("none", "int8: every Linear (and LSTM) layer's weights in int8, activations quantized per "
                                "call (torch's dynamic quantization, CPU, fp32 precision); none: as trained",
                        choices=QUANTIZE)


# the task settings a language model's evaluation takes from the command line; every other one
# given must be the checkpoint's own (what the model trained with), and a masked-LM or denoising
# checkpoint takes only task.data (its masking or noise is validation's)
BLOCK_SETTINGS = ("tokens_per_sample", "context_window", "sample_break_mode", "prefix_length")
WHY = {"eos_prefix": " (</s> before the split's first token or not, as before every line it read; "
                     "seqkit-import eos_prefix= chooses it for an imported GPT-2)"}


def _text(value: Any) -> str:
    """A setting's value as written on a command line."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def given_settings(task_cfg: Any, keys: Optional[Collection[str]]) -> Dict[str, Any]:
    """``task.*`` settings the user gave, by name (``name`` for ``task=NAME``): ``keys`` of
    ``task_cfg``, else every key of a mapping, or a dataclass's fields that differ from their defaults."""
    if keys is not None:
        return {k: task_cfg[k] if hasattr(task_cfg, "keys") else getattr(task_cfg, k) for k in keys}
    if hasattr(task_cfg, "keys"):
        return {k: task_cfg[k] for k in task_cfg.keys()}
    if not dataclasses.is_dataclass(task_cfg):
        return {}
    default = type(task_cfg)()
    return {f.name: getattr(task_cfg, f.name) for f in dataclasses.fields(task_cfg)
            if getattr(task_cfg, f.name) != getattr(default, f.name)}


def _one_of(name: str, top: Optional[Any], in_task: Optional[Any]) -> Optional[Any]:
    """``NAME=`` and ``task.NAME=`` are one setting: either, or both alike."""
    if top is not None and in_task is not None and top != in_task:
        raise SeqkitError(f"{name}={top} and task.{name}={in_task} disagree: give one of them")
    return top if top is not None else in_task


def check_given(cfg: EvalLMConfig, given: Dict[str, Any], task_name: str, task_cfg: Any) -> None:
    """Refuse a task setting the evaluation would not use: another task than the checkpoint's, or
    a value other than the checkpoint's (``task_cfg``) of a setting the model trained with
    (``eos_prefix``; a masked LM's or denoising model's masks, noise and blocks)."""
    if "name" in given and given["name"] != task_name:
        raise SeqkitError(f"task={given['name']}, but {cfg.path} is a {task_name} checkpoint: drop task= "
                          "(seqkit-eval-lm takes the task from the checkpoint)")
    takes = ("name", "data") + (() if task_name in NOISED else BLOCK_SETTINGS)
    if "prefix_random" in given and task_name not in NOISED:
        raise SeqkitError("task.prefix_random: seqkit-eval-lm splits every block at one prefix_length (random split "
                          "points are training's); drop it")
    for key, value in given.items():
        if key in takes:
            continue
        if not hasattr(task_cfg, key):
            raise SeqkitError(f"task.{key}: a {task_name} checkpoint has no such setting; drop it")
        theirs = getattr(task_cfg, key)
        if value != theirs:
            raise SeqkitError(f"task.{key}={_text(value)}: {cfg.path} trained with task.{key}={_text(theirs)}"
                              f"{WHY.get(key, '')}, and is scored on its data as it trained; drop it")
    if task_name in NOISED and cfg.tokens_per_sample not in (0, task_cfg.tokens_per_sample):
        raise SeqkitError(f"tokens_per_sample={cfg.tokens_per_sample}: a {task_name} checkpoint is scored on the "
                          f"blocks it trained on ({task_cfg.tokens_per_sample} tokens); drop it")
    if task_name in NOISED and cfg.prefix_length >= 0:
        raise SeqkitError(f"prefix_length={cfg.prefix_length}: a {task_name} checkpoint is scored at its "
                          "masked or noised positions, not on a continuation; drop it")
    if task_name in NOISED and cfg.context_window:
        raise SeqkitError(f"context_window={cfg.context_window}: a {task_name} checkpoint reads its blocks alone, "
                          "with no context window; drop it")


def check_memory(cfg: EvalLMConfig, given: Dict[str, Any], memory: bool) -> None:
    """Settings a Transformer-XL evaluation would not use, refused in one line (and ``mem_len`` elsewhere)."""
    if not memory:
        if cfg.mem_len >= 0:
            raise SeqkitError(f"mem_len={cfg.mem_len}: {cfg.path} holds no transformer_xl model (no memory); drop it")
        return
    if _one_of("context_window", cfg.context_window or None, given.get("context_window")):
        raise SeqkitError("context_window: a transformer_xl model reads the segments before as memory; set mem_len= "
                          "(its evaluation context) and drop context_window")
    if _one_of("prefix_length", cfg.prefix_length if cfg.prefix_length > 0 else None, given.get("prefix_length")):
        raise SeqkitError("prefix_length: a transformer_xl model scores the whole stream (no prefix LM); drop it")
    if given.get("sample_break_mode", "none") != "none":
        raise SeqkitError("task.sample_break_mode: a transformer_xl model reads the split as one stream of "
                          "consecutive segments (none); drop it")


def default_block(trained: int, positions: int, learned: bool, context: int) -> int:
    """``tokens_per_sample`` when none is given: the block the model trained on, shortened so that
    with ``context`` earlier tokens it stays within the positions the model trained (learned
    positions) or has."""
    budget = min(trained, positions) if learned and trained else positions
    block = min(trained, positions) if trained else positions
    if block + context > budget and budget - context >= 1:
        block = budget - context
    return block


def set_blocks(cfg: EvalLMConfig, given: Dict[str, Any], task: Any, model: Any, state: Dict[str, Any]) -> int:
    """A language model's blocks: ``tokens_per_sample``, ``context_window``, ``prefix_length`` and
    ``sample_break_mode`` as given (``NAME=`` or ``task.NAME=``), else the block follows the model
    (:func:`default_block`), the context is 0, the prefix and break mode the checkpoint's. Sets
    ``task.cfg``; returns the block length the model trained on (an imported model: its positions,
    which its own training filled)."""
    block = _one_of("tokens_per_sample", cfg.tokens_per_sample or None, given.get("tokens_per_sample"))
    context = _one_of("context_window", cfg.context_window or None, given.get("context_window")) or 0
    prefix = _one_of("prefix_length", cfg.prefix_length if cfg.prefix_length >= 0 else None, given.get("prefix_length"))
    positions = model.max_positions()[0]
    learned = bool(getattr(getattr(model, "cfg", None), "learned_positions", False))
    trained = positions if state.get("hf") else int(state["cfg"]["task"].get("tokens_per_sample") or 0)
    if block is None:
        block = default_block(trained, positions, learned, context)
    mode = given.get("sample_break_mode", task.cfg.sample_break_mode)
    prefix = task.cfg.prefix_length if prefix is None else prefix
    task.cfg = dataclasses.replace(task.cfg, tokens_per_sample=block, context_window=context, sample_break_mode=mode,
                                   prefix_length=prefix, prefix_random=False)
    return trained


def eval_lm_reads(task_name: str, memory: bool = False) -> Reads:
    """The settings seqkit-eval-lm reads for a checkpoint of ``task_name`` (``memory``: a model that
    carries memory, Transformer-XL)."""
    keys = ["path", "gen_subset", "quantize", "task", "common.precision", "common.device",
            "common.threads", "common.user_dir", "common.compile", "common.compile_mode", "common.param_dtype"]
    why = [("common.fp16", "loss scaling is training's"), ("common.log", "it logs one line at the end"),
           ("common.tensorboard_logdir", "TensorBoard logs are seqkit-train's"),
           ("common.attention_kernels", "it scores with torch's default attention kernels")]
    if task_name in NOISED:  # the masking / noise is drawn again, from the seed
        keys.append("common.seed")
    else:
        keys += ["tokens_per_sample", "prefix_length"]
        why.append(("common.seed", "a language model's perplexity draws nothing at random"))
    if memory:  # one stream in one row; the memory is the context
        keys.append("mem_len")
        why += [("context_window", "a transformer_xl model reads earlier segments as memory: set mem_len="),
                ("max_tokens", "a transformer_xl model reads the split as one stream, one segment a batch")]
    else:
        keys += ["max_tokens"] + ([] if task_name in NOISED else ["context_window"])
        why.append(("mem_len", "it is the memory of a transformer_xl checkpoint"))
    who = f"seqkit-eval-lm on a {task_name} checkpoint" + (" (transformer_xl)" if memory else "")
    return Reads(who, tuple(keys), tuple(why))


def evaluate(cfg: EvalLMConfig, task_keys: Optional[Collection[str]] = None,
             command_line: Optional[Collection[str]] = None) -> Dict[str, Any]:
    """Score ``cfg.gen_subset``; returns the figures (also what the CLI prints). ``task_keys``: the
    ``task.*`` settings the user gave (the CLI reads them off its command line); None: those
    ``cfg.task`` holds (a mapping), or holds away from their defaults (a dataclass).
    ``command_line``: every key the CLI was given; one this checkpoint's scoring does not read is refused."""
    from seqkit.core.checkpoints import load, model_for_inference, task_for_inference
    from seqkit.training.distributed import pick_device

    if not cfg.path:
        raise SeqkitError("path=CHECKPOINT is required")
    check_compile(cfg.common, "seqkit-eval-lm")
    check_param_dtype(cfg.common, "seqkit-eval-lm")
    if cfg.common.threads > 0:
        torch.set_num_threads(cfg.common.threads)
    given = given_settings(cfg.task, task_keys)
    state = load(cfg.path)
    task_name = state["cfg"]["task"].get("name")
    task = task_for_inference(state, {"data": cfg.task.data})
    if task_name not in NOISED and getattr(task, "model_kind", None) != "lm":
        what = task.describe() if hasattr(task, "describe") else f"a model of task {task_name}"
        kind = getattr(task, "model_kind", "")
        runs = ("seqkit-embed turns sentences into its vectors" if kind in ("skip_thought", "quick_thought") else
                "seqkit-embed reads its word vectors (words=, analogy=)" if kind == "word2vec" else
                "seqkit-generate runs this one")
        raise SeqkitError(f"path={cfg.path} is {what}; seqkit-eval-lm scores language models (and masked-LM / "
                          f"denoising ones): {runs}")
    check_given(cfg, given, task_name, task.cfg)
    memory = "mem_len" in state["cfg"].get("model", {})  # Transformer-XL
    if command_line is not None:
        refuse_unread(command_line, eval_lm_reads(task_name, memory))
    check_memory(cfg, given, memory)
    model = model_for_inference(cfg.path, state, task)
    trained_len = 0
    if task_name not in NOISED:
        trained_len = set_blocks(cfg, given, task, model, state)
    del state
    device = pick_device(cfg.common.device, 0)
    check_quantize(cfg.quantize, device.type, "seqkit", cfg.common.precision)
    if cfg.quantize == "int8":
        model = quantize_int8(model)
    model = model.to(device).eval()
    if task_name in NOISED:
        return evaluate_noised(cfg, task, model, device)
    context, prefix = task.cfg.context_window, task.cfg.prefix_length
    # a prefix-LM checkpoint reads each block's prefix both ways; any other language model causally
    bidirectional = bool(getattr(model, "prefix_lm", False))
    if memory:
        model.mem_len = model.cfg.mem_len if cfg.mem_len < 0 else cfg.mem_len
    ds = task.load_dataset(cfg.gen_subset, context_window=context, bidirectional=bidirectional,
                           streams=1 if memory else 0)
    limit = model.max_positions()[0]
    if len(ds.too_long(limit, limit)):
        raise SeqkitError(f"tokens_per_sample {task.cfg.tokens_per_sample} + context_window {context} "
                          f"exceeds the model's {limit} positions")
    length = task.cfg.tokens_per_sample + context
    if getattr(getattr(model, "cfg", None), "learned_positions", False) and trained_len and length > trained_len:
        raise SeqkitError(f"tokens_per_sample {task.cfg.tokens_per_sample} + context_window {context} "
                          f"= {length} reaches learned positions the model never trained (it trained on blocks "
                          f"of {trained_len}); keep the sum at most {trained_len}")
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[cfg.common.precision]
    autocast = torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
    nll, count = 0.0, 0
    scored = []  # the scored targets, with a prefix (the unigram baseline's tokens)
    t0 = time.perf_counter()
    with torch.inference_mode(), autocast:
        for batch in ds.batches(cfg.max_tokens, shuffle=False):
            sample = ds.collate(batch)
            target = sample["target"].to(device)  # (B, T), pad where not scored
            ni = {k: v.to(device) for k, v in sample["net_input"].items()}
            lprobs = model(**ni, target=target)  # (B, T) log-probs of the targets
            keep = target.ne(task.ignore_index)
            nll -= float(lprobs.double().masked_fill(~keep, 0.0).sum())
            count += int(keep.sum())
            if prefix:
                scored.append(target[keep].cpu().numpy())
    seconds = time.perf_counter() - t0
    if count != ds.num_scored:  # every token once: a bug guard, cheap
        raise SeqkitError(f"scored {count} tokens but the split holds {ds.num_scored}")
    words = None if prefix else task.words(cfg.gen_subset)  # a split's words count its prefixes too
    unigram = unigram_nll(task, (np.concatenate(scored) if scored else np.zeros(0, np.int64)) if prefix else ds.stream)
    out: Dict[str, Any] = {
        "split": cfg.gen_subset,
        "tokens": count,
        "words": words,
        "tokens_per_sample": task.cfg.tokens_per_sample,
        "context_window": context,
        "prefix_length": prefix,
        "loss": round(nll / max(count, 1) / math.log(2), 4),
        "ppl": round(math.exp(min(nll / max(count, 1), 700.0)), 2),
        "tokens_per_s": round(count / max(seconds, 1e-9), 1),
    }
    if memory:
        out["mem_len"] = model.mem_len
    if prefix:
        out["prefix_read"] = "bidirectionally" if bidirectional else "causally"
    if words:
        out["word_ppl"] = round(math.exp(min(nll / words, 700.0)), 2)
    if unigram is not None:  # the baseline a model must beat: no context at all
        out["unigram_ppl"] = round(math.exp(unigram / max(count, 1)), 2)
    return out


def unigram_nll(task: Any, stream: Any) -> Optional[float]:
    """Summed NLL (nats) of ``stream`` under the training split's unigram distribution (add-one
    smoothed over the dictionary), or None when the data folder has no train split."""
    import numpy as np

    if not task.split_exists("train"):
        return None
    V = len(task.dictionary)
    counts = np.bincount(task.load_dataset("train").stream.astype(np.int64), minlength=V).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[np.asarray(stream, dtype=np.int64)].sum())


def _scored(task: Any, model: Any, sample: Dict[str, Any],
            device: torch.device) -> Tuple[torch.Tensor, torch.Tensor, Optional[Tuple[torch.Tensor, ...]]]:
    """Logits ``(N, V)`` and targets ``(N,)`` of the scored positions of a batch: the masked ones
    (masked LM; ELECTRA's are its generator's) or the target tokens (denoising, teacher-forced).
    Third, for ELECTRA: the discriminator's logits, labels (True: replaced) and input tokens, each
    ``(P,)``, at every real position of the text its generator's samples corrupted (else None)."""
    ni = {k: v.to(device) for k, v in sample["net_input"].items() if not k.startswith("sbo_")}
    target = sample["target"].to(device)
    if task.model_kind == "masked_lm":
        if hasattr(model, "discriminate"):
            out = model(**ni, mlm_target=target)
            keep = out["keep"]  # (B, S)
            disc = (out["disc"].float()[keep], out["disc_labels"][keep], out["corrupted"][keep])
            return out["mlm"].float(), target, disc
        return model(**ni)["mlm"].float(), target, None  # already (N, V) and (N,)
    logits = model(**ni).float()  # (B, T, V)
    keep = target.ne(task.ignore_index)
    return logits[keep], target[keep], None


def binary_auc(scores: Any, labels: Any) -> float:
    """Probability that a positive (``labels`` true) scores above a negative, ties counting half
    (the area under the ROC curve; 0.5: no better than chance)."""
    import numpy as np

    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=bool)
    pos, neg = int(labels.sum()), int((~labels).sum())
    if not pos or not neg:
        return float("nan")
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    mid_rank = np.cumsum(counts) - (counts - 1) / 2.0  # 1-based rank of each distinct value, ties averaged
    rank_sum = float(mid_rank[inverse][labels].sum())
    return (rank_sum - pos * (pos + 1) / 2.0) / (pos * neg)


def _entropy_bits(replaced: Any, total: Any) -> Any:
    """Binary entropy (bits) of ``replaced / total``, elementwise; 0 where the fraction is 0 or 1."""
    import numpy as np

    p = np.asarray(replaced, dtype=np.float64) / np.maximum(np.asarray(total, dtype=np.float64), 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -(p * np.log2(p) + (1 - p) * np.log2(1 - p))
    return np.nan_to_num(h, nan=0.0)


def discriminator_figures(logits: torch.Tensor, labels: torch.Tensor, tokens: torch.Tensor) -> Dict[str, float]:
    """ELECTRA's replaced-token detection over ``(P,)`` positions (``tokens``: the discriminator's
    input there) beside two context-free baselines, fit on these very positions: the base rate
    (every position given the replaced fraction r; its AUC is 0.5) and the token alone (each token
    type given its own replaced fraction: what rare or odd samples give away without context).
    Losses in bits per position, accuracies in %, and the discriminator's AUC."""
    import numpy as np

    gold = labels.float()
    r = float(gold.mean())
    ids = np.unique(tokens.numpy(), return_inverse=True)[1]
    per_type = np.bincount(ids, weights=labels.numpy().astype(np.float64))  # replaced count of each type
    seen = np.bincount(ids).astype(np.float64)  # positions of each type
    P = max(int(gold.numel()), 1)
    return {
        "disc_positions": int(gold.numel()),
        "replaced": round(100.0 * r, 2),
        "disc_loss": round(float(F.binary_cross_entropy_with_logits(logits, gold)) / math.log(2), 4),
        "disc_base_rate_loss": round(float(_entropy_bits(r, 1.0)), 4),
        "disc_token_only_loss": round(float((_entropy_bits(per_type, seen) * seen).sum()) / P, 4),
        "disc_accuracy": round(100.0 * float(((logits > 0).float() == gold).float().mean()), 2),
        "disc_base_rate_accuracy": round(100.0 * max(r, 1.0 - r), 2),
        "disc_token_only_accuracy": round(100.0 * float(np.maximum(per_type, seen - per_type).sum()) / P, 2),
        "disc_auc": round(binary_auc(logits.numpy(), labels.numpy()), 4),
    }


def evaluate_noised(cfg: EvalLMConfig, task: Any, model: Any, device: torch.device) -> Dict[str, Any]:
    """A masked-LM or denoising checkpoint on ``cfg.gen_subset``, masked or noised as validation does
    it (the same, with the run's seed): loss and top-1 / top-5 accuracy at the scored positions,
    beside the unigram baseline's loss and top-1 accuracy on the same positions (the targets' own
    distribution; for masked LMs also the training split's). ELECTRA adds its discriminator's
    figures on its generator's samples (:func:`discriminator_figures`)."""
    import numpy as np

    ds = task.load_dataset(cfg.gen_subset)
    nll, correct, correct5, count = 0.0, 0, 0, 0
    targets, disc_logits, disc_labels, disc_tokens = [], [], [], []
    torch.manual_seed(cfg.common.seed)  # ELECTRA's generator samples the discriminator's input
    with torch.inference_mode():
        for batch in ds.batches(cfg.max_tokens, shuffle=False):
            logits, target, disc = _scored(task, model, ds.collate(batch), device)  # (N, V), (N,)
            if disc is not None:
                for store, part in zip((disc_logits, disc_labels, disc_tokens), disc):
                    store.append(part.cpu())
            nll += float(F.cross_entropy(logits, target, reduction="sum"))
            top5 = logits.topk(min(5, logits.size(-1)), dim=-1).indices  # (N, 5)
            correct += int(top5[:, 0].eq(target).sum())
            correct5 += int(top5.eq(target[:, None]).any(-1).sum())
            count += target.numel()
            targets.append(target.cpu().numpy())
    if not count:
        raise SeqkitError(f"no masked position in split {cfg.gen_subset}")
    out: Dict[str, Any] = {
        "split": cfg.gen_subset,
        "scored_tokens": count,
        "loss": round(nll / count / math.log(2), 4),
        "ppl": round(math.exp(min(nll / count, 700.0)), 2),
        "accuracy": round(100.0 * correct / count, 2),
        "top5_accuracy": round(100.0 * correct5 / count, 2),
    }
    # the baseline: the unigram distribution of these very targets, the best any context-free guess
    # can do on them (T5's sentinels or BART's </s> would get no fair share from training counts)
    t = np.concatenate(targets)
    p = np.bincount(t) / len(t)
    p = p[p > 0]
    out["unigram_loss"] = round(float(-(p * np.log2(p)).sum()), 4)
    out["unigram_accuracy"] = round(100.0 * float(p.max()), 2)
    if task.model_kind in ("masked_lm", "permutation_lm"):  # the training split's unigram, fixed before these targets
        train_nll = unigram_nll(task, t)
        if train_nll is not None:
            out["unigram_train_loss"] = round(train_nll / len(t) / math.log(2), 4)
    if disc_logits:
        out.update(discriminator_figures(torch.cat(disc_logits), torch.cat(disc_labels), torch.cat(disc_tokens)))
    return out
