"""Subword tokenizers: sentencepiece (bpe, unigram), wordpiece, characters, plain whitespace splitting, and a
HuggingFace tokenizer.json used as it is (imported models).

Every tokenizer follows :class:`seqkit.tokenizers.base.Tokenizer`: ``train`` on text files,
``encode`` a line to pieces, ``decode`` pieces to a line, and a plain ``state_dict`` that
checkpoints embed so a checkpoint alone can translate raw text.
"""

from __future__ import annotations

from typing import Any, Dict

from seqkit.core.errors import SeqkitError
from seqkit.core.registry import TOKENIZERS
from seqkit.tokenizers import char, huggingface, sentencepiece, space, wordpiece  # noqa: F401  (registers them)
from seqkit.tokenizers.base import Tokenizer


def load_tokenizer(state: Dict[str, Any] | str) -> Tokenizer:
    """Rebuild a tokenizer from its ``state_dict`` (or a ``.pt`` file holding one)."""
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
