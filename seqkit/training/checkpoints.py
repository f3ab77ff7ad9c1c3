"""Checkpoint files: plain tensors and dicts, written atomically, verified when read.

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
from typing import Any, Dict, List, Optional

import torch

from seqkit.errors import SeqkitError
from seqkit.io import atomic_write_bytes

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
    """Read and verify a checkpoint; a missing, truncated or foreign file is a SeqkitError."""
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
