"""A HuggingFace ``tokenizers`` tokenizer used as it is (byte-level BPE, WordPiece, sentencepiece
models converted to ``tokenizer.json``): what an imported HuggingFace model was trained with, so
seqkit splits text exactly as ``AutoTokenizer`` does.

seqkit does not learn these: ``tokenizer.path`` names a ``tokenizer.json`` (or a folder holding
one); ``seqkit-import`` puts the model's own into the checkpoint. The JSON travels inside the state
dict, like sentencepiece's proto. Pieces are the tokenizer's tokens without the special tokens its
post-processor adds ([CLS], [SEP], <s>, </s>): the task adds seqkit's own, which an imported
dictionary maps onto those.

The ``tokenizers`` library comes with the optional extra ``seqkit[hf]``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence

from seqkit.core.config import arg, to_plain
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import TOKENIZERS
from seqkit.tokenizers.base import Tokenizer


def import_tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise SeqkitError("the HuggingFace tokenizers library is not installed: pip install 'seqkit[hf]'") from None
    return tokenizers


@dataclass
class HFTokenizerConfig:
    name: str = arg("huggingface", "registry name")
    path: str = arg("", "a tokenizer.json, or a folder holding one, used as it is (seqkit does not learn one)")


@TOKENIZERS.register("huggingface", HFTokenizerConfig)
class HFTokenizer(Tokenizer):
    """``encode`` -> the tokenizer's tokens (no added specials); ``decode`` -> its own decoder's text."""

    def __init__(self, cfg: Any):
        super().__init__(cfg)
        self.json: str = ""
        self._tok: Any = None

    def train(self, files: Sequence[str], work_dir: str) -> None:
        path = self.cfg.path
        if os.path.isdir(path):
            path = os.path.join(path, "tokenizer.json")
        if not path or not os.path.isfile(path):
            raise SeqkitError(f"tokenizer=huggingface takes a trained tokenizer: tokenizer.path={self.cfg.path!r} "
                              "is not a tokenizer.json or a folder holding one")
        with open(path, encoding="utf-8") as f:
            self.load_json(f.read(), path)

    def load_json(self, text: str, where: str = "tokenizer.json") -> None:
        tokenizers = import_tokenizers()
        try:
            self._tok = tokenizers.Tokenizer.from_str(text)
        except Exception as e:  # the library raises its own exception types
            raise SeqkitError(f"{where}: not a tokenizer the tokenizers library reads ({str(e).splitlines()[0]})") from None
        self.json = text

    def encode(self, line: str) -> List[str]:
        return self._tok.encode(line, add_special_tokens=False).tokens

    def decode(self, pieces: Sequence[str]) -> str:
        ids = [self._tok.token_to_id(p) for p in pieces]
        return self._tok.decode([i for i in ids if i is not None], skip_special_tokens=True)

    def vocabulary(self) -> List[str]:
        """Every token by id (added ones included); None where an id has no token."""
        vocab = self._tok.get_vocab(with_added_tokens=True)
        out: List[str] = [None] * (max(vocab.values()) + 1 if vocab else 0)  # type: ignore[list-item]
        for token, i in vocab.items():
            out[i] = token
        return out

    def state_dict(self) -> Dict[str, Any]:
        return {"config": to_plain(self.cfg), "json": self.json}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.load_json(state["json"])
