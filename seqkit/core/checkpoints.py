"""Checkpoint files: plain tensors and dicts, written atomically, verified when read; and
:func:`load_for_inference`, which rebuilds the task and the model a checkpoint describes through
the registries (every floor above reads checkpoints through this module).

A checkpoint holds: ``cfg`` (the whole train config as plain dicts), ``task_state`` (dictionaries,
tokenizers), ``model``, ``optimizer``, ``scaler`` state, ``train_state`` (epoch, updates, position
inside the epoch, best metric, patience counter) and ``rng`` states. Everything loads under
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import glob
import io
import logging
import os
import re
from typing import Any, Dict, List, Optional, Set, Tuple

import torch

from seqkit.core.errors import SeqkitError
from seqkit.core.io import atomic_write_bytes
from seqkit.core.registry import MODELS, TASKS

log = logging.getLogger("seqkit.checkpoints")

FORMAT_VERSION = 1
_REQUIRED = ("format", "cfg", "task_state", "model", "train_state")


def serialize(state: Dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def write(paths: List[str], state: Dict[str, Any]) -> None:
    """Serialize once, then write each path atomically (temporary file, fsync, rename).

    A failing write (disk full, say) raises before the rename, so the file that was there stays whole.
    """
    data = serialize(state)
    for path in paths:
        try:
            atomic_write_bytes(path, data)
        except OSError as e:
            raise SeqkitError(f"could not save checkpoint {path}: {e.strerror or e}") from None


def load(path: str) -> Dict[str, Any]:
    """Read and verify a checkpoint; a missing, truncated or foreign file, or a folder, is a SeqkitError."""
    if os.path.isdir(path):
        raise SeqkitError(folder_instead(path))
    if not os.path.isfile(path):
        raise SeqkitError(f"checkpoint not found: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, pickle errors, foreign formats: all mean "not usable"
        raise SeqkitError(f"checkpoint {path} is corrupt or not a seqkit checkpoint ({type(e).__name__})") from None
    if not isinstance(state, dict) or any(k not in state for k in _REQUIRED):
        raise SeqkitError(f"{path} is not a seqkit checkpoint")
    if state["format"] > FORMAT_VERSION:
        raise SeqkitError(f"{path} was written by a newer seqkit (format {state['format']})")
    return state


HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")


def folder_instead(path: str) -> str:
    """What to say when a checkpoint path names a folder: what the folder is and what to do."""
    names = set(os.listdir(path))
    own = [n for n in ("checkpoint_best.pt", "checkpoint_last.pt") if n in names] + epoch_checkpoints(path)[:1]
    if "config.json" in names and names & set(HF_WEIGHTS):
        out = path.rstrip("/\\") + ".pt"
        return (f"path={path} is a HuggingFace folder, not a seqkit checkpoint: seqkit-import it first "
                f"(seqkit-import path={path} output={out}), then pass path={out}")
    if own:
        return (f"path={path} is a folder: name a checkpoint file in it, e.g. "
                f"path={os.path.join(path, os.path.basename(own[0]))}")
    if "preprocess.json" in names:
        return (f"path={path} is a data folder written by seqkit-preprocess: pass it as task.data= and a "
                "checkpoint as path=")
    return f"path={path} is a folder, not a checkpoint file (a .pt file written by seqkit-train or seqkit-import)"


def epoch_checkpoints(save_dir: str) -> List[str]:
    """``checkpointN.pt`` files, newest epoch first."""
    found = []
    for p in glob.glob(os.path.join(save_dir, "checkpoint*.pt")):
        m = re.fullmatch(r"checkpoint(\d+)\.pt", os.path.basename(p))
        if m:
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found, reverse=True)]


def load_latest(save_dir: str) -> Optional[Dict[str, Any]]:
    """The newest usable checkpoint in ``save_dir`` (checkpoint_last, else the newest good epoch
    checkpoint), or None when there is none. Corrupt files are reported and passed over."""
    candidates = [os.path.join(save_dir, "checkpoint_last.pt")] + epoch_checkpoints(save_dir)
    candidates = [p for p in candidates if os.path.isfile(p)]
    for path in candidates:
        try:
            state = load(path)
        except SeqkitError as e:
            log.warning("%s; trying an older checkpoint", e)
            continue
        log.info("resuming from %s", path)
        state["_path"] = path
        return state
    if candidates:
        raise SeqkitError(f"no usable checkpoint in {save_dir}: all of {len(candidates)} are corrupt")
    return None


def prune_epoch_checkpoints(save_dir: str, keep_last: int) -> None:
    if keep_last < 0:
        return
    for path in epoch_checkpoints(save_dir)[keep_last:]:
        os.remove(path)


def rng_state() -> Dict[str, Any]:
    state: Dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ------------------------------------------------------------------------- a trained model back


def unique_tensors(state_dict: Dict[str, torch.Tensor]) -> List[torch.Tensor]:
    """Each tensor of a saved model once: a tied table (``share_all_embeddings``, a tied output
    matrix) is saved under two or three names sharing one storage; ``_float_tensor`` buffers hold
    no parameter. For counting parameters and weights of a checkpoint."""
    return list({t.untyped_storage().data_ptr(): t for k, t in state_dict.items()
                 if not k.endswith("_float_tensor")}.values())


def saved_keys(model: torch.nn.Module) -> Optional[Set[str]]:
    """The state entries a checkpoint of ``model`` holds: None for all of them, or the set a
    parameter-efficient model names (its ``checkpoint_keys()``, see :mod:`seqkit.models.pretrained`)."""
    own = getattr(model, "checkpoint_keys", None)
    return own() if callable(own) else None


def check_resumed_model(saved: Dict[str, Any], now: Dict[str, Any], where: str) -> None:
    """Refuse to resume ``where``, whose model settings are ``saved``, with this run's ``now`` when
    they differ; ``init_from`` (read on a fresh start only) is the same when both name one file."""
    diff = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
    first, given = saved.get("init_from") or "", now.get("init_from") or ""
    if "init_from" in diff and first and given and os.path.realpath(first) == os.path.realpath(given):
        diff.remove("init_from")
    if not diff:
        return
    if "base_sha256" in diff:  # a parameter-efficient run resumed over another pretrained checkpoint
        raise SeqkitError(f"{now.get('path')} is not the base this run was trained from (its sha256 "
                          f"{now['base_sha256'][:12]}... differs from the recorded {saved.get('base_sha256', '')[:12]}...)")
    if diff == ["init_from"]:
        raise SeqkitError(f"{where} was started from model.init_from={first or '(none)'}, not {given or '(none)'}: a "
                          "resumed run takes its weights from its checkpoint; give the first run's model.init_from, "
                          "or another checkpoint.save_dir (or checkpoint.reset=true) to start from the new one")
    raise SeqkitError(f"{where} holds a different model (differs in: {', '.join(diff)}); "
                      "use another checkpoint.save_dir or checkpoint.reset=true")


def check_saved_keys(keep: Optional[Set[str]], state: Dict[str, torch.Tensor], where: str) -> None:
    """A parameter-efficient model's checkpoint must hold exactly the entries it trains."""
    if keep is None or set(state) == keep:
        return
    missing, extra = sorted(keep - set(state)), sorted(set(state) - keep)
    raise SeqkitError(f"{where} does not fit this model: " + "; ".join(
        f"{what} {', '.join(keys[:3])}{' ...' if len(keys) > 3 else ''}"
        for what, keys in (("missing", missing), ("unexpected", extra)) if keys))


