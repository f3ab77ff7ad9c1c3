"""Whitespace splitting: no subwords, for pre-tokenized data and tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Sequence

from seqkit.core.config import arg, to_plain
from seqkit.core.registry import TOKENIZERS
from seqkit.tokenizers.base import Tokenizer


@dataclass
class SpaceConfig:
    name: str = arg("space", "registry name")


@TOKENIZERS.register("space", SpaceConfig)
class SpaceTokenizer(Tokenizer):
    """``encode`` splits on whitespace, ``decode`` joins with one space; nothing to learn."""

    def train(self, files: Sequence[str], work_dir: str) -> None:
        pass

    def encode(self, line: str) -> List[str]:
        return line.split()

    def decode(self, pieces: Sequence[str]) -> str:
        return " ".join(pieces)

    def state_dict(self) -> Dict[str, Any]:
        return {"config": to_plain(self.cfg)}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        pass
