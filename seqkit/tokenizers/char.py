"""Characters as pieces (Karpathy et al., 2015's character-level models): nothing to learn.

Every character of a line is a piece; whitespace becomes ``▁`` (U+2581, sentencepiece's space
mark), so a piece is never blank and a dictionary file stays one symbol a line. ``decode`` joins the
pieces and turns ``▁`` back into a space: ``decode(encode(x)) == x`` for text whose only whitespace
is single spaces (other whitespace reads back as spaces), and whose own ``▁`` would also read back
as a space.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Sequence

from seqkit.core.config import arg, to_plain
from seqkit.core.registry import TOKENIZERS
from seqkit.tokenizers.base import Tokenizer

SPACE = "\u2581"


@dataclass
class CharConfig:
    name: str = arg("char", "registry name")


@TOKENIZERS.register("char", CharConfig)
class CharTokenizer(Tokenizer):
    """``encode``: one piece per character, whitespace as ``▁``; ``decode``: the reverse."""

    def train(self, files: Sequence[str], work_dir: str) -> None:
        pass

    def encode(self, line: str) -> List[str]:
        return [SPACE if c.isspace() else c for c in line.strip()]

    def decode(self, pieces: Sequence[str]) -> str:
        return "".join(pieces).replace(SPACE, " ")

    def state_dict(self) -> Dict[str, Any]:
        return {"config": to_plain(self.cfg)}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        pass