def load_for_inference(path: str, task_overrides: Optional[Dict[str, Any]] = None,
                       state: Optional[Dict[str, Any]] = None) -> Tuple[Any, torch.nn.Module]:
    """``(task, model)`` from ``path``: the task from the checkpoint's task state (dictionaries,
    labels, tokenizer), the model from its config and weights, on CPU. ``task_overrides`` changes
    task config fields (e.g. ``data`` to locate binarized splits); ``state``: the checkpoint
    already read from ``path``. Task and model are built through the registries, so this module
    imports no task or model (``import_builtin_components`` fills the registries)."""
    if state is None:
        state = load(path)
    task = task_for_inference(state, task_overrides)
    return task, model_for_inference(path, state, task)


def task_for_inference(state: Dict[str, Any], task_overrides: Optional[Dict[str, Any]] = None) -> Any:
    """The task a checkpoint's ``state`` describes (the run's plugins imported first), without its
    model: what a command checks the checkpoint's kind on before building anything heavier."""
    import seqkit

    seqkit.import_builtin_components()
    cfg = state["cfg"]
    user_dir = cfg.get("common", {}).get("user_dir")
    if user_dir and os.path.isdir(user_dir):  # the run's plugins, as fairseq re-imports them
        from seqkit.core.plugins import import_user_dir

        import_user_dir(user_dir)
    task_values = {**cfg["task"], **(task_overrides or {})}
    return TASKS.build(TASKS.make_config(task_values), state["task_state"])


def model_for_inference(path: str, state: Dict[str, Any], task: Any) -> torch.nn.Module:
    """The model of checkpoint ``path`` (``state``, already read), built by its ``task``, with its weights."""
    cfg = state["cfg"]
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
    return model
