"""Reading and writing a HuggingFace model folder: ``config.json``, the weights (``model.safetensors``,
``pytorch_model.bin``, or shards listed in an ``*.index.json``), ``generation_config.json`` and the
tokenizer files. Writing stages the folder and renames it into place only when every file is
written (nothing half-written on an error).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Tuple

import torch

from seqkit.core.errors import SeqkitError
from seqkit.core.io import atomic_write_text, staged_dir

WEIGHTS = ("model.safetensors", "pytorch_model.bin")


def require(module: str) -> Any:
    """Import one of the ``seqkit[hf]`` extra's libraries, or say in one line how to get it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise SeqkitError(f"{module.split('.')[0]} is not installed: pip install 'seqkit[hf]'") from None


def read_json(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except FileNotFoundError:
        raise SeqkitError(f"{path} not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SeqkitError(f"{path}: not a JSON file ({e})") from None
    if not isinstance(value, dict):
        raise SeqkitError(f"{path}: expected a JSON object")
    return value


def read_config(folder: str) -> Dict[str, Any]:
    if not os.path.isdir(folder):
        raise SeqkitError(f"{folder} is not a folder (a HuggingFace model folder holds config.json and the weights)")
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise SeqkitError(f"{folder} has no config.json: not a HuggingFace model folder")
    return read_json(os.path.join(folder, "config.json"))


def _read_file(path: str) -> Dict[str, torch.Tensor]:
    if path.endswith(".safetensors"):
        safetensors_torch = require("safetensors.torch")
        try:
            return safetensors_torch.load_file(path)
        except Exception as e:  # the library's own error types
            raise SeqkitError(f"{path}: not a readable safetensors file ({str(e).splitlines()[0]})") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise SeqkitError(f"{path}: not a readable PyTorch weights file ({type(e).__name__})") from None
    if not isinstance(state, dict):
        raise SeqkitError(f"{path}: expected a dict of tensors")
    return state


def read_weights(folder: str) -> Dict[str, torch.Tensor]:
    """Every tensor of the folder's weights, by HF name (safetensors first, then the .bin)."""
    for name in WEIGHTS:
        index = os.path.join(folder, name + ".index.json")
        if os.path.isfile(index):
            files = sorted(set(read_json(index).get("weight_map", {}).values()))
            missing = [f for f in files if not os.path.isfile(os.path.join(folder, f))]
            if missing:
                raise SeqkitError(f"{index} lists {len(missing)} shard(s) that are not there: {', '.join(missing[:3])}")
            state: Dict[str, torch.Tensor] = {}
            for f in files:
                state.update(_read_file(os.path.join(folder, f)))
            return state
        if os.path.isfile(os.path.join(folder, name)):
            return _read_file(os.path.join(folder, name))
    raise SeqkitError(f"{folder} holds no weights (model.safetensors, pytorch_model.bin or a sharded index)")


def write_folder(output: str, config: Dict[str, Any], state: Dict[str, torch.Tensor], files: Dict[str, Any],
                 overwrite: bool = False, generation_config: Optional[Dict[str, Any]] = None,
                 subfolders: Optional[Dict[str, Tuple[Dict[str, Any], Dict[str, torch.Tensor]]]] = None) -> None:
    """Write ``config.json``, ``model.safetensors`` (``{"format": "pt"}`` metadata, every tensor
    contiguous and stored once), ``generation_config.json`` and ``files`` (name -> str (JSON/text)
    or bytes) into ``output``, atomically; each of ``subfolders`` (name -> (config, state)) gets
    its own config, weights and the same ``files`` (ELECTRA's generator)."""
    with staged_dir(output, overwrite=overwrite) as tmp:
        write_model(tmp, config, state, files, generation_config)
        for name, (sub_config, sub_state) in (subfolders or {}).items():
            os.makedirs(os.path.join(tmp, name))
            write_model(os.path.join(tmp, name), sub_config, sub_state, files, None)


def write_model(tmp: str, config: Dict[str, Any], state: Dict[str, torch.Tensor], files: Dict[str, Any],
                generation_config: Optional[Dict[str, Any]] = None) -> None:
    """One model's files into the (staged) folder ``tmp``."""
    safetensors_torch = require("safetensors.torch")
    atomic_write_text(os.path.join(tmp, "config.json"), json.dumps(config, indent=2, sort_keys=True) + "\n")
    if generation_config:
        atomic_write_text(os.path.join(tmp, "generation_config.json"),
                          json.dumps(generation_config, indent=2, sort_keys=True) + "\n")
    tensors = {k: v.detach().contiguous().clone() for k, v in state.items()}
    safetensors_torch.save_file(tensors, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    for name, content in files.items():
        path = os.path.join(tmp, name)
        if isinstance(content, bytes):
            with open(path, "wb") as f:
                f.write(content)
        else:
            atomic_write_text(path, content)
