"""``model.init_from=CKPT``: a translation Transformer starts from a pretraining checkpoint's weights.

Read once, by the trainer (:func:`apply_init_from`), on a fresh start: a resumed run takes its
weights from its own checkpoint and never reads CKPT again, and a model rebuilt from a checkpoint
(generation, export) never reads it. The key map, by the task CKPT was trained with:

- ``xlm`` (Lample & Conneau 2019, section 5: "we initialize the encoder and the decoder with the
  pretrained model"; a BERT-family encoder, its segment table holding one row per language):
  ``encoder.embed_tokens`` -> ``src_embed`` and ``tgt_embed``; ``encoder.embed_positions`` ->
  ``src_pos`` and ``tgt_pos`` (learned positions); ``encoder.embed_norm`` -> ``src_embed_norm`` and
  ``tgt_embed_norm``; the segment rows of the source / target language -> ``lang_embed`` rows 0 / 1;
  ``encoder.layers.i`` -> ``encoder_layers.i`` (every tensor) and -> ``decoder_layers.i``
  (``self_attn``, ``attn_res`` -> ``self_res``, ``ffn``, ``ffn_res``): the decoder's
  cross-attention (``cross_attn``, ``cross_res``) stays random, as in the paper;
  ``encoder.final_norm`` -> ``encoder_norm`` and ``decoder_norm``. The masked-LM head is not used.
- ``mass`` and ``denoising`` (BART, T5): the same model family, so every tensor under its own name;
  ``lang_embed`` rows by language name (MASS).

Vocabulary tables (embeddings, an untied output projection, the output bias) take the first V rows:
the pretraining tasks add ``<mask>`` (and T5's sentinels) after the folder's symbols, which a
translation model does not read. CKPT's own dictionary must be the data folder's, symbol for
symbol, and CKPT's languages must hold the task's source and target languages. A tensor whose
shape differs, a behaviour setting that differs (post-/pre-norm, activation, embedding scale, ...)
and a tensor with no place in the model are refused in one line naming the first. One log line
counts the tensors loaded and those left at random.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any, Dict, List, Sequence, Tuple

import torch
from torch import nn

from seqkit.core import checkpoints
from seqkit.core.errors import SeqkitError
from seqkit.data.dictionary import Dictionary
from seqkit.models.modules.pretrained_embeddings import resumes

log = logging.getLogger("seqkit.models")

TASKS = ("xlm", "mass", "denoising")
VOCAB_TENSORS = ("src_embed.weight", "tgt_embed.weight", "output_proj.weight", "output_bias")
# settings that change what the weights compute without changing a shape: they must agree
SEQ2SEQ_BEHAVIOUR = ("normalize_before", "activation", "no_scale_embedding", "learned_positions", "embed_layer_norm",
                     "position_offset", "sinusoids", "rms_norm", "gated_ffn", "bias", "scale_attention",
                     "decoder_start", "scale_output", "relative_buckets")
XLM_BEHAVIOUR = ("normalize_before", "activation", "no_scale_embedding", "learned_positions", "embed_layer_norm",
                 "position_offset")
# XLM: an encoder layer's modules -> the decoder layer's (cross_attn and cross_res have no source)
DECODER_FROM_ENCODER = {"self_attn": "self_attn", "attn_res": "self_res", "ffn": "ffn", "ffn_res": "ffn_res"}


def apply_init_from(model: nn.Module, model_cfg: Any, task: Any, checkpoint_cfg: Any) -> None:
    """The trainer's hook, right after the task builds ``model``: load ``model.init_from`` on a fresh start."""
    path = getattr(model_cfg, "init_from", "")
    if not path:
        return
    if resumes(checkpoint_cfg):
        log.info("model.init_from: not read (a resumed run: the weights are in the checkpoint)")
        return
    if checkpoint_cfg.restore_file:
        raise SeqkitError(f"model.init_from={path} and checkpoint.restore_file={checkpoint_cfg.restore_file} both "
                          "give the starting weights; drop one of the two")
    if getattr(task, "model_kind", None) != "seq2seq" or not hasattr(task, "source_lang"):
        raise SeqkitError(f"model.init_from={path}: initialises translation models (task=translation); drop it")
    loaded, kind = init_from(model, model_cfg, task, path)
    names = [n for n, _ in model.named_parameters()]  # a tied table once
    left = [n for n in names if n not in loaded]
    shown = ", ".join(left[:4]) + (", ..." if len(left) > 4 else "")
    log.info("model.init_from=%s (task %s): loaded %d of the model's %d parameter tensors, %d left at random%s",
             path, kind, len(names) - len(left), len(names), len(left), f" ({shown})" if left else "")


