"""The tokenizer interface and loading from a saved state."""

from __future__ import annotations

import abc
from typing import Any, Dict, List, Sequence

from seqkit.errors import SeqkitError
from seqkit.registry import TOKENIZERS


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


def load_tokenizer(state: Dict[str, Any] | str) -> Tokenizer:
    """Rebuild a tokenizer from its ``state_dict`` (or a ``.pt`` file holding one)."""
    import seqkit.tokenizers  # noqa: F401  (registers the built-in tokenizers)

    if isinstance(state, str):
        import torch

        try:
            state = torch.load(state, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise SeqkitError(f"tokenizer file not found: {state}") from None
    cfg = TOKENIZERS.make_config(state["config"])
    tok = TOKENIZERS.build(cfg)
    tok.load_state_dict(state)
    return tok
