"""Pruning a trained model: attention heads (Michel et al., 2019) or weights by magnitude.

Heads: each attention module's heads get a mask ``xi`` (ones); a head's importance is the
absolute gradient of a sentence's loss with respect to its mask, ``|dL(x) / dxi_h|``, summed over
the split's sentences and normalized by its layer's l2 norm (Michel et al., section 4; their
appendix: the normalization makes a global ranking across layers work). The least important
heads are removed one at a time (or ``step``, a share of the heads, at a time), the importance
measured again after each round, until ``share`` of the heads are gone; a layer keeps at least one head.
The heads are removed from the weights (their rows of the q/k/v projections, their columns of the
output projection) and named in the model's config (``model.pruned_heads``), so the result is an
ordinary checkpoint: smaller, faster, loaded by every command like any other.

Magnitude (Han et al., 2015; See et al., 2016 for NMT): the ``share`` of weights with the smallest
absolute values set to zero, over all weight matrices and embeddings at once (``scope=global``,
See et al.'s class-blind) or the same share of each matrix (``scope=layer``, class-uniform);
biases and norms are kept. The matrices stay dense: the file and the speed do not change.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Tuple

import torch
from torch import nn

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.settings import user_set
from seqkit.models.modules.attention import MultiheadAttention

log = logging.getLogger("seqkit.prune")


@dataclass
class PruneConfig:
    path: str = arg("", "checkpoint to prune (required)")
    output: str = arg("", "where to write the pruned checkpoint (required)")
    method: str = arg("heads", "heads (attention heads, by importance on data) or magnitude (weights, by size)",
                      choices=("heads", "magnitude"))
    share: float = arg(0.2, "share of the heads, or of the weights, to remove", ge=0, lt=1)
    scope: str = arg("global", "magnitude: one threshold for all matrices (global) or the same share of each (layer)",
                     choices=("global", "layer"))
    step: float = arg(0.1, "heads: share of the heads removed per round before the importance is measured again "
                           "(0: one head a round; the default, Michel et al.'s 10%, was chosen over 0 on Multi30k's "
                           "valid split, examples/pruning)", ge=0, le=1)
    data: str = arg("", "heads: the data folder holding the split the importance is measured on (empty: the "
                        "checkpoint's task.data)")
    subset: str = arg("valid", "heads: the split whose loss measures the importance")
    max_tokens: int = arg(4096, "heads: tokens per batch of that split", ge=1)
    threads: int = arg(0, "CPU threads (0: torch's default)", ge=0)


# the settings only one method reads (path, output, share and threads: both)
METHOD_SETTINGS = {"heads": ("step", "data", "subset", "max_tokens"), "magnitude": ("scope",)}


def check_settings(cfg: PruneConfig) -> None:
    """Refuse the other method's settings, which ``cfg.method`` would not read."""
    other = "magnitude" if cfg.method == "heads" else "heads"
    given = user_set(cfg, METHOD_SETTINGS[other])
    if not given:
        return
    if cfg.method == "heads":
        raise SeqkitError(f"{', '.join(given)} applies to method=magnitude (one weight threshold for all matrices, "
                          "or one per matrix); head pruning ranks the heads of all layers at once: drop it")
    raise SeqkitError(f"{', '.join(given)}: settings of head pruning (method=heads), which measures each head's "
                      "importance on data; magnitude pruning reads share and scope only: "
                      f"drop {'it' if len(given) == 1 else 'them'}")


def attention_modules(model: nn.Module) -> Dict[str, MultiheadAttention]:
    """Every attention module of ``model`` by its name (``encoder_layers.0.self_attn``, ...)."""
    return {name: m for name, m in model.named_modules() if isinstance(m, MultiheadAttention)}


def head_importance(model: nn.Module, samples: Callable[[], Any],
                    loss_of: Callable[[Any], torch.Tensor]) -> Dict[str, torch.Tensor]:
    """``E_x |dL(x) / dxi_h|`` of each head ``(H,)`` per attention module, over the sentences of
    ``samples()`` (batches; ``loss_of(sample)`` sums its sentences' losses), each module's
    normalized to unit l2 norm. Every sentence gets masks of its own (``(B, H)`` per module), so
    one backward pass per batch gives each sentence's gradients: the absolute value is taken per
    sentence, as Michel et al. define it, not after a batch's gradients have cancelled."""
    modules = attention_modules(model)
    names = list(modules)
    total = [torch.zeros(modules[n].num_heads) for n in names]
    was_training = model.training
    model.eval()
    try:
        for sample in samples():
            B = sample["net_input"]["src_tokens"].size(0)
            masks = [torch.ones(B, modules[n].num_heads, requires_grad=True) for n in names]
            for n, m in zip(names, masks):
                modules[n].head_mask = m
            for t, g in zip(total, torch.autograd.grad(loss_of(sample), masks)):
                t += g.abs().sum(0)
    finally:
        for n in names:
            modules[n].head_mask = None
        model.train(was_training)
    return {n: t / t.norm().clamp_min(1e-20) for n, t in zip(names, total)}


