"""Generation: beam search, greedy search and sampling over an encoder-decoder model.

``SequenceGenerator(tgt_dict, GenerationConfig(...)).generate(model, src_tokens, src_lengths)``
returns, per input sentence, up to ``nbest`` hypotheses (best first) as dicts with ``tokens``
(ending in eos), ``score`` and ``positional_scores`` (natural log). See :mod:`.search`.
"""

from seqkit.generation.config import GenerationConfig, check_generation_config
from seqkit.generation.search import Hypothesis, SequenceGenerator, Specials, ban_repeated_ngrams

__all__ = [
    "GenerationConfig",
    "Hypothesis",
    "SequenceGenerator",
    "Specials",
    "ban_repeated_ngrams",
    "check_generation_config",
]
