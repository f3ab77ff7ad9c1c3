"""Export a Transformer translation checkpoint to CTranslate2 (``seqkit-export format=ctranslate2``).

The model is written through CTranslate2's public spec API (``ctranslate2.specs.TransformerSpec``)
from seqkit's own modules, nothing in between: tied embeddings stay tied, the position table is
seqkit's (sinusoidal or learned), decoding starts from seqkit's ``<s>`` and sources end with
``</s>`` as seqkit binarizes them. The export folder also holds the dictionaries' symbols (CT2's
vocabulary files), the sentencepiece models, and ``seqkit_export.json``: the checkpoint's sha256,
so ``seqkit-generate engine=ctranslate2`` reuses an export only while it matches its checkpoint,
and the task (its config and state: dictionaries, tokenizers) with the model's max positions, so
that command rebuilds the task from the export alone, without torch.

``ctranslate2`` is the optional extra ``seqkit[ct2]``. ``seqkit-generate engine=ctranslate2``
(:mod:`seqkit.generation.ct2_engine`) writes the export it needs through :func:`cached_export`.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from typing import Any, Dict, Optional

from seqkit.core.errors import SeqkitError
from seqkit.core.io import file_sha256

log = logging.getLogger("seqkit.export")
META = "seqkit_export.json"
VERSION = 2  # 2: the task travels in META; an export of another version is written anew
# seqkit's names -> CTranslate2's weight types (the compute type is still chosen when loading)
QUANTIZATIONS = {"fp32": "float32", "int8": "int8", "int8_float32": "int8_float32", "int16": "int16",
                 "bf16": "bfloat16", "fp16": "float16", "int8_bf16": "int8_bfloat16", "int8_fp16": "int8_float16"}


def import_ctranslate2() -> Any:
    try:
        import ctranslate2
    except ImportError:
        raise SeqkitError("CTranslate2 is not installed: pip install 'seqkit[ct2]'") from None
    return ctranslate2


def to_json(value: Any) -> Any:
    """Plain data (dicts, lists, str, numbers, bytes) as JSON values; bytes become ``{"base64": ...}``."""
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def from_json(value: Any) -> Any:
    """:func:`to_json`'s inverse."""
    if isinstance(value, dict):
        if set(value) == {"base64"}:
            return base64.b64decode(value["base64"])
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return value


def read_meta(folder: str) -> Dict[str, Any]:
    """``folder``'s ``seqkit_export.json`` ({} when missing or unreadable)."""
    try:
        with open(os.path.join(folder, META), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _np(t: Any) -> Any:
    return t.detach().float().cpu().numpy()


def _linear(spec: Any, module: Any) -> None:
    spec.weight = _np(module.weight)
    if module.bias is not None:
        spec.bias = _np(module.bias)


def _norm(spec: Any, module: Any) -> None:
    spec.gamma, spec.beta = _np(module.weight), _np(module.bias)


def _positions(spec: Any, module: Any) -> None:
    table = module.table if hasattr(module, "table") else module.weight  # (first_row + P, C)
    spec.encodings = _np(table[module.first_row:])  # position p is row p


def _ffn(spec: Any, layer: Any) -> None:
    _norm(spec.layer_norm, layer.ffn_res.norm)
    _linear(spec.linear_0, layer.ffn.fc1)
    _linear(spec.linear_1, layer.ffn.fc2)


def transformer_spec(model: Any, src_symbols: list, tgt_symbols: list, specials: Dict[str, str]) -> Any:
    """A ``ctranslate2.specs.TransformerSpec`` holding ``model`` (a seqkit ``TransformerModel``)."""
    import numpy as np

    import_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec as ts

    cfg = model.cfg
    if type(model).__name__ != "TransformerModel":
        raise SeqkitError(f"CTranslate2 export takes the Transformer encoder-decoder, not {type(model).__name__} "
                          "(seqkit-generate's own engine serves every model)")
    for key, want in (("embed_layer_norm", False), ("output_bias", False), ("decoder_start", "bos"),
                      ("relative_buckets", 0), ("rms_norm", False), ("bias", True), ("scale_attention", True),
                      ("head_dim", 0), ("gated_ffn", False), ("scale_output", False), ("num_langs", 0)):
        if getattr(cfg, key) != want:  # an imported HuggingFace model's switches
            raise SeqkitError(f"CTranslate2 export takes model.{key}={want} models, not {getattr(cfg, key)}")
    if cfg.pruned_heads:
        raise SeqkitError("CTranslate2 export takes models with the same number of heads in every attention layer; "
                          "this one's heads were pruned (seqkit-generate's own engine serves it)")
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                  "gelu_tanh": common_spec.Activation.GELUTanh, "silu": common_spec.Activation.SWISH}[cfg.activation]
    spec = ts.TransformerSpec.from_config((cfg.encoder_layers, cfg.decoder_layers), cfg.attention_heads,
                                          pre_norm=cfg.normalize_before, activation=activation)
    enc, dec = spec.encoder, spec.decoder
    # the embedding scale is a float here (sqrt(C) or 1), as the spec allows
    enc.scale_embeddings = dec.scale_embeddings = np.float32(model.embed_scale) if model.embed_scale != 1.0 else False
    enc.embeddings[0].weight = _np(model.src_embed.weight)
    _positions(enc.position_encodings, model.src_pos)
    for ls, layer in zip(enc.layer, model.encoder_layers):
        _linear(ls.self_attention.linear[0], layer.self_attn.qkv_proj)  # q, k, v fused in that order
        _linear(ls.self_attention.linear[1], layer.self_attn.out_proj)
        _norm(ls.self_attention.layer_norm, layer.attn_res.norm)
        _ffn(ls.ffn, layer)
    dec.embeddings.weight = _np(model.tgt_embed.weight)
    _positions(dec.position_encodings, model.tgt_pos)
    out = model.tgt_embed.weight if model.output_proj is None else model.output_proj.weight
    # the same array object when tied: CTranslate2 stores it once (an alias)
    dec.projection.weight = dec.embeddings.weight if model.output_proj is None else _np(out)
    for ls, layer in zip(dec.layer, model.decoder_layers):
        _linear(ls.self_attention.linear[0], layer.self_attn.qkv_proj)
        _linear(ls.self_attention.linear[1], layer.self_attn.out_proj)
        _norm(ls.self_attention.layer_norm, layer.self_res.norm)
        _linear(ls.attention.linear[0], layer.cross_attn.q_proj)
        _linear(ls.attention.linear[1], layer.cross_attn.kv_proj)  # k, v fused in that order
        _linear(ls.attention.linear[2], layer.cross_attn.out_proj)
        _norm(ls.attention.layer_norm, layer.cross_res.norm)
        _ffn(ls.ffn, layer)
    if cfg.normalize_before:
        _norm(enc.layer_norm, model.encoder_norm)
        _norm(dec.layer_norm, model.decoder_norm)
    spec.register_source_vocabulary(list(src_symbols))
    spec.register_target_vocabulary(list(tgt_symbols))
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = specials["unk"], specials["bos"], specials["eos"]
    spec.config.decoder_start_token = specials["bos"]  # seqkit's decoder starts from <s>
    spec.config.add_source_eos = True  # seqkit's sources end with </s>
    spec.config.layer_norm_epsilon = float(_eps(model))
    return spec


