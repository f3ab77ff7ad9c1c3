"""Rebuild a trained task and model from one checkpoint, for inference (any task)."""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Tuple

import torch

from seqkit.errors import SeqkitError
from seqkit.models.base import check_saved_keys, saved_keys
from seqkit.registry import MODELS, TASKS


def load_for_inference(path: str, task_overrides: Optional[Dict[str, Any]] = None,
                       state: Optional[Dict[str, Any]] = None) -> Tuple[Any, torch.nn.Module]:
    """``(task, model)`` from ``path``: the task from the checkpoint's task state (dictionaries,
    labels, tokenizer), the model from its config and weights, on CPU. ``task_overrides`` changes
    task config fields (e.g. ``data`` to locate binarized splits); ``state``: the checkpoint
    already read from ``path``."""
    import seqkit
    from seqkit.training import checkpoints

    seqkit.import_builtin_components()
    if state is None:
        state = checkpoints.load(path)
    cfg = state["cfg"]
    user_dir = cfg.get("common", {}).get("user_dir")
    if user_dir and os.path.isdir(user_dir):  # the run's plugins, as fairseq re-imports them
        from seqkit.plugins import import_user_dir

        import_user_dir(user_dir)
    task_values = {**cfg["task"], **(task_overrides or {})}
    task = TASKS.build(TASKS.make_config(task_values), state["task_state"])
    # a parameter-efficient checkpoint's base path: as stored, else beside the checkpoint (older
    # checkpoints stored it relative to the folder they were trained in)
    resolve = getattr(MODELS.builder(cfg["model"]["name"]), "resolve_paths", None)
    model = task.build_model(MODELS.make_config(resolve(cfg["model"], path) if resolve else cfg["model"]))
    keep = saved_keys(model)  # a parameter-efficient checkpoint: what it trained, over its base
    check_saved_keys(keep, state["model"], path)
    try:
        model.load_state_dict(state["model"], strict=keep is None)
    except RuntimeError as e:
        raise SeqkitError(f"{path}: weights do not fit the model it describes ({str(e).splitlines()[0]})") from None
    return task, model
