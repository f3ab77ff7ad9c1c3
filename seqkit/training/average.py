"""Average the weights of several checkpoints of one run (Vaswani et al. average the last 5-20).

The result is a normal checkpoint (the newest input's config, task state and train state, with
averaged model weights and no optimizer state), usable by seqkit-generate and the Translator.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, List

import torch

from seqkit.core import checkpoints
from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.settings import user_set


@dataclass
class AverageConfig:
    inputs: List[str] = arg(help="checkpoint files to average", factory=list)
    save_dir: str = arg("", "or: average the newest `last` checkpointN.pt files of this folder")
    last: int = arg(5, "how many epoch checkpoints to take from save_dir", ge=1)
    output: str = arg("", "where to write the averaged checkpoint")


def select_inputs(cfg: AverageConfig) -> List[str]:
    if cfg.inputs and cfg.save_dir:
        raise SeqkitError("give inputs=[...] or save_dir=..., not both")
    if cfg.save_dir:
        found = checkpoints.epoch_checkpoints(cfg.save_dir)
        if not found:
            raise SeqkitError(f"no checkpointN.pt files in {cfg.save_dir}")
        return found[: cfg.last]
    if not cfg.inputs:
        raise SeqkitError("nothing to average: give inputs=[a.pt,b.pt] or save_dir=DIR")
    if user_set(cfg, ["last"]):
        raise SeqkitError(f"last={cfg.last} counts the newest checkpoints of save_dir=; with inputs=[...] every "
                          "file given is averaged: drop it")
    return list(cfg.inputs)


def average_checkpoints(paths: List[str]) -> Dict[str, Any]:
    """Element-wise mean of the model weights of ``paths`` (all of the same model)."""
    first = checkpoints.load(paths[0])
    total = {k: v.double() if v.is_floating_point() else v for k, v in first["model"].items()}
    for path in paths[1:]:
        state = checkpoints.load(path)
        if state["cfg"].get("model") != first["cfg"].get("model") or state["model"].keys() != total.keys():
            raise SeqkitError(f"{path} holds a different model than {paths[0]}")
        for k, v in state["model"].items():
            if v.is_floating_point():
                total[k] += v.double()
    avg = {k: (v / len(paths)).to(first["model"][k].dtype) if v.is_floating_point() else v for k, v in total.items()}
    out = {k: v for k, v in first.items() if k not in ("optimizer", "scaler", "_path")}
    out["model"] = avg
    out["averaged_from"] = [os.path.basename(p) for p in paths]
    return out


def run(cfg: AverageConfig) -> str:
    if not cfg.output:
        raise SeqkitError("output=FILE is required")
    paths = select_inputs(cfg)
    checkpoints.write([cfg.output], average_checkpoints(paths))
    return f"averaged {len(paths)} checkpoints ({', '.join(os.path.basename(p) for p in paths)}) -> {cfg.output}"
