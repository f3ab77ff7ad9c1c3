"""One small generic registry for every pluggable component.

A component is a builder (usually a class) plus a typed dataclass config whose ``name`` field
holds the registry name. Presets are extra named configs of a component (``transformer_small`` is
a ``TransformerConfig`` with some fields changed); they become options of the component's hydra
config group next to the component's own default config.

    MODELS = Registry("model")

    @MODELS.register("transformer", TransformerConfig)
    class TransformerModel: ...

    @MODELS.preset("transformer_small")
    def transformer_small() -> TransformerConfig: ...
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict

from seqkit.core.config import check_keys, check_ranges, from_plain
from seqkit.core.errors import SeqkitError


class Registry:
    """Maps names to (builder, config class) and preset names to config factories."""

    def __init__(self, kind: str):
        self.kind = kind
        self._builders: Dict[str, Callable] = {}
        self._configs: Dict[str, type] = {}
        self._presets: Dict[str, Callable[[], Any]] = {}

    def register(self, name: str, config_cls: type) -> Callable:
        """Decorator: register ``builder`` under ``name`` with its dataclass ``config_cls``."""
        if not dataclasses.is_dataclass(config_cls):
            raise TypeError(f"{self.kind} {name!r}: config must be a dataclass")
        if getattr(config_cls(), "name", None) != name:
            raise TypeError(f"{self.kind} {name!r}: {config_cls.__name__}.name must default to {name!r}")

        def wrap(builder: Callable) -> Callable:
            if name in self._builders or name in self._presets:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._builders[name] = builder
            self._configs[name] = config_cls
            return builder

        return wrap

    def preset(self, name: str) -> Callable:
        """Decorator: register a function returning a config instance as a named preset."""

        def wrap(fn: Callable[[], Any]) -> Callable[[], Any]:
            if name in self._builders or name in self._presets:
                raise ValueError(f"{self.kind} preset {name!r} is already registered")
            self._presets[name] = fn
            return fn

        return wrap

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is a registered component (presets excluded)."""
        return name in self._builders

    def choices(self) -> Dict[str, Any]:
        """Every selectable config: each component's defaults and each preset, by option name."""
        out = {name: cls() for name, cls in self._configs.items()}
        out.update({name: fn() for name, fn in self._presets.items()})
        return dict(sorted(out.items()))

    def config_class(self, name: str) -> type:
        if name not in self._configs:
            valid = ", ".join(sorted(self._configs))
            raise SeqkitError(f"unknown {self.kind} {name!r}; valid: {valid}")
        return self._configs[name]

    def builder(self, name: str) -> Callable:
        """The builder (usually a class) registered as component ``name`` (not a preset name)."""
        self.config_class(name)  # raises the listing error
        return self._builders[name]

    def make_config(self, values: Dict[str, Any]) -> Any:
        """Typed config from a plain dict (e.g. a checkpoint's); unknown keys and values out of
        their range are errors."""
        cls = self.config_class(values.get("name", ""))
        check_keys(cls, values, self.kind)
        cfg = from_plain(cls, values)  # nested settings (a model's ``lora``) become their dataclasses
        check_ranges(cfg, f"{self.kind}.")
        return cfg

    def build(self, cfg: Any, *args: Any, **kwargs: Any) -> Any:
        """Build the component that ``cfg.name`` names, passing ``cfg`` first."""
        if cfg.name not in self._builders:
            self.config_class(cfg.name)  # raises the listing error
        return self._builders[cfg.name](cfg, *args, **kwargs)


TASKS = Registry("task")
MODELS = Registry("model")
CRITERIA = Registry("criterion")
OPTIMIZERS = Registry("optimizer")
LR_SCHEDULERS = Registry("lr_scheduler")
TOKENIZERS = Registry("tokenizer")

# hydra config group name -> registry; the order is the order of the defaults list.
GROUPS: Dict[str, Registry] = {
    "task": TASKS,
    "model": MODELS,
    "criterion": CRITERIA,
    "optimizer": OPTIMIZERS,
    "lr_scheduler": LR_SCHEDULERS,
    "tokenizer": TOKENIZERS,
}
