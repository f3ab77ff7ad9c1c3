"""A seqkit-trained tokenizer as a HuggingFace ``tokenizer.json`` over seqkit's dictionary, for
exported models: ``AutoTokenizer`` then gives the ids seqkit gives.

WordPiece: the ``tokenizers`` WordPiece model over seqkit's pieces (greedy longest match, as
seqkit's; whitespace words, as seqkit splits them).

Sentencepiece (BPE or unigram):
The model is rebuilt from the sentencepiece proto by ``transformers``' own converter
(``SpmConverter.build_tokenizer_from_spm_proto``: the normalizer spec, the dummy prefix, BPE merges
ranked by piece score as sentencepiece ranks them), with one change: the ids are seqkit's (its
four specials first, pieces by corpus frequency), not sentencepiece's. The specials stay
vocabulary entries, not added tokens, so a ``<unk>`` written in a text (WikiText has thousands) is
pieces, as sentencepiece reads it: exactly so with BPE, whose pieces come only from merges; a
unigram model's lattice can still match the entry's own spelling, which sentencepiece never does
(the one known difference). ``post`` chooses what ``AutoTokenizer`` wraps a text in: nothing (a
language model's
prompt), ``<s> a </s> (b </s>)`` (an encoder's, as seqkit's classification task does) or
``a </s>`` (a translation source).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Tuple

from seqkit.core.errors import SeqkitError
from seqkit.data.dictionary import BOS, EOS, PAD, UNK
from seqkit.hf.folder import require


def _merges(proto: Any) -> List[Tuple[str, str]]:
    """BPE merges from the proto's normal pieces, ranked by score then id (what sentencepiece does)."""
    normal = {p.piece: (p.score, i) for i, p in enumerate(proto.pieces) if p.type == 1}
    ranked = []
    for token, (score, i) in normal.items():
        for split in range(1, len(token)):
            left, right = token[:split], token[split:]
            if left in normal and right in normal:
                ranked.append((-score, i, left, right))
    return [(left, right) for _, _, left, right in sorted(ranked)]


def _wordpiece(tok: Any, dictionary: Any) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    hf = Tokenizer(models.WordPiece({s: i for i, s in enumerate(dictionary.symbols)}, unk_token=UNK,
                                    continuing_subword_prefix="##",
                                    max_input_chars_per_word=tok.cfg.max_input_chars_per_word))
    hf.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    hf.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    return hf


def tokenizer_files(tok: Any, dictionary: Any, post: str) -> Dict[str, str]:
    """``tokenizer.json`` and ``tokenizer_config.json`` for seqkit's sentencepiece or WordPiece
    tokenizer ``tok`` over ``dictionary`` (``post``: none, encoder or source)."""
    require("tokenizers")
    mask = ["<mask>"] if "<mask>" in dictionary.indices else []
    if getattr(tok, "model_proto", None):
        hf = _sentencepiece(tok, dictionary)
    else:
        hf = _wordpiece(tok, dictionary)
    # seqkit's specials are vocabulary entries, not added tokens: "<unk>" written in a text (WikiText
    # has thousands) is pieces to sentencepiece, and must stay so; a masked LM's <mask> is one token
    if mask:
        hf.add_special_tokens(mask)
    return _finish(hf, dictionary, post, mask)


def _sentencepiece(tok: Any, dictionary: Any) -> Any:
    convert = require("transformers.convert_slow_tokenizer")
    model_pb2 = convert.import_protobuf()
    proto = model_pb2.ModelProto()
    proto.ParseFromString(tok.model_proto)
    proto.trainer_spec.unk_id = dictionary.unk()  # seqkit's id of <unk>
    symbols = dictionary.symbols
    if proto.trainer_spec.model_type == 2:  # BPE: piece -> seqkit id, merges from sentencepiece's scores
        vocab: Any = {s: i for i, s in enumerate(symbols)}
        merges = _merges(proto)
    elif proto.trainer_spec.model_type == 1:  # unigram: (piece, score) at each seqkit id
        scores = {p.piece: p.score for p in proto.pieces if p.type in (1, 4)}  # normal and user-defined pieces
        floor = min(scores.values()) - 10.0  # symbols outside the model (specials, padding words): never chosen
        vocab, merges = [(s, scores.get(s, floor)) for s in symbols], None
    else:
        raise SeqkitError("only sentencepiece BPE and unigram models export as HuggingFace tokenizers")
    return convert.SpmConverter.build_tokenizer_from_spm_proto(proto, vocab, merges=merges)


def _finish(hf: Any, dictionary: Any, post: str, mask: List[str]) -> Dict[str, str]:
    from tokenizers import processors

    if post == "encoder":
        hf.post_processor = processors.TemplateProcessing(single=f"{BOS} $A {EOS}", pair=f"{BOS} $A {EOS} $B:1 {EOS}:1",
                                                          special_tokens=[(BOS, dictionary.bos()), (EOS, dictionary.eos())])
    elif post == "source":
        hf.post_processor = processors.TemplateProcessing(single=f"$A {EOS}", special_tokens=[(EOS, dictionary.eos())])
    # no unk_token here: transformers would add it as a token matched in the text (see above); the
    # model's own unknown piece still stands for unknown characters
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
              "pad_token": PAD, "model_max_length": 1000000000000000019884624838656,
              "clean_up_tokenization_spaces": False, **({"mask_token": "<mask>"} if mask else {})}
    return {"tokenizer.json": hf.to_str(), "tokenizer_config.json": json.dumps(config, indent=2) + "\n"}
