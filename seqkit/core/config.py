"""Helpers for the typed dataclass configs every component declares (:func:`arg`, range checks,
plain-data conversion), and :class:`CommonConfig`, the settings every command that runs a model shares."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional

from seqkit.core.errors import SeqkitError


def arg(default: Any = dataclasses.MISSING, help: str = "", factory: Callable | None = None, *,
        ge: float | None = None, gt: float | None = None, le: float | None = None, lt: float | None = None,
        choices: tuple | None = None) -> Any:
    """A dataclass field with a one-line doc (shown by ``--help``) and optional range checks.

    ``ge``/``gt``/``le``/``lt`` bound a number (``ge=0, lt=1`` is [0, 1)); ``choices`` lists the
    allowed values. They are kept in the field's metadata and checked where the config is built.
    """
    meta: Dict[str, Any] = {"help": help}
    for key, val in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt), ("choices", choices)):
        if val is not None:
            meta[key] = tuple(val) if key == "choices" else val
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def describe_range(field: dataclasses.Field) -> str:
    """A field's allowed values in words: ``> 0``, ``in [0, 1)``, ``one of: relu, gelu``; "" if unbounded."""
    m = field.metadata
    if "choices" in m:
        return "one of: " + ", ".join(str(c) for c in m["choices"])
    low = f"[{m['ge']}" if "ge" in m else f"({m['gt']}" if "gt" in m else None
    high = f"{m['le']}]" if "le" in m else f"{m['lt']})" if "lt" in m else None
    if low and high:
        return f"in {low}, {high}"
    if low:
        return (">= " if low[0] == "[" else "> ") + low[1:]
    if high:
        return ("<= " if high[-1] == "]" else "< ") + high[:-1]
    return ""


def _in_range(value: Any, m: Any) -> bool:
    if "choices" in m:
        return value in m["choices"]
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return True  # hydra already checked the type; bounds are for numbers
    # written as "not below" etc. so that NaN fails every bound
    return not (("ge" in m and not value >= m["ge"]) or ("gt" in m and not value > m["gt"])
                or ("le" in m and not value <= m["le"]) or ("lt" in m and not value < m["lt"]))


def check_ranges(cfg: Any, prefix: str = "") -> None:
    """Raise ``SeqkitError`` for the first field of dataclass ``cfg`` (recursively) outside its
    ``arg(ge=, gt=, le=, lt=, choices=)`` range; list fields are checked element by element."""
    for f in dataclasses.fields(cfg):
        value, key = getattr(cfg, f.name), prefix + f.name
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_ranges(value, key + ".")
            continue
        rule = describe_range(f)
        if not rule or (value is None and f.default is None):
            continue
        items = [(f"{key}[{i}]", v) for i, v in enumerate(value)] if isinstance(value, (list, tuple)) else [(key, value)]
        for name, v in items:
            if v is None or not _in_range(v, f.metadata):
                if "choices" in f.metadata:
                    raise SeqkitError(f"{name}={v!r} is not valid; choose {rule}")
                raise SeqkitError(f"{name}={v!r} is out of range: must be {rule}")


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


def with_added_fields(saved: Dict[str, Any], cfg: Any) -> Dict[str, Any]:
    """A checkpoint's model config plus the fields ``cfg``'s class gained since it was written, at
    their defaults: a run from before a field existed (``model.embed_path``) resumes as it was."""
    if not dataclasses.is_dataclass(cfg):
        return saved
    out = dict(saved)
    for f in dataclasses.fields(cfg):
        if f.name not in out and f.default is not dataclasses.MISSING:
            out[f.name] = to_plain(f.default)
        elif f.name not in out and f.default_factory is not dataclasses.MISSING:
            out[f.name] = to_plain(f.default_factory())
    return out


def check_keys(cls: type, values: Dict[str, Any], where: str) -> None:
    """Raise ``SeqkitError`` for a key of ``values`` (or of a nested dict of a dataclass-typed
    field) that dataclass ``cls`` does not have, naming the valid ones."""
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise SeqkitError(f"unknown {where} config key(s) {', '.join(unknown)}; valid: {', '.join(sorted(fields))}")
    hints = _resolved_hints(cls)
    for key, val in values.items():
        if dataclasses.is_dataclass(hints.get(key)) and isinstance(val, dict):
            check_keys(hints[key], val, f"{where}.{key}")


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