def prune_heads(model: nn.Module, pruned: Dict[str, List[int]], importance: Callable[[], Dict[str, torch.Tensor]],
                share: float, step: float) -> Dict[str, List[int]]:
    """Remove ``share`` of ``model``'s heads, least important first, ``step`` of them per round.
    ``pruned``: the heads already removed (original indices per module); returns it extended."""
    modules = attention_modules(model)
    total = sum(m.num_heads for m in modules.values())
    # at least the share asked for (20% of 36 heads: 8), in rounds of at least one head
    goal, per_round = math.ceil(share * total - 1e-9), max(1, math.ceil(step * total - 1e-9))
    record = {n: list(h) for n, h in pruned.items()}
    removed = 0
    while removed < goal:
        scores = importance()
        ranked = sorted((float(s[h]), n, h) for n, s in scores.items() for h in range(len(s)))
        chosen: Dict[str, List[int]] = {}
        for _, n, h in ranked:
            if removed + sum(map(len, chosen.values())) >= min(goal, removed + per_round):
                break
            if modules[n].num_heads - len(chosen.get(n, [])) > 1:  # a layer keeps one head
                chosen.setdefault(n, []).append(h)
        if not chosen:
            log.warning("every attention module is down to one head: %d of %d heads removed", removed, goal)
            break
        named = {}
        for n, heads in chosen.items():
            done = set(record.get(n, []))
            original = [h for h in range(modules[n].num_heads + len(done)) if h not in done]  # current -> original
            named[n] = sorted(original[h] for h in heads)
            record[n] = sorted(done | set(named[n]))
            modules[n].prune_heads(heads)
        removed += sum(map(len, chosen.values()))
        log.info("round: %d heads removed (%d of %d so far): %s", sum(map(len, chosen.values())), removed, total,
                 ", ".join(f"{n} {h}" for n, h in named.items()))
    return {n: h for n, h in record.items() if h}


def magnitude_prune(model: nn.Module, share: float, scope: str) -> Tuple[int, int]:
    """Zero ``share`` of the weights of every matrix and embedding of ``model`` by absolute value;
    returns (weights now zero, weights considered)."""
    weights = [p for _, p in model.named_parameters() if p.dim() >= 2]  # tied matrices once
    with torch.no_grad():
        if scope == "global":
            flat = torch.cat([w.detach().abs().reshape(-1) for w in weights])
            k = int(share * flat.numel())
            drop = torch.zeros(flat.numel(), dtype=torch.bool)
            drop[flat.argsort()[:k]] = True
            for w, d in zip(weights, drop.split([w.numel() for w in weights])):
                w.masked_fill_(d.view_as(w), 0.0)
        else:
            for w in weights:
                k = int(share * w.numel())
                w.view(-1)[w.detach().abs().reshape(-1).argsort()[:k]] = 0.0
    return sum(int(w.eq(0).sum()) for w in weights), sum(w.numel() for w in weights)


# the kind of seqkit-preprocess folder (its preprocess.json "task") each built-in task reads
_FOLDER_TASK = {"translation": "translation", "language_modeling": "language_modeling",
                "masked_lm": "language_modeling", "denoising": "language_modeling",
                "classification": "classification", "tagging": "tagging"}


def _clone_shared(state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """A copy of ``state`` (no views into the unpruned weights) in which tensors that shared one
    storage still share it: a tied embedding is saved, and counted, once."""
    copies: Dict[Any, torch.Tensor] = {}
    out = {}
    for k, v in state.items():
        key = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), tuple(v.stride()))
        if key not in copies:
            copies[key] = v.detach().clone()
        out[k] = copies[key]
    return out


