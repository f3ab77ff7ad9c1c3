"""Subword tokenizers: sentencepiece (bpe, unigram), wordpiece, and plain whitespace splitting.

Every tokenizer follows :class:`seqkit.tokenizers.base.Tokenizer`: ``train`` on text files,
``encode`` a line to pieces, ``decode`` pieces to a line, and a plain ``state_dict`` that
checkpoints embed so a checkpoint alone can translate raw text.
"""

from seqkit.tokenizers.base import Tokenizer, load_tokenizer  # noqa: F401
from seqkit.tokenizers import sentencepiece, space, wordpiece  # noqa: F401,E402  (registers them)