def _eps(model: Any) -> float:
    for m in model.modules():
        if hasattr(m, "eps") and hasattr(m, "normalized_shape"):
            return m.eps
    return 1e-5


def _symbols(d: Any) -> list:
    symbols = [d[i] for i in range(len(d))]
    if len(set(symbols)) != len(symbols):
        raise SeqkitError("the dictionary holds a symbol twice: CTranslate2 needs distinct tokens")
    return symbols


def export_ctranslate2(path: str, output: str, quantization: str = "fp32", overwrite: bool = False,
                       sha256: Optional[str] = None) -> str:
    """Write ``path``'s model as a CTranslate2 folder at ``output`` (all or nothing); return ``output``."""
    import torch

    from seqkit.core.checkpoints import load_for_inference
    from seqkit.core.config import to_plain
    from seqkit.core.io import atomic_write_text, staged_dir

    import_ctranslate2()
    if quantization not in QUANTIZATIONS:
        raise SeqkitError(f"quantization={quantization!r}: choose one of {', '.join(QUANTIZATIONS)}")
    task, model = load_for_inference(path)
    if getattr(task, "model_kind", "seq2seq") != "seq2seq":
        raise SeqkitError(f"{path} holds a {task.model_kind} model: CTranslate2 export takes translation models")
    src, tgt = task.src_dict, task.tgt_dict
    specials = {"unk": tgt[tgt.unk()], "bos": tgt[tgt.bos()], "eos": tgt[tgt.eos()]}
    with torch.no_grad():
        spec = transformer_spec(model, _symbols(src), _symbols(tgt), specials)
    meta = {"format": "ctranslate2", "version": VERSION, "checkpoint": os.path.abspath(path),
            "sha256": sha256 or file_sha256(path), "quantization": quantization, "source_lang": task.source_lang,
            "target_lang": task.target_lang, "max_positions": list(model.max_positions()),
            "task": to_plain(task.cfg), "task_state": to_json(task.checkpoint_state())}
    with staged_dir(output, overwrite=overwrite) as tmp:
        spec.validate()
        spec.optimize(quantization=QUANTIZATIONS[quantization])
        spec.save(tmp)
        for side, name in (("src", "source"), ("tgt", "target")):
            tok = task.tokenizer(side)
            proto = getattr(tok, "model_proto", None) if tok is not None else None
            if proto:
                with open(os.path.join(tmp, f"{name}.spm.model"), "wb") as f:
                    f.write(proto)
        atomic_write_text(os.path.join(tmp, META), json.dumps(meta, indent=2) + "\n")
    log.info("exported %s to %s (CTranslate2, %s weights)", path, output, quantization)
    return output


def cached_export(path: str, folder: str = "", quantization: str = "fp32") -> str:
    """The CTranslate2 export of ``path`` in ``folder`` (default: under ``$XDG_CACHE_HOME/seqkit/ctranslate2``):
    reused while its recorded sha256 and weight type match, else written anew."""
    if not os.path.isfile(path):
        raise SeqkitError(f"checkpoint {path} not found")
    sha = file_sha256(path)
    if not folder:
        root = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        folder = os.path.join(root, "seqkit", "ctranslate2", f"{sha[:16]}-{quantization}")
    if os.path.isfile(os.path.join(folder, META)):
        old = read_meta(folder)
        if old.get("sha256") == sha and old.get("quantization") == quantization and old.get("version") == VERSION:
            log.info("reusing the CTranslate2 export %s", folder)
            return folder
    elif os.path.isdir(folder) and os.listdir(folder):
        raise SeqkitError(f"{folder} is not empty and holds no {META}: not a seqkit export, left untouched")
    return export_ctranslate2(path, folder, quantization, overwrite=True, sha256=sha)
