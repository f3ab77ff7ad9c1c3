"""What every subcommand shares: config composition with hydra, ``--help``/``--cfg job``,
plugin import (``common.user_dir``), logging set-up and one-line errors.

A command line is a list of hydra overrides (``model=transformer_small optimizer.lr=7e-4``),
optionally preceded by ``--config FILE.yaml`` whose values are applied first. Every override is
checked against the typed schema before composing, so an unknown component or key fails with one
line naming the valid ones.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from seqkit.cli.names import fairseq_name, suggest
from seqkit.core.allocator import keep_freed_memory
from seqkit.core.config import check_ranges, describe_range
from seqkit.core.errors import SeqkitError
from seqkit.core.plugins import import_user_dir
from seqkit.core.registry import GROUPS
from seqkit.core.settings import set_given

log = logging.getLogger("seqkit")


def _split_override(text: str) -> Tuple[str, str]:
    if "=" not in text:
        raise SeqkitError(f"bad argument {text!r}: expected key=value (see --help)")
    key, value = text.split("=", 1)
    return key.lstrip("+~"), value


def yaml_value(value: Any) -> str:
    """A Python value as hydra override syntax."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(yaml_value(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def overrides_from_file(path: str) -> List[str]:
    """Turn an experiment YAML into overrides: ``model: {name: X, k: v}`` -> ``model=X model.k=v``."""
    from omegaconf import OmegaConf

    if not os.path.isfile(path):
        raise SeqkitError(f"config file not found: {path}")
    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception as e:  # yaml syntax errors come in many types
        raise SeqkitError(f"{path}: cannot parse YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise SeqkitError(f"{path}: expected a mapping at the top level")
    out: List[str] = []

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            out.append(f"{prefix}={yaml_value(node)}")

    for key, value in data.items():
        if key in GROUPS and isinstance(value, dict) and "name" in value:
            out.append(f"{key}={value.pop('name')}")
        elif key in GROUPS and isinstance(value, str):
            out.append(f"{key}={value}")
            continue
        walk(str(key), value)
    return out


def _group_defaults(config_name: str) -> Dict[str, str]:
    """The ``GROUP: OPTION`` entries of ``hydra_conf/<config_name>.yaml``'s defaults list."""
    from importlib.resources import files

    from omegaconf import OmegaConf

    text = files("seqkit.hydra_conf").joinpath(f"{config_name}.yaml").read_text(encoding="utf-8")
    out: Dict[str, str] = {}
    for entry in OmegaConf.to_container(OmegaConf.create(text)).get("defaults", []):
        if isinstance(entry, dict):
            out.update({k: v for k, v in entry.items() if k in GROUPS})
    return out


# the subcommand whose groups hydra's (process-wide) ConfigStore holds now
_store_holds: Optional[str] = None
_stored: Dict[Tuple[str, str], Any] = {}  # (group, option) -> the config node stored for it
# (command, schema, group overrides, group choices) -> the config hydra composed for them
_composed: Dict[Any, Any] = {}


class ConfigBuilder:
    """Composes one subcommand's config from its schema dataclass and the command line."""

    def __init__(self, config_name: str, schema: type):
        self.config_name = config_name
        self.schema = schema
        self.defaults = _group_defaults(config_name)  # group -> default option

    def _register(self, overrides: Optional[List[str]] = None) -> None:
        """Stores this command's schema and the group options hydra is to compose: those ``overrides``
        choose (each group's default otherwise), or every option when ``overrides`` is None. Storing
        one is a structured config built from its dataclass, and there are over a hundred: storing
        only the chosen ones takes a quarter of a second off every command's start-up."""
        from hydra.core.config_store import ConfigStore

        global _store_holds
        cs = ConfigStore.instance()
        if _store_holds != self.config_name:
            # hydra reads ``key=value`` as a group choice whenever a group ``key`` is stored, so another
            # command's group (train's ``task``) would break this command's field of that name
            # (preprocess's ``task=classification``) when both run in one process
            for group in GROUPS:
                cs.repo.pop(group, None)
            cs.store(name=f"{self.config_name}_schema", node=self.schema)
            _stored.clear()
            _store_holds = self.config_name
        for group in self.defaults:
            options = GROUPS[group].choices()
            names = list(options) if overrides is None else [self._group_choice(group, overrides)]
            for name in names:
                node = options.get(name)
                if node is not None and _stored.get((group, name)) is not node:  # a plugin may replace one
                    cs.store(group=group, name=name, node=node)
                    _stored[(group, name)] = node

    def _group_choice(self, group: str, overrides: List[str]) -> str:
        choice = self.defaults[group]
        for o in overrides:
            key, value = _split_override(o)
            if key == group:
                choice = value
        return choice

    def keys(self, overrides: List[str]) -> List[str]:
        """Every dotted key this command takes, with the group options ``overrides`` choose."""
        out: List[str] = []

        def walk(prefix: str, node: Any) -> None:
            for f in dataclasses.fields(node):
                sub = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
                if dataclasses.is_dataclass(sub):
                    walk(f"{prefix}{f.name}.", sub)
                else:
                    out.append(prefix + f.name)

        walk("", self.schema)
        for group in self.defaults:
            node = GROUPS[group].choices().get(self._group_choice(group, overrides))
            out.append(group)
            if node is not None:
                walk(f"{group}.", node)
        return out

    def check(self, overrides: List[str]) -> None:
        """Fail with one line on an unknown group option or key (with a "did you mean"), or a
        boolean setting that is not ``true`` or ``false``."""
        for o in overrides:
            key, value = _split_override(o)
            if key.startswith("hydra"):
                raise SeqkitError(f"{key}: hydra's own settings are not used by seqkit")
            parts = key.split(".")
            if parts[0] in self.defaults:
                group = parts[0]
                choice = self._group_choice(group, overrides)
                options = GROUPS[group].choices()
                if choice not in options:
                    raise SeqkitError(f"unknown {group} {choice!r}; valid: {', '.join(options)}")
                node: Any = options[choice]
                where = f"{group} {choice!r}"
            else:
                node, where = self.schema, self.config_name
            for depth, part in enumerate(parts[1:] if parts[0] in self.defaults else parts):
                if not dataclasses.is_dataclass(node):
                    raise SeqkitError(f"unknown config key {key!r}: {'.'.join(parts[:depth + 1])} has no fields"
                                      + suggest(key, self.keys(overrides)))
                fields = {f.name: f for f in dataclasses.fields(node)}
                if part not in fields:
                    raise SeqkitError(f"unknown config key {key!r}; valid keys of {where}: {', '.join(fields)}"
                                      + suggest(key, self.keys(overrides)))
                if fields[part].type in (bool, "bool") and value.strip().lower() not in ("true", "false"):
                    raise SeqkitError(f"{key}={value}: not a boolean; write {key}=true or {key}=false")
                sub = getattr(node, part) if not isinstance(node, type) else fields[part].default
                if sub is dataclasses.MISSING and fields[part].default_factory is not dataclasses.MISSING:
                    sub = fields[part].default_factory()
                node, where = sub, f"{where}.{part}"
            if dataclasses.is_dataclass(node) and parts[0] not in self.defaults:
                names = ", ".join(f.name for f in dataclasses.fields(node))
                raise SeqkitError(f"{key} is a group of settings, not one: set {key}.FIELD=value ({names})")

    def compose(self, overrides: List[str]) -> Any:
        """The composed config: hydra composes the defaults with the group choices (cached per
        command and choices: it is most of a command's start-up), then the other overrides are
        applied as hydra applies them, parsed by hydra's own override grammar."""
        import copy

        from omegaconf import OmegaConf

        self.check(overrides)
        if any(o.startswith(("+", "~")) for o in overrides):
            self._register()
            return self._hydra_compose(overrides)
        self._register(overrides)
        groups = [o for o in overrides if _split_override(o)[0] in self.defaults]
        key = (self.config_name, self.schema, tuple(groups),
               tuple(tuple(GROUPS[g].choices()) for g in self.defaults))  # a plugin may add choices
        if key not in _composed:
            _composed[key] = self._hydra_compose(groups)
        cfg = copy.deepcopy(_composed[key])
        rest = [o for o in overrides if o not in groups]
        try:
            from hydra.core.override_parser.overrides_parser import OverridesParser

            parsed = OverridesParser.create().parse_overrides(rest)
        except Exception as e:  # hydra's grammar errors
            raise SeqkitError(f"bad config: {str(e).splitlines()[0]}") from None
        for text, o in zip(rest, parsed):
            try:
                OmegaConf.update(cfg, o.key_or_group, o.value(), merge=True)
            except Exception as e:  # omegaconf's validation errors: the message hydra gives them
                raise SeqkitError(f"bad config: Error merging override {text}: {str(e).splitlines()[0]}") from None
        return cfg

    def _hydra_compose(self, overrides: List[str]) -> Any:
        from hydra import compose, initialize_config_module
        from hydra.core.global_hydra import GlobalHydra
        from omegaconf import OmegaConf

        GlobalHydra.instance().clear()
        try:
            with initialize_config_module(config_module="seqkit.hydra_conf", version_base="1.3"):
                cfg = compose(config_name=self.config_name, overrides=overrides)
        except Exception as e:  # hydra/omegaconf raise many types; all are config errors here
            msg = str(e).splitlines()[0]
            cause = e.__cause__
            if cause is not None and str(cause):
                msg += ": " + str(cause).splitlines()[0]
            raise SeqkitError(f"bad config: {msg}") from None
        OmegaConf.set_readonly(cfg, False)
        return cfg

    def help_text(self, prog: str) -> str:
        lines = [f"usage: {prog} [--config FILE.yaml] [--cfg job] [key=value ...]", ""]
        if self.defaults:
            lines.append("components (choose with GROUP=NAME, e.g. model=transformer_small):")
            for group, default in self.defaults.items():
                names = ", ".join(GROUPS[group].choices())
                lines.append(f"  {group:<13} default {default}; choices: {names}")
            lines.append("")
        lines.append("settings (key=value; a component's own fields as GROUP.FIELD=value, see --cfg job):")
        for f in dataclasses.fields(self.schema):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if dataclasses.is_dataclass(default):
                for sub in dataclasses.fields(default):
                    lines.append(f"  {f.name}.{sub.name:<28} {_doc(sub, getattr(default, sub.name))}")
            elif f.name not in self.defaults:
                lines.append(f"  {f.name:<30} {_doc(f, default)}")
        return "\n".join(lines)


def _doc(f: dataclasses.Field, default: Any) -> str:
    """A field's help line: ``doc [default]``, or ``doc [default; range]`` where it has one."""
    rule = describe_range(f)
    return f"{f.metadata.get('help', '')} [{default!r}{'; ' + rule if rule else ''}]"


def parse_argv(builder: ConfigBuilder, argv: Optional[List[str]], prog: str) -> Any:
    """argv -> composed DictConfig, range-checked; handles --help, --cfg job, --config FILE, common.user_dir."""
    from omegaconf import OmegaConf

    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        for a in args:
            if a.startswith("common.user_dir="):
                import_user_dir(a.split("=", 1)[1])
        print(builder.help_text(prog))
        raise SystemExit(0)
    show_cfg = False
    overrides: List[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--cfg", "-c"):
            if i + 1 >= len(args) or args[i + 1] != "job":
                raise SeqkitError("--cfg takes 'job'")
            show_cfg, i = True, i + 2
        elif a == "--config":
            if i + 1 >= len(args):
                raise SeqkitError("--config takes a YAML file")
            overrides.extend(overrides_from_file(args[i + 1]))
            i += 2
        elif a.startswith("--config="):
            overrides.extend(overrides_from_file(a.split("=", 1)[1]))
            i += 1
        elif a.startswith("-"):
            mapped = fairseq_name(a.split("=", 1)[0])
            hint = f" (fairseq's {a.split('=', 1)[0]} is {mapped if '=' in mapped else mapped + '=VALUE'})" if mapped else ""
            raise SeqkitError(f"unknown option {a!r}{hint}; options are --help, --cfg job, --config FILE; "
                              "settings are key=value")
        else:
            overrides.append(a)
            i += 1
    for o in overrides:
        key, value = _split_override(o)
        if key == "common.user_dir" and value not in ("", "null"):
            import_user_dir(value.strip("'\""))
    set_given(_split_override(o)[0] for o in overrides)
    cfg = builder.compose(overrides)
    try:
        typed = OmegaConf.to_object(cfg)
    except Exception as e:  # e.g. a mandatory value left unset
        raise SeqkitError(f"bad config: {str(e).splitlines()[0]}") from None
    check_ranges(typed)  # before any work: a bad value is one line, not a traceback from deep inside
    if show_cfg:
        print(OmegaConf.to_yaml(cfg), end="")
        raise SystemExit(0)
    return cfg


def setup_logging(rank: int = 0) -> None:
    level = logging.INFO if rank == 0 else logging.WARNING
    logging.basicConfig(
        level=level,
        format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        stream=sys.stderr,
        force=True,
    )


def run_main(prog: str, fn: Callable[[], Any]) -> None:
    """Run ``fn``; a SeqkitError becomes one line on stderr and exit 1, Ctrl-C exit 130."""
    keep_freed_memory()
    try:
        try:
            fn()
        finally:
            set_given(())  # the keys were this command line's: a later Python caller starts with none
    except SeqkitError as e:
        rank = f" [rank {os.environ['RANK']}]" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else ""
        print(f"{prog}{rank}: error: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except BrokenPipeError:
        # e.g. `seqkit-generate ... | head`: the reader left; exit quietly
        sys.stderr.close()
        raise SystemExit(1) from None
