"""``seqkit-export``: a checkpoint written for another inference engine, or as a checkpoint that
stands alone. :class:`ExportConfig` is the command's schema and :func:`run` picks the writer:

- :mod:`~seqkit.export.ct2`: ``format=ctranslate2``, a CTranslate2 model folder (also written on
  demand by ``seqkit-generate engine=ctranslate2``);
- :mod:`~seqkit.export.checkpoint`: ``format=checkpoint``, a fine-tuned pretrained model with its
  LoRA updates merged or its frozen base included;
- ``format=huggingface`` is :mod:`seqkit.hf.convert`'s, beside the other HuggingFace maps.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.export.ct2 import QUANTIZATIONS


@dataclass
class ExportConfig:
    format: str = arg("ctranslate2", "what to write: ctranslate2 (a CTranslate2 model folder), huggingface (a "
                                     "HuggingFace model folder that from_pretrained loads, seqkit[hf]) or checkpoint (a "
                                     "stand-alone seqkit checkpoint of a fine-tuned pretrained model: LoRA updates "
                                     "merged into the weights, a parameter-efficient run's base included)",
                      choices=("ctranslate2", "huggingface", "checkpoint"))
    path: str = arg("", "the checkpoint to export (ctranslate2: a Transformer translation model; checkpoint: a "
                        "model=pretrained_classifier / pretrained_tagger run)")
    output: str = arg("", "folder (ctranslate2) or file (checkpoint) to write, replaced only when the export succeeds")
    quantization: str = arg("fp32", "format=ctranslate2: weight type stored (the other formats store the weights "
                                    "unquantized): " + ", ".join(QUANTIZATIONS), choices=tuple(QUANTIZATIONS))
    peft: bool = arg(False, "format=huggingface with a model.adapt=lora run: a PEFT adapter folder (adapter_config.json, "
                            "adapter_model.safetensors) with the model without its updates in base/, instead of the "
                            "merged model")
    overwrite: bool = arg(False, "replace an existing output folder")


def check_settings(cfg: ExportConfig) -> None:
    """Refuse a setting ``cfg.format`` does not write: a quantization (only CTranslate2 stores
    quantized weights) and ``peft`` (a HuggingFace PEFT folder)."""
    if cfg.quantization != "fp32" and cfg.format != "ctranslate2":
        raise SeqkitError(f"quantization={cfg.quantization} is stored by format=ctranslate2 only; format={cfg.format} "
                          "writes the model's weights unquantized: drop quantization (a seqkit checkpoint runs in int8 "
                          "with seqkit-generate quantize=int8)")
    if cfg.peft and cfg.format != "huggingface":
        raise SeqkitError(f"peft=true writes a PEFT adapter folder, a format=huggingface export; format={cfg.format} "
                          "does not: drop peft or set format=huggingface")


def run(cfg: ExportConfig) -> str:
    check_settings(cfg)
    if not cfg.path:
        raise SeqkitError("path=CHECKPOINT is required")
    if not cfg.output:
        raise SeqkitError("output=FOLDER is required")
    if not os.path.isfile(cfg.path):
        raise SeqkitError(f"checkpoint {cfg.path} not found")
    if cfg.format == "checkpoint":
        from seqkit.export.checkpoint import export_checkpoint

        return export_checkpoint(cfg.path, cfg.output, cfg.overwrite)
    if cfg.format == "huggingface":
        from seqkit.hf.convert import export_folder

        return export_folder(cfg.path, cfg.output, cfg.overwrite, peft=cfg.peft)
    from seqkit.export.ct2 import export_ctranslate2

    return export_ctranslate2(cfg.path, cfg.output, cfg.quantization, cfg.overwrite)