def init_from(model: nn.Module, model_cfg: Any, task: Any, path: str) -> Tuple[Dict[str, str], str]:
    """Copy CKPT's weights into ``model`` by the key map; returns {model tensor: checkpoint tensor}
    and the checkpoint's task name."""
    state = checkpoints.load(path)
    saved_cfg = state["cfg"]
    kind = str(saved_cfg.get("task", {}).get("name"))
    if kind not in TASKS:
        raise SeqkitError(f"model.init_from={path} is a task {kind} checkpoint; init_from reads task "
                          f"{', '.join(TASKS)} checkpoints (for another translation model: checkpoint.restore_file)")
    _check_dictionary(path, state["task_state"], task)
    saved_model = saved_cfg.get("model", {})
    _check_behaviour(path, saved_model, model_cfg, XLM_BEHAVIOUR if kind == "xlm" else SEQ2SEQ_BEHAVIOUR)
    weights = state["model"]
    pairs = _xlm_map(weights, model) if kind == "xlm" else [(k, k) for k in weights if k != "lang_embed.weight"]
    own = model.state_dict()
    V = len(task.src_dict)
    copies: List[Tuple[str, torch.Tensor, str]] = []
    for target, source in pairs:
        if source.startswith("mlm_head.") or source == "encoder.embed_segments.weight":
            continue
        if target not in own:
            raise SeqkitError(f"model.init_from={path}: checkpoint tensor {source} has no place in this model "
                              f"(no {target}); build the model as the checkpoint's was (its model: "
                              f"{saved_model.get('name')}, {_arch(saved_model)})")
        copies.append((target, _fit(path, weights[source], own[target], target, source, V), source))
    copies += _lang_rows(path, state["task_state"], weights, kind, model_cfg, task)
    with torch.no_grad():
        for target, value, _ in copies:
            own[target].copy_(value)
    return {t: s for t, _, s in copies}, kind


def _arch(m: Dict[str, Any]) -> str:
    keys = ("encoder_layers", "decoder_layers", "embed_dim", "ffn_dim", "attention_heads", "max_positions",
            "max_source_positions")
    return ", ".join(f"{k}={m[k]}" for k in keys if k in m)


def _fit(path: str, value: torch.Tensor, here: torch.Tensor, target: str, source: str, V: int) -> torch.Tensor:
    """``value`` in ``here``'s shape: vocabulary tables lose the pretraining task's extra rows."""
    fitted = value[:V] if target in VOCAB_TENSORS and value.dim() >= 1 and value.size(0) > V == here.size(0) else value
    if tuple(fitted.shape) != tuple(here.shape):
        raise SeqkitError(f"model.init_from={path}: {target} is {tuple(here.shape)} here but {source} is "
                          f"{tuple(value.shape)} in the checkpoint; build the model with the checkpoint's dimensions")
    return fitted


def _xlm_map(weights: Dict[str, torch.Tensor], model: nn.Module) -> List[Tuple[str, str]]:
    """(model tensor, XLM checkpoint tensor) pairs, see the module docstring."""
    tied = getattr(model, "src_embed", None) is getattr(model, "tgt_embed", None)
    out: List[Tuple[str, str]] = []
    for key in weights:
        m = re.match(r"encoder\.layers\.(\d+)\.(\w+)\.(.+)$", key)
        if m:
            i, module, rest = m.groups()
            out.append((f"encoder_layers.{i}.{module}.{rest}", key))
            if module in DECODER_FROM_ENCODER and int(i) < len(getattr(model, "decoder_layers", ())):
                out.append((f"decoder_layers.{i}.{DECODER_FROM_ENCODER[module]}.{rest}", key))
            continue
        for prefix, targets in (("encoder.embed_tokens.", ("src_embed.",) if tied else ("src_embed.", "tgt_embed.")),
                                ("encoder.embed_positions.", ("src_pos.", "tgt_pos.")),
                                ("encoder.embed_norm.", ("src_embed_norm.", "tgt_embed_norm.")),
                                ("encoder.final_norm.", ("encoder_norm.", "decoder_norm."))):
            if key.startswith(prefix):
                out += [(t + key[len(prefix):], key) for t in targets]
                break
        else:
            out.append((key, key))  # mlm_head, embed_segments: skipped; anything else: refused as placeholess
    return out


