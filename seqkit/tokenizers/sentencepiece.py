"""SentencePiece subwords (BPE or unigram), trained with the ``sentencepiece`` library.

The trained model travels as its serialized proto (``bytes``) inside the state dict, so a
checkpoint or ``tokenizer.LANG.pt`` loads under ``torch.load(weights_only=True)`` with no side file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from seqkit.core.config import arg, to_plain
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import TOKENIZERS
from seqkit.tokenizers.base import Tokenizer

SPACE = "\u2581"  # sentencepiece's visible space, "▁"


def without_paths(proto: bytes) -> bytes:
    """``proto`` (a trained model) without the temporary paths sentencepiece records in its trainer
    spec (``input``, ``model_prefix``): the same data and seed then save the same bytes, so two
    runs of seqkit-preprocess write the same ``tokenizer.*.pt``. Unchanged without protobuf (an
    optional part of sentencepiece)."""
    try:
        from sentencepiece import sentencepiece_model_pb2 as pb

        model = pb.ModelProto()
        model.ParseFromString(proto)
    except Exception:  # noqa: BLE001 - no protobuf: the paths stay, the pieces are the same
        return proto
    model.trainer_spec.ClearField("input")
    model.trainer_spec.ClearField("model_prefix")
    return model.SerializeToString(deterministic=True)


@dataclass
class SentencePieceConfig:
    name: str = arg("sentencepiece_bpe", "registry name (sentencepiece_bpe or sentencepiece_unigram)")
    vocab_size: int = arg(8000, "pieces in the model, <unk> included", gt=0)
    character_coverage: float = arg(1.0, "share of characters covered; the rarest rest map to <unk>", gt=0, le=1)
    max_sentence_length: int = arg(4192, "training lines longer than this many bytes are skipped", gt=0)
    input_sentence_size: int = arg(
        1_000_000, "seqkit-preprocess trains on a seeded sample of this many training pairs (line numbers; a "
                   "joined tokenizer reads both sides of each), in file order; 0 or a corpus no larger = every "
                   "line, as before. 1,000,000: sentencepiece's advice of about a million sentences; the trainer "
                   "then peaks near 0.6 GB, where a 2,000,000-pair sample took it to 1.03 GB "
                   "(benchmarks/results/2026-11-29_scale_sample2m.json)", ge=0)
    seed: int = arg(1, "random seed of the sample above and of sentencepiece's trainer")
    num_threads: int = arg(4, "training threads; part of the result for unigram, so fixed here", ge=1)
    normalization_rule_name: str = arg(
        "identity", "text normalization: identity keeps text exact (decode inverts encode), or nmt_nfkc",
        choices=("identity", "nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf"),
    )
    special_tokens: List[str] = arg(help="strings kept whole where a text spells them, the rest around them "
                                         "encoded apart (HuggingFace's added tokens: an imported Marian model's "
                                         "</s> <unk> <pad>)", factory=list)


@dataclass
class SentencePieceUnigramConfig(SentencePieceConfig):
    name: str = arg("sentencepiece_unigram", "registry name (sentencepiece_bpe or sentencepiece_unigram)")


class SentencePieceTokenizer(Tokenizer):
    """Pieces are sentencepiece's (a word starts with ``▁``); ``model_type`` comes from the name."""

    model_type = "bpe"

    def __init__(self, cfg: Any):
        super().__init__(cfg)
        self.model_proto: bytes | None = None
        self._sp = None

    def train(self, files: Sequence[str], work_dir: str) -> None:
        """Learn from every line of ``files``: they already hold the sample (seqkit-preprocess
        draws ``input_sentence_size`` pairs), so sentencepiece is told to read them all."""
        import sentencepiece as spm

        prefix = os.path.join(work_dir, "spm")
        spm.set_random_generator_seed(self.cfg.seed)
        try:
            spm.SentencePieceTrainer.train(
                input=list(files),
                model_prefix=prefix,
                model_type=self.model_type,
                vocab_size=self.cfg.vocab_size,
                character_coverage=self.cfg.character_coverage,
                max_sentence_length=self.cfg.max_sentence_length,
                input_sentence_size=0,  # the files are the sample
                shuffle_input_sentence=True,
                num_threads=self.cfg.num_threads,
                normalization_rule_name=self.cfg.normalization_rule_name,
                # only <unk>: bos/eos are the Dictionary's, not pieces of the text
                bos_id=-1,
                eos_id=-1,
                minloglevel=2,  # errors only: no per-step log spam on stderr
            )
        except RuntimeError as e:  # bad option or vocab_size too large for the data
            msg = str(e).splitlines()[0]
            msg = msg.split("] ", 1)[-1]  # drop the "INTERNAL: file.cc(744) [check]" prefix
            raise SeqkitError(f"{self.cfg.name}: training failed: {msg}") from None
        with open(prefix + ".model", "rb") as f:
            self._load(without_paths(f.read()))

    def _load(self, proto: bytes) -> None:
        import sentencepiece as spm

        self.model_proto = bytes(proto)
        self._sp = spm.SentencePieceProcessor(model_proto=self.model_proto)

    def _processor(self):
        if self._sp is None:
            raise RuntimeError("sentencepiece tokenizer used before train() or load_state_dict()")
        return self._sp

    def encode(self, line: str) -> List[str]:
        sp = self._processor()
        if not self.cfg.special_tokens:
            return sp.encode(line, out_type=str)
        pieces: List[str] = []
        for chunk in re.split("(" + "|".join(map(re.escape, self.cfg.special_tokens)) + ")", line):
            if chunk in self.cfg.special_tokens:
                pieces.append(chunk)
            elif chunk:
                pieces += sp.encode(chunk, out_type=str)
        return pieces

    def encode_ids(self, lines: Sequence[str]) -> Optional[List[List[int]]]:
        """Each line's piece ids in the model (:meth:`id_pieces`), in one call: what ``encode``
        gives, except that a piece the model lacks is ``unk_id`` instead of its surface text; None
        with ``special_tokens`` (``encode`` splits those out by hand)."""
        if self.cfg.special_tokens:
            return None
        return self._processor().encode(list(lines), out_type=int, num_threads=1)

    def words_apart(self) -> bool:
        """True when a line's :meth:`encode_ids` are those of its words (the line split at " ", empty
        words left out), each encoded alone, in order, so a caller may encode each word once: a BPE
        model with sentencepiece's defaults around spaces (identity normalization, spaces trimmed and
        collapsed into one ``▁`` starting each word, pieces split there) and no special or
        user-defined symbols; ``▁`` a piece, so a run of unknown characters never spans two words."""
        if self.cfg.special_tokens:
            return False
        try:
            from sentencepiece import sentencepiece_model_pb2 as pb

            model = pb.ModelProto()
            model.ParseFromString(self.model_proto or b"")
        except Exception:  # noqa: BLE001 - no protobuf (an optional part of sentencepiece): not known
            return False
        norm, spec, sp = model.normalizer_spec, model.trainer_spec, self._processor()
        return (norm.name == "identity" and not norm.precompiled_charsmap and norm.add_dummy_prefix
                and norm.remove_extra_whitespaces and norm.escape_whitespaces and spec.model_type == spec.BPE
                and spec.split_by_whitespace and not spec.treat_whitespace_as_suffix
                and not spec.allow_whitespace_only_pieces and not spec.user_defined_symbols
                and sp.piece_to_id(SPACE) != sp.unk_id())

    def id_pieces(self) -> List[str]:
        """Piece of every model id (``<unk>`` at ``unk_id``)."""
        sp = self._processor()
        return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]

    @property
    def unk_id(self) -> int:
        return self._processor().unk_id()

    def decode(self, pieces: Sequence[str]) -> str:
        # Joining by hand (as sentencepiece does for plain pieces) keeps pieces outside the model,
        # e.g. a character never seen in training, instead of turning them into " ⁇ ".
        return "".join(pieces).replace(SPACE, " ").strip()

    def vocab_pieces(self) -> List[str]:
        """Every piece ``encode`` can emit from the model (``<unk>`` and control pieces left out).

        BPE keeps intermediate merges that may never appear in the encoded training text but
        can in other text, so the dictionary includes them all.
        """
        sp = self._processor()
        n = sp.get_piece_size()
        return [sp.id_to_piece(i) for i in range(n) if not (sp.is_unknown(i) or sp.is_control(i))]

    def state_dict(self) -> Dict[str, Any]:
        self._processor()
        return {"config": to_plain(self.cfg), "model_proto": self.model_proto}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self._load(state["model_proto"])


@TOKENIZERS.register("sentencepiece_bpe", SentencePieceConfig)
class SentencePieceBPETokenizer(SentencePieceTokenizer):
    model_type = "bpe"


@TOKENIZERS.register("sentencepiece_unigram", SentencePieceUnigramConfig)
class SentencePieceUnigramTokenizer(SentencePieceTokenizer):
    model_type = "unigram"
