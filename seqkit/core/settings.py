"""Used or refused: a setting a command is given and would not read is one line, never ignored.

The keys of a command line (``generation.beam=7``, and those of a ``--config`` file) are the
*given* settings; :func:`parse_argv` records them (:func:`given`). Once a command knows what it
is working on (a classification checkpoint, a language-model data folder...), it declares the
settings it reads for that kind as a :class:`Reads` and calls :func:`refuse_unread`, before it
writes anything:

    reads = Reads("seqkit-generate on a classification checkpoint", ("path", "task.data", "topk"))
    refuse_unread(given(), reads)       # generation.beam=7 -> "generation.beam: ... does not read it"

tests/test_settings_walk.py proves the declarations true: it sets each field of a command's
schema in turn and asserts that the command either refuses it in one line or reads it, as seen
by :class:`ReadLog`, which records the config fields seqkit's own code reads.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

from seqkit.core.errors import SeqkitError

_given: FrozenSet[str] = frozenset()


def set_given(keys: Iterable[str]) -> None:
    """Record the keys of the command line being run (called by :func:`seqkit.cli.common.parse_argv`)."""
    global _given
    _given = frozenset(keys)


def given() -> FrozenSet[str]:
    """The dotted keys the current command was given (group choices such as ``model=`` included)."""
    return _given


def was_given(key: str) -> bool:
    """Whether ``key`` (or a key under it) was on the command line, rather than left at its default."""
    return any(k == key or k.startswith(key + ".") for k in _given)


def user_set(cfg: Any, names: Iterable[str], prefix: str = "") -> List[str]:
    """``name=value`` of each of ``names`` (fields of dataclass ``cfg``, keys ``prefix + name``) a
    user set: given on the command line, even at its default value, or, for a config built in
    Python, holding another value than its default."""
    fields = {f.name: f for f in dataclasses.fields(cfg)}
    out = []
    for name in names:
        f, value = fields[name], getattr(cfg, name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if isinstance(default, list) and isinstance(value, str):  # text_columns=sentence is ["sentence"]
            value = [value]
        changed = value != default and not (default is None and value == "")
        if changed or was_given(prefix + name):
            if isinstance(value, bool):
                shown = str(value).lower()
            elif isinstance(value, (list, tuple)):
                shown = value[0] if len(value) == 1 else "[" + ",".join(map(str, value)) + "]"
            else:
                shown = value
            out.append(f"{name}={shown}")
    return out


@dataclasses.dataclass(frozen=True)
class Reads:
    """The settings one command reads for one kind of input."""

    who: str  # the command and what it works on: "seqkit-generate on a classification checkpoint"
    keys: Tuple[str, ...]  # dotted keys; a group's name ("generation") stands for all its fields
    why: Tuple[Tuple[str, str], ...] = ()  # (key, reason) pairs: the line's hint for a key not read

    def covers(self, key: str) -> bool:
        return any(key == k or key.startswith(k + ".") for k in self.keys)


def refuse_unread(keys: Iterable[str], reads: Reads) -> None:
    """Raise ``SeqkitError`` naming the first of ``keys`` that ``reads`` does not cover."""
    unread = sorted(k for k in keys if not reads.covers(k))
    if not unread:
        return
    key, hints = unread[0], dict(reads.why)
    hint = next((hints[k] for k in hints if key == k or key.startswith(k + ".")), "")
    more = f" (and {', '.join(unread[1:])})" if len(unread) > 1 else ""
    raise SeqkitError(f"{key}{more}: {reads.who} does not read it{'; ' + hint if hint else ''}; drop it")


# -- ReadLog: what the walking test uses to see which fields a command reads ---------------------------

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# generic walkers read every field; they are not a command reading a setting
_NOT_READS = frozenset({"to_plain", "from_plain", "check_ranges", "check_keys", "refuse_unread", "_resolved_hints"})


class ReadLog:
    """Records the dotted keys of a typed config that seqkit's code reads.

    :meth:`watch` gives every dataclass in the config tree a subclass whose attribute access
    notes the field, when the reading frame is in the seqkit package and is not a generic walker
    (:func:`seqkit.core.config.to_plain` and the like) or a ``refuse_*`` check. Copies made with
    ``dataclasses.replace`` keep recording under the same key.
    """

    def __init__(self, *code_dirs: str) -> None:
        # where seqkit's code lives: the package, and the folders given (cli/ of an editable checkout)
        self._roots = tuple(os.path.abspath(d) + os.sep for d in (_PACKAGE, *code_dirs))
        self.keys: Set[str] = set()
        self._classes: Dict[Tuple[type, str], type] = {}

    def watch(self, cfg: Any, prefix: str = "") -> Any:
        if not dataclasses.is_dataclass(cfg) or isinstance(cfg, type):
            return cfg
        for f in dataclasses.fields(cfg):
            self.watch(object.__getattribute__(cfg, f.name), f"{prefix}{f.name}.")
        cfg.__class__ = self._recording(type(cfg), prefix)
        return cfg

    def _recording(self, cls: type, prefix: str) -> type:
        if getattr(cls, "_read_log", None) is self:
            return cls
        if (cls, prefix) not in self._classes:
            names = frozenset(f.name for f in dataclasses.fields(cls))
            log = self

            def __getattribute__(obj: Any, name: str) -> Any:  # noqa: N807
                if name in names and _counts(sys._getframe(1), log._roots):
                    log.keys.add(prefix + name)
                return object.__getattribute__(obj, name)

            self._classes[(cls, prefix)] = type(cls.__name__, (cls,), {
                "__getattribute__": __getattribute__, "_read_log": self, "__module__": cls.__module__})
        return self._classes[(cls, prefix)]

    def read(self, key: str) -> bool:
        """Whether ``key`` (or a field under it) was read."""
        return any(k == key or k.startswith(key + ".") for k in self.keys)


def _counts(frame: Optional[Any], roots: Tuple[str, ...]) -> bool:
    code = frame.f_code if frame is not None else None
    if code is None or not code.co_filename.startswith(roots) or code.co_filename == __file__:
        return False
    return code.co_name not in _NOT_READS and not code.co_name.startswith("refuse_")
