"""A LoRA fine-tuning run as a PEFT adapter folder (``seqkit-export format=huggingface peft=true``):
``adapter_config.json`` + ``adapter_model.safetensors`` (the low-rank matrices and the task head,
PEFT's ``modules_to_save``), and in ``base/`` the model without the updates, as its HF
``*ForSequenceClassification`` / ``*ForTokenClassification`` class. ``peft.PeftModel.from_pretrained``
on that base gives the run's outputs; the folder is written by seqkit alone (no ``peft`` needed).

The weight maps are the families': a seqkit update of a fused ``qkv_proj`` (A ``(r, C)``, B
``(3C, r)``) becomes three PEFT updates of BERT's ``query``, ``key``, ``value`` sharing A, each with
a third of B's rows (``B A`` cut the same way as the weight); GPT-2's fused ``c_attn`` takes it whole
(``fan_in_fan_out``: PEFT keeps a Conv1D's updates in the same orientation as seqkit's).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Tuple

import torch

from seqkit.core.errors import SeqkitError
from seqkit.core.io import atomic_write_text, staged_dir
from seqkit.hf import heads
from seqkit.hf.folder import require, write_model


def _linear_names(family: Any, body_cfg: Dict[str, Any], imported: str) -> Dict[str, Tuple[Tuple[str, ...], bool]]:
    """seqkit Linear name (body-relative) -> (its HF module names, transposed)."""
    out = {}
    for hf, ours, transposed in family.body_keymap(body_cfg, imported).pairs:
        if ours.endswith(".weight"):
            out[ours[: -len(".weight")]] = (tuple(name[: -len(".weight")] for name in hf), transposed)
    return out


def export_peft(cfg: Dict[str, Any], model: torch.nn.Module, labels: List[str], vocab: Any, imported: str,
                output: str, files: Dict[str, Any], overwrite: bool) -> None:
    tagger = cfg["name"] == "pretrained_tagger"
    body_cfg = cfg["body"]["model"]
    family = heads.FAMILIES.get(body_cfg["name"])
    if family is None:
        raise SeqkitError(f"a {body_cfg['name']} body has no HuggingFace counterpart to export to")
    names = _linear_names(family, body_cfg, imported)
    body_state = model.body.state_dict()
    updates: Dict[str, torch.Tensor] = {}
    targets: List[str] = []
    for key in body_state:
        if not key.endswith(".lora.A"):
            continue
        linear = key[: -len(".lora.A")]
        if linear not in names:
            raise SeqkitError(f"the LoRA update of {linear} has no HuggingFace module to go to")
        hf_names, transposed = names[linear]
        A, B = body_state[f"{linear}.lora.A"], body_state[f"{linear}.lora.B"]  # (r, in), (out, r)
        for hf, part in zip(hf_names, B.chunk(len(hf_names), dim=0)):
            updates[f"base_model.model.{hf}.lora_A.weight"] = A.clone()
            updates[f"base_model.model.{hf}.lora_B.weight"] = part.clone()
            targets.append(hf)
    if not updates:
        raise SeqkitError("the model holds no LoRA updates to write as a PEFT adapter")
    base_cfg, base_state = heads.to_hf(cfg, model, labels, vocab, imported, lora="drop")
    variant = heads.body_variant(body_cfg, imported)
    saved = [hf for hf, _ in heads.head_names(variant, tagger)]
    for hf in saved:
        for w in ("weight", "bias"):
            updates[f"base_model.model.{hf}.{w}"] = base_state[f"{hf}.{w}"].clone()
    lora = cfg["lora"]
    adapter = {"peft_type": "LORA", "task_type": "TOKEN_CLS" if tagger else "SEQ_CLS", "r": lora["rank"],
               "lora_alpha": lora["alpha"], "lora_dropout": lora["dropout"], "target_modules": sorted(targets),
               "modules_to_save": saved, "fan_in_fan_out": variant == "gpt2", "bias": "none",
               "base_model_name_or_path": "base", "inference_mode": True, "init_lora_weights": True,
               "use_rslora": False, "use_dora": False}
    base_cfg["dtype"] = "float32"
    safetensors_torch = require("safetensors.torch")
    with staged_dir(output, overwrite=overwrite) as tmp:
        atomic_write_text(os.path.join(tmp, "adapter_config.json"), json.dumps(adapter, indent=2, sort_keys=True) + "\n")
        tensors = {k: v.detach().contiguous() for k, v in updates.items()}
        safetensors_torch.save_file(tensors, os.path.join(tmp, "adapter_model.safetensors"), metadata={"format": "pt"})
        os.makedirs(os.path.join(tmp, "base"))
        write_model(os.path.join(tmp, "base"), base_cfg, base_state, files)
