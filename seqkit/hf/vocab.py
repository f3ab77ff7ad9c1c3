"""seqkit's dictionary over a HuggingFace vocabulary, and the row maps between the two.

A seqkit :class:`~seqkit.data.dictionary.Dictionary` keeps its four specials first (``<pad> <s>
</s> <unk>``); a HuggingFace vocabulary puts its own wherever its tokenizer did (BERT's [PAD] at 0
and [CLS] at 101, GPT-2's one ``<|endoftext|>`` at 50256). Importing maps each seqkit special onto
the HF token that plays its part (``specials``) and lists every other HF token after them in HF id
order, so ``hf_ids[i]`` is the HF id of seqkit symbol i. A special the HF model lacks (GPT-2 has no
pad, no unk and no separate bos) gets ``-1``: a zero embedding row and, in a model's output layer,
a logit of -inf (the model never predicts what its vocabulary lacks). Every HF id appears exactly
once, so weights go there and back bit for bit. A seqkit-trained model exported keeps its own ids
(``hf_ids[i] = i``).

Shapes: V seqkit symbols, W HuggingFace rows (the embedding's first dimension).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import torch

from seqkit.core.errors import SeqkitError
from seqkit.data.dictionary import BOS, EOS, PAD, UNK, Dictionary

SPECIALS = (PAD, BOS, EOS, UNK)


@dataclass
class VocabMap:
    dictionary: Dictionary
    hf_ids: List[int]  # (V,) HF id of each seqkit symbol, -1 for a seqkit special the HF vocabulary lacks
    hf_size: int  # W: rows of the HF embedding (may exceed the tokenizer's vocabulary: padded tables)

    @classmethod
    def from_hf(cls, tokens: Sequence[Optional[str]], hf_size: int, specials: Dict[str, str],
                rename: Optional[Dict[str, str]] = None, last: Sequence[str] = ()) -> "VocabMap":
        """``tokens``: the HF tokens by id (None: an id without a token); ``specials``: seqkit special
        -> the HF token playing it; ``rename``: HF token -> seqkit symbol (BERT's ``[MASK]`` ->
        ``<mask>``); ``last``: seqkit symbols put at the end (``<mask>``: seqkit's masking tasks keep
        it after the symbols they draw random replacements from). Ids past the tokens, up to
        ``hf_size``, become ``madeupwordNNNN`` symbols."""
        if len(tokens) > hf_size:
            raise SeqkitError(f"the tokenizer has {len(tokens)} tokens but the model's embedding only {hf_size} rows: "
                              "the vocabulary size disagrees with the embedding")
        index = {t: i for i, t in enumerate(tokens) if t is not None}
        for special, token in specials.items():
            if special not in SPECIALS:
                raise ValueError(f"{special} is not one of seqkit's specials")
            if token not in index:
                raise SeqkitError(f"the tokenizer has no {token!r} token (the model's {special})")
        taken = {index[t] for t in specials.values()}
        rename = rename or {}
        symbols, ids, filler = [], [], 0
        for i in range(hf_size):
            if i in taken:
                continue
            token = tokens[i] if i < len(tokens) else None
            while token is None or token in index and index[token] != i:  # a name no token has
                token, filler = f"madeupword{filler:04d}", filler + 1
            symbols.append(rename.get(token, token))
            ids.append(i)
        order = sorted(range(len(symbols)), key=lambda j: symbols[j] in last)  # stable: the rest keep HF order
        symbols, ids = [symbols[j] for j in order], [ids[j] for j in order]
        clash = sorted(set(symbols) & set(SPECIALS))
        if clash:
            raise SeqkitError(f"the vocabulary has {clash[0]!r} as an ordinary token: tell the importer which of "
                              "seqkit's specials it plays (seqkit-import "
                              f"specials=\"'{clash[0]}={clash[0]}'\" if it is seqkit's {clash[0]})")
        dictionary = Dictionary(symbols)
        if len(dictionary) != len(symbols) + len(SPECIALS):
            raise SeqkitError("the vocabulary lists a token twice")
        head = [index[specials[s]] if s in specials else -1 for s in SPECIALS]
        return cls(dictionary, head + ids, hf_size)

    @classmethod
    def identity(cls, dictionary: Dictionary) -> "VocabMap":
        """A seqkit dictionary as it is (export of a seqkit-trained model: HF ids = seqkit ids)."""
        return cls(dictionary, list(range(len(dictionary))), len(dictionary))

    @property
    def absent(self) -> torch.Tensor:
        """``(V,)`` True at the seqkit symbols the HF vocabulary lacks."""
        return torch.tensor(self.hf_ids) < 0

    def to_seqkit(self, rows: torch.Tensor) -> torch.Tensor:
        """HF rows ``(W, ...)`` -> seqkit rows ``(V, ...)``, zeros for the absent specials."""
        if rows.size(0) != self.hf_size:
            raise SeqkitError(f"a vocabulary table has {rows.size(0)} rows, the vocabulary {self.hf_size}")
        ids = torch.tensor(self.hf_ids)
        out = rows.new_zeros((len(self.hf_ids), *rows.shape[1:]))
        out[ids >= 0] = rows[ids[ids >= 0]]
        return out

    def to_hf(self, rows: torch.Tensor) -> torch.Tensor:
        """seqkit rows ``(V, ...)`` -> HF rows ``(W, ...)`` (the absent specials' rows dropped)."""
        ids = torch.tensor(self.hf_ids)
        out = rows.new_zeros((self.hf_size, *rows.shape[1:]))
        out[ids[ids >= 0]] = rows[ids >= 0]
        return out

    def hf_id(self, symbol: str) -> int:
        return self.hf_ids[self.dictionary.index(symbol)]

    def state_dict(self) -> Dict[str, Any]:
        return {"hf_ids": list(self.hf_ids), "hf_size": self.hf_size}

    @classmethod
    def from_state_dict(cls, dictionary: Dictionary, state: Dict[str, Any]) -> "VocabMap":
        if len(state["hf_ids"]) != len(dictionary):
            raise SeqkitError("the checkpoint's HuggingFace vocabulary map does not fit its dictionary")
        return cls(dictionary, list(state["hf_ids"]), int(state["hf_size"]))
