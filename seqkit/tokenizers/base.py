"""The tokenizer interface and loading from a saved state."""

from __future__ import annotations

import abc
from typing import Any, Dict, List, Sequence



class Tokenizer(abc.ABC):
    """Interface: learn from text files, text <-> pieces, and a plain-data state.

    Subclasses are registered with ``@TOKENIZERS.register(name, ConfigClass)`` and are built as
    ``cls(cfg)``; ``train`` (or ``load_state_dict``) must be called before ``encode``.
    """

    def __init__(self, cfg: Any):
        self.cfg = cfg

    @abc.abstractmethod
    def train(self, files: Sequence[str], work_dir: str) -> None:
        """Learn the subword model from UTF-8 text files (one sentence a line)."""

    @abc.abstractmethod
    def encode(self, line: str) -> List[str]:
        """One line of text -> its pieces."""

    @abc.abstractmethod
    def decode(self, pieces: Sequence[str]) -> str:
        """Pieces -> text; ``decode(encode(x))`` gives ``x`` back (whitespace normalized)."""

    @abc.abstractmethod
    def state_dict(self) -> Dict[str, Any]:
        """Plain data (str, bytes, lists, dicts) from which ``load_tokenizer`` rebuilds this."""

    @abc.abstractmethod
    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
