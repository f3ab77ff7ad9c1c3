"""Helpers for the typed dataclass configs every component declares."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict


def arg(default: Any = dataclasses.MISSING, help: str = "", factory: Callable | None = None) -> Any:
    """A dataclass field with a one-line doc (shown by ``--help``)."""
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


def field_help(cls: type) -> Dict[str, str]:
    """Doc line of every field of a dataclass."""
    return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(cls)}


def to_plain(cfg: Any) -> Any:
    """A dataclass, DictConfig or container as plain dicts/lists (what checkpoints store)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(cfg, (DictConfig, ListConfig)):
            return OmegaConf.to_container(cfg, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf ships with hydra, a dependency
        pass
    if dataclasses.is_dataclass(cfg):
        return {f.name: to_plain(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, dict):
        return {k: to_plain(v) for k, v in cfg.items()}
    if isinstance(cfg, (list, tuple)):
        return [to_plain(v) for v in cfg]
    return cfg


def from_plain(cls: type, values: Any) -> Any:
    """Build dataclass ``cls`` from plain values, recursing into dataclass-typed fields."""
    if values is None or dataclasses.is_dataclass(values):
        return values
    if not isinstance(values, dict):
        values = to_plain(values)
    kwargs = {}
    types = {f.name: f.type for f in dataclasses.fields(cls)}
    hints = _resolved_hints(cls)
    for key, val in values.items():
        if key not in types:
            continue
        sub = hints.get(key)
        if dataclasses.is_dataclass(sub) and isinstance(val, dict):
            val = from_plain(sub, val)
        kwargs[key] = val
    return cls(**kwargs)


def _resolved_hints(cls: type) -> Dict[str, Any]:
    import typing

    try:
        return typing.get_type_hints(cls)
    except Exception:  # forward refs that cannot resolve: treat fields as plain values
        return {}
