"""Search settings of the sequence generator (fairseq's names where fairseq has one).

The CLI's top-level schema holds one of these as its ``generation`` field; greedy decoding is
``beam=1`` without sampling. The caller seeds torch for sampling, so no seed lives here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from seqkit.dataclass_utils import arg, check_ranges
from seqkit.errors import SeqkitError


@dataclass
class GenerationConfig:
    beam: int = arg(5, "beam size; with sampling, the number of independent samples per sentence", ge=1)
    nbest: int = arg(1, "hypotheses returned per sentence, best first (<= beam)", ge=1)
    max_len_a: float = arg(0.0, "max target length is max_len_a * source length + max_len_b", ge=0)
    max_len_b: int = arg(200, "max target length is max_len_a * source length + max_len_b", ge=0)
    min_len: int = arg(1, "minimum number of tokens before eos (eos excluded)", ge=0)
    lenpen: float = arg(1.0, "length penalty: score = sum of log-probs / length**lenpen (eos counts)")
    unkpen: float = arg(0.0, "subtracted from the unknown word's log-prob (>0 discourages <unk>)")
    no_repeat_ngram_size: int = arg(0, "forbid repeating any n-gram of this size (0 = off)", ge=0)
    sampling: bool = arg(False, "sample instead of beam search (beam = number of samples)")
    sampling_topk: int = arg(-1, "sample only from the k most likely tokens (-1 = off)", ge=-1)
    sampling_topp: float = arg(-1.0, "sample only from the fewest best tokens whose probability sums to >= p (-1 = off)",
                                 ge=-1, le=1)
    temperature: float = arg(1.0, "logits are divided by this before the softmax (<1 sharper, >1 flatter)", gt=0)
    print_alignment: bool = arg(False, "also keep each hypothesis' attention over the source and print "
                                       "fairseq's A- lines (srcpos-tgtpos of the most attended source token)")
    alignment_layer: Optional[int] = arg(None, "decoder layer whose attention gives alignments (None: the "
                                               "model's default: the Transformer's last layer, ConvS2S' mean)")


def check_generation_config(cfg: GenerationConfig) -> None:
    """Raise a one-line ``SeqkitError`` for settings the search cannot honour: each field's range
    (``arg(ge=...)``), then the rules that tie fields together."""
    check_ranges(cfg, "generation.")
    if not 1 <= cfg.nbest <= cfg.beam:
        raise SeqkitError(f"generation.nbest must be between 1 and beam ({cfg.beam}), got {cfg.nbest}")
    if cfg.sampling_topp != -1.0 and not 0.0 < cfg.sampling_topp <= 1.0:
        raise SeqkitError(f"generation.sampling_topp must be in (0, 1] or -1, got {cfg.sampling_topp}")
    if cfg.sampling_topk == 0 or cfg.sampling_topk < -1:
        raise SeqkitError(f"generation.sampling_topk must be >= 1 or -1, got {cfg.sampling_topk}")
    if (cfg.sampling_topk > 0 or cfg.sampling_topp > 0) and not cfg.sampling:
        raise SeqkitError("generation.sampling_topk/sampling_topp need generation.sampling=true")