@dataclasses.dataclass
class CommonConfig:
    """Settings every subcommand that runs a model shares (seqkit-train, seqkit-generate)."""

    seed: int = arg(1, "seed for parameters init, dropout and the batch order")
    precision: str = arg("fp32", "fp32, bf16 or fp16 (+ dynamic loss scaling, GPU): autocast, or weights in that dtype "
                                 "(common.param_dtype)",
                          choices=("fp32", "bf16", "fp16"))
    param_dtype: str = arg("auto", "seqkit-train: dtype the weights are held in; bf16/fp16 (= common.precision): no "
                                   "autocast, fp32 master weights and moments in the optimizer, few casts an update; "
                                   "auto: the precision's on a GPU when it is bf16/fp16, fp32 elsewhere (CPU: autocast)",
                           choices=("auto", "fp32", "bf16", "fp16"))
    fp16_init_loss_scale: float = arg(2.0**15, "fp16: initial loss scale", gt=0)
    fp16_scale_window: int = arg(2000, "fp16: good updates before the loss scale doubles", ge=1)
    fp16_min_loss_scale: float = arg(1e-4, "fp16: stop training when the loss scale falls below this", ge=0)
    device: str = arg("auto", "auto (cuda when available), cpu or cuda", choices=("auto", "cpu", "cuda"))
    threads: int = arg(0, "CPU threads for torch (0: torch's default)", ge=0)
    log_format: str = arg("auto", "auto (progress bar on a TTY, else simple), tqdm, simple or json",
                           choices=("auto", "tqdm", "simple", "json"))
    log_interval: int = arg(50, "updates between training log lines", ge=1)
    user_dir: Optional[str] = arg(None, "folder of plugin modules to import (they register components)")
    attention_kernels: str = arg("auto", "CUDA attention (scaled_dot_product_attention) backends, tried in this order: "
                                         "auto (flash, efficient, math; cuDNN off: it builds a plan for every new batch "
                                         "shape), torch (torch's own choice), or a comma list of flash, efficient, cudnn, "
                                         "math; the CPU's kernels are torch's whatever this says")
    compile: bool = arg(False, "seqkit-train: torch.compile the model and the loss into one graph (fewer kernel "
                               "launches on a GPU; under torchrun in pieces around DDP's/FSDP's hooks); shapes are "
                               "dynamic: the first update compiles (its time logged), batches of other shapes reuse "
                               "its graph (a criterion with state of its own: the model only); off until measured "
                               "faster on a GPU")
    compile_mode: str = arg("default", "seqkit-train with common.compile=true: torch.compile's mode; reduce-overhead "
                                       "adds CUDA graphs (one recorded per distinct input shapes: for batches of one "
                                       "shape, e.g. dataset.pack or a language model's fixed blocks with "
                                       "dataset.max_sentences), max-autotune also tunes its kernels",
                            choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"))
    tensorboard_logdir: Optional[str] = arg(None, "seqkit-train: also write logged train/valid scalars for "
                                                  "TensorBoard into DIR/train and DIR/valid (needs seqkit[tensorboard])")


def check_compile(common: CommonConfig, command: str) -> None:
    """Refuse, in one line, a compile setting ``command`` would ignore: ``common.compile`` outside
    seqkit-train (generation and scoring run eagerly), ``common.compile_mode`` without it."""
    mode = common.compile_mode
    if command != "seqkit-train" and (common.compile or mode != "default"):
        setting = "common.compile=true" if common.compile else f"common.compile_mode={mode}"
        raise SeqkitError(f"{setting}: {command} runs eagerly (common.compile is seqkit-train's); drop it")
    if mode != "default" and not common.compile:
        raise SeqkitError(f"common.compile_mode={mode} takes effect only with common.compile=true; set that, or drop "
                          "common.compile_mode")


def check_param_dtype(common: CommonConfig, command: str) -> None:
    """Refuse, in one line, ``common.param_dtype`` outside seqkit-train (generation casts its weights
    itself, from ``common.precision``)."""
    if command != "seqkit-train" and common.param_dtype != "auto":
        raise SeqkitError(f"common.param_dtype={common.param_dtype}: {command} casts the weights itself from "
                          "common.precision (common.param_dtype is seqkit-train's); drop it")