def check_data_folder(task_name: str, data: str, path: str) -> None:
    """One clear error when ``data`` was preprocessed for another task than checkpoint ``path``'s
    (a classification folder for a translation model): its splits are not files that task reads."""
    meta_path = os.path.join(data, "preprocess.json")
    want = _FOLDER_TASK.get(task_name)
    if want is None or not os.path.isfile(meta_path):  # a plugin's task, or a folder made otherwise
        return
    try:
        with open(meta_path, encoding="utf-8") as f:
            held = json.load(f).get("task", "translation")
    except (OSError, ValueError, AttributeError):
        raise SeqkitError(f"{meta_path} is not a readable preprocess.json") from None
    if held != want:
        raise SeqkitError(f"data={data} holds {held} data, and {path} is a {task_name} model: the checkpoint's task "
                          f"and the data folder do not match (give a {want} folder, or the checkpoint's own "
                          "task.data by leaving data= empty)")


def _validation_batches(task: Any, model: nn.Module, cfg: PruneConfig) -> Callable[[], Any]:
    dataset = task.load_dataset(cfg.subset)
    too_long = dataset.too_long(*model.max_positions())
    batches = dataset.batches(cfg.max_tokens, 0, shuffle=False, exclude=too_long)
    return lambda: (dataset.collate(batch) for batch in batches)


def run(cfg: PruneConfig) -> str:
    from seqkit.core import checkpoints
    from seqkit.core.checkpoints import load_for_inference, saved_keys

    check_settings(cfg)
    if not cfg.path or not cfg.output:
        raise SeqkitError("path=CHECKPOINT and output=FILE are required")
    if os.path.abspath(cfg.path) == os.path.abspath(cfg.output):
        raise SeqkitError("output= must differ from path= (the pruned model is a new checkpoint)")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    state = checkpoints.load(cfg.path)
    if cfg.method == "heads":  # the importance is measured on data of the checkpoint's task
        task_cfg = state["cfg"].get("task", {})
        check_data_folder(task_cfg.get("name", ""), cfg.data or task_cfg.get("data") or "", cfg.path)
    task, model = load_for_inference(cfg.path, {"data": cfg.data} if cfg.data else None, state=state)
    if saved_keys(model) is not None:
        raise SeqkitError(f"{cfg.path} holds a parameter-efficient run (its trained part only): prune a full "
                          "checkpoint (seqkit-export format=checkpoint writes one, LoRA merged)")
    params_before = sum(p.numel() for p in model.parameters())
    out = {k: v for k, v in state.items() if k not in ("optimizer", "scaler", "_path")}
    if cfg.method == "heads":
        modules = attention_modules(model)
        if not modules or "pruned_heads" not in state["cfg"]["model"]:
            raise SeqkitError(f"{cfg.path} holds a {state['cfg']['model'].get('name')} model: head pruning takes "
                              "Transformer models (transformer, transformer_lm, transformer_classifier, "
                              "transformer_tagger)")
        if state["cfg"]["model"].get("relative_buckets"):
            raise SeqkitError("head pruning does not take T5's relative position biases (one per head)")
        for p in model.parameters():
            p.requires_grad_(False)
        from seqkit.criteria.cross_entropy import smoothed_nll

        samples = _validation_batches(task, model, cfg)
        before = sum(m.num_heads for m in modules.values())
        record = prune_heads(model, dict(state["cfg"]["model"]["pruned_heads"]),
                             lambda: head_importance(model, samples,
                                                     lambda s: smoothed_nll(model, s, task.ignore_index, 0.0)[0]),
                             cfg.share, cfg.step)
        after = sum(m.num_heads for m in attention_modules(model).values())
        out["cfg"]["model"]["pruned_heads"] = record
        what = f"{before - after} of {before} attention heads removed"
    else:
        zero, total = magnitude_prune(model, cfg.share, cfg.scope)
        what = f"{zero:,} of {total:,} matrix and embedding weights are zero ({100 * zero / max(total, 1):.1f}%)"
    out["model"] = _clone_shared(model.state_dict())
    out["pruned"] = {"method": cfg.method, "share": cfg.share, "scope": cfg.scope, "from": os.path.abspath(cfg.path)}
    checkpoints.write([cfg.output], out)
    params_after = sum(p.numel() for p in model.parameters())
    return (f"{what}; parameters {params_before:,} -> {params_after:,} "
            f"({100 * (1 - params_after / params_before):.1f}% fewer); wrote {cfg.output}")
