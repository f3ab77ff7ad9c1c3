"""Generation: beam search, greedy search and sampling over an encoder-decoder model.

``SequenceGenerator(tgt_dict, GenerationConfig(...)).generate(model, src_tokens, src_lengths)``
returns, per input sentence, up to ``nbest`` hypotheses (best first) as dicts with ``tokens``
(ending in eos), ``score`` and ``positional_scores`` (natural log). See :mod:`.search`.

The search names are imported on first use (PEP 562), so ``seqkit.generation.config`` and the
CTranslate2 path load without torch.
"""

from typing import Any

from seqkit.generation.config import GenerationConfig, check_generation_config

_SEARCH = ("Hypothesis", "SequenceGenerator", "Specials", "ban_repeated_ngrams")

__all__ = ["GenerationConfig", "check_generation_config", *_SEARCH]


def __getattr__(name: str) -> Any:
    if name in _SEARCH:
        from seqkit.generation import search

        return getattr(search, name)
    raise AttributeError(f"module 'seqkit.generation' has no attribute {name!r}")
