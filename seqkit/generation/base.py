"""What both translators share, without torch: a task's text side around a search engine.

:class:`~seqkit.generation.translator.Translator` searches with seqkit's own engine (any model);
:class:`~seqkit.generation.ct2_engine.CT2Translator` with CTranslate2 on an export. Both take
source ids and hand back hypotheses ``{"tokens", "score", "positional_scores"}`` (tensors from
seqkit's engine, lists from CTranslate2's), which this class turns into text.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from seqkit.core.errors import SeqkitError
from seqkit.generation.config import GenerationConfig
from seqkit.verify import VerifierConfig, verifier_config
from seqkit.verify.runner import VerifierPool, VerifyCounts


def hard_alignment(attention: Any) -> List[Tuple[int, int]]:
    """fairseq's hard alignment: for each target token but the final eos, the most attended source
    token, eos excluded -> ``(source position, target position)`` pairs. ``attention`` ``(T, S)``."""
    T, S = attention.shape
    if T < 2 or S < 2:
        return []
    best = attention[: T - 1, : S - 1].argmax(dim=1).tolist()  # (T-1,)
    return [(s, t) for t, s in enumerate(best)]


def as_list(values: Any) -> list:
    """A tensor's or a list's values as a plain list."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


@dataclass
class Verified:
    """What :meth:`TranslatorBase.translate_verified` returns: per sentence, in input order, the first
    hypothesis of the n-best its verifier accepted (``hypothesis_text``'s dict plus its ``rank``
    in the n-best, 0 = best) or None; and the counts ``seqkit-generate`` prints
    (``counts.summary()``: "verified N of M (T timed out, E raised)")."""

    hypotheses: List[Optional[Dict[str, Any]]]
    counts: VerifyCounts


def first_verified(pool: VerifierPool, sources: Sequence[str], nbests: Sequence[List[Dict[str, Any]]]
                   ) -> List[Optional[Dict[str, Any]]]:
    """Per source, the first of its n-best (``hypothesis_text`` dicts, best first) that ``pool``'s
    verifier accepts, with its ``rank``; None where none does."""
    verdicts = pool.first_verified([(src, [h["text"] for h in nbest]) for src, nbest in zip(sources, nbests)])
    return [None if v.rank is None else {**nbest[v.rank], "rank": v.rank} for v, nbest in zip(verdicts, nbests)]


class TranslatorBase(abc.ABC):
    """A task (dictionaries, tokenizer) and generation settings; subclasses search."""

    task: Any
    gen_cfg: GenerationConfig

    @abc.abstractmethod
    def max_source_positions(self) -> int:
        """The longest source (tokens, eos included) the model accepts."""

    @abc.abstractmethod
    def streams(self, batch_size: int = 64) -> int:
        """Batches searched at once for batches of ``batch_size`` (how many lines to read ahead)."""

    @abc.abstractmethod
    def generate_batches(self, sources: Sequence[List[int]], batch_size: int, max_tokens: int = 0,
                         first_id: int = 0) -> Iterator[Dict[str, Any]]:
        """Yield ``{"id": first_id + i, "hypos"}`` for each source (ids with eos), longest first."""

    def longest_first(self, sources: Sequence[List[int]], first_id: int = 0) -> List[int]:
        """Indices of ``sources``, longest first, after checking each fits the model."""
        max_src = self.max_source_positions()
        for i, s in enumerate(sources):
            if len(s) > max_src:
                raise SeqkitError(f"sentence {first_id + i} has {len(s)} tokens but the model accepts at most {max_src}")
        return sorted(range(len(sources)), key=lambda i: -len(sources[i]))

    def hypothesis_text(self, hypo: Dict[str, Any]) -> Dict[str, Any]:
        """Pieces, text, score and positional scores of a hypothesis; with print_alignment also its
        ``attention`` ``(len(pieces) + 1, S)`` (rows: target pieces, then eos; columns: source
        pieces, then eos) and the hard ``alignment`` pairs (source position, target position)."""
        pieces = self.task.pieces(hypo["tokens"])
        out = {"pieces": pieces, "text": self.task.detokenize(pieces), "score": float(hypo["score"]),
               "positional_scores": as_list(hypo["positional_scores"])}
        if "attention" in hypo:
            out["attention"] = hypo["attention"]
            out["alignment"] = hard_alignment(hypo["attention"])
        return out

    def translate(self, sentences: Iterable[str], batch_size: int = 64) -> List[str]:
        """Best translation of each sentence, in input order."""
        return [nbest[0]["text"] for nbest in self.translate_nbest(list(sentences), batch_size)]

    def translate_nbest(self, sentences: List[str], batch_size: int = 64) -> List[List[Dict[str, Any]]]:
        """``nbest`` hypotheses per sentence (pieces, text, score, positional scores), in input order."""
        sources = [self.task.encode_source(s) for s in sentences]
        out: List[List[Dict[str, Any]]] = [[] for _ in sources]
        for r in self.generate_batches(sources, batch_size):
            out[r["id"]] = [self.hypothesis_text(h) for h in r["hypos"]]
        return out

    def with_generation(self, **overrides: Any) -> "TranslatorBase":
        """This translator (model and task shared) searching with ``overrides`` of its generation settings."""
        raise SeqkitError(f"{type(self).__name__} keeps the generation settings it was built with: build it with "
                          f"{', '.join(f'{k}={v!r}' for k, v in overrides.items())}")

    def translate_verified(self, sentences: Iterable[str], verifier: Union[str, VerifierConfig, None] = None,
                           timeout: Optional[float] = None, workers: Optional[int] = None, batch_size: int = 64,
                           user_dir: str = "") -> Verified:
        """Per sentence, the first hypothesis of the whole beam (``nbest = beam``, as seqkit-generate
        searches with a verifier) that ``verifier`` accepts, and the counts; a check that hangs past
        ``timeout`` seconds or raises counts as not verified. ``verifier``, ``timeout``, ``workers``:
        a registered name or a config, seconds per check, worker processes (None: the translator's
        ``verifier``, ``verifier_timeout``, ``verifier_workers``; a name's verifier measures with the
        translator's ``verifier_model``); ``user_dir``: a plugin folder the
        workers import first (``common.user_dir``; by default they import the module, or plugin
        folder, that registered the verifier in this process). A language model's
        sentences are prompts and the hypotheses their continuations."""
        g = self.gen_cfg
        cfg = verifier_config(g.verifier if verifier is None else verifier,
                              "" if isinstance(verifier, VerifierConfig) else g.verifier_model)
        sentences = list(sentences)
        searcher = self if g.nbest == g.beam else self.with_generation(nbest=g.beam)
        with VerifierPool(cfg, g.verifier_timeout if timeout is None else timeout,
                          g.verifier_workers if workers is None else workers, user_dir) as pool:
            kept = first_verified(pool, sentences, searcher.translate_nbest(sentences, batch_size))
            return Verified(kept, pool.counts)