def _lang_rows(path: str, task_state: Dict[str, Any], weights: Dict[str, torch.Tensor], kind: str, model_cfg: Any,
               task: Any) -> List[Tuple[str, torch.Tensor, str]]:
    """``lang_embed`` rows 0 / 1 from the checkpoint's rows of the source / target language."""
    langs: Sequence[str] = task_state.get("langs") or ()
    source = {"xlm": "encoder.embed_segments.weight", "mass": "lang_embed.weight"}.get(kind)
    if not langs or source not in weights:
        return []
    for side, lang in (("source", task.source_lang), ("target", task.target_lang)):
        if lang not in langs:
            raise SeqkitError(f"model.init_from={path} was pretrained on languages {', '.join(langs)}; the task's "
                              f"{side} language {lang} is not one of them (pretrain on {lang} text, or translate "
                              f"between {' and '.join(langs)})")
    if getattr(model_cfg, "num_langs", 0) < 2:
        raise SeqkitError(f"model.init_from={path} has language embeddings ({', '.join(langs)}): set "
                          "model.num_langs=2 (row 0 the source language, row 1 the target)")
    table = weights[source]
    rows = torch.stack([table[langs.index(task.source_lang)], table[langs.index(task.target_lang)]])
    return [("lang_embed.weight", torch.cat([rows, _own_rows(model_cfg, table)]), source)]


def _own_rows(model_cfg: Any, table: torch.Tensor) -> torch.Tensor:
    """Rows past 1 of a wider ``lang_embed`` (num_langs > 2): drawn as the model draws them."""
    extra = torch.empty(model_cfg.num_langs - 2, table.size(1))
    return nn.init.normal_(extra, mean=0.0, std=table.size(1) ** -0.5)


def _check_behaviour(path: str, saved: Dict[str, Any], model_cfg: Any, keys: Sequence[str]) -> None:
    for key in keys:
        if key in saved and hasattr(model_cfg, key) and saved[key] != getattr(model_cfg, key):
            mine, theirs = getattr(model_cfg, key), saved[key]
            show = (lambda v: str(v).lower() if isinstance(v, bool) else str(v))
            raise SeqkitError(f"model.init_from={path}: model.{key}={show(mine)} here, {show(theirs)} in the "
                              f"checkpoint (its weights were trained with it); set model.{key}={show(theirs)}")


def _check_dictionary(path: str, task_state: Dict[str, Any], task: Any) -> None:
    """CKPT's own dictionary (before ``<mask>``) must be the data folder's, symbol for symbol."""
    saved = task_state.get("dict") or task_state.get("src_dict")
    if saved is None:
        raise SeqkitError(f"model.init_from={path}: the checkpoint holds no dictionary")
    theirs = Dictionary.from_state_dict(saved).symbols
    data = getattr(task.cfg, "data", "task.data")
    for side, d, lang in (("source", task.src_dict, task.source_lang), ("target", task.tgt_dict, task.target_lang)):
        mine = d.symbols
        if list(mine) != list(theirs):
            at = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
            what = (f"id {at} is {mine[at]!r} here, {theirs[at]!r} there" if at < min(len(mine), len(theirs))
                    else "one is a prefix of the other")
            raise SeqkitError(f"model.init_from={path}: its dictionary ({len(theirs)} symbols) differs from "
                              f"{os.path.join(str(data), f'dict.{lang}.txt')} ({len(mine)} symbols; {what}); "
                              f"preprocess the {side} text with the checkpoint's tokenizer and dictionary")
