"""Sentence encoders trained from a sentence's context: skip-thought (Kiros et al., 2015) and
quick-thought (Logeswaran & Lee, 2018); tasks in :mod:`seqkit.tasks.sentence_order`.

Shapes: B batch, S sentence length, T neighbour length, E embed_dim, H hidden_dim per direction,
D the encoder's vector (H, or 2H bidirectional), V vocabulary.

Both read a sentence with a GRU encoder (embeddings -> dropout -> uni- or bidirectional GRU over
packed sequences) whose final state(s) are the sentence's vector ``(B, D)`` (both directions side
by side: Kiros et al.'s bi-skip).

- ``skip_thought``: the encoder, and two decoders, one for the previous and one for the next
  sentence. A decoder is Kiros et al.'s conditional GRU: its gates read the sentence vector at
  every step besides the previous word (their ``C_z h_i``, ``C_r h_i``, ``C h_i`` terms are a GRU
  over ``[emb(w_{t-1}); h_i]``), starting from a zero state; teacher forced; the output is
  projected to E and scored against the shared word embeddings (tied), or by its own matrix.
  Its sentence vector: the encoder's.
- ``quick_thought``: two encoders ``f`` and ``g`` of the same shape with their own weights; the
  objective (:mod:`seqkit.criteria.sentence_vectors`) scores ``f(s) . g(c)`` for every candidate
  c. Its sentence vector is ``[f(s); g(s)]`` ``(B, 2D)``, as the paper uses both at test time.

Every model here offers ``sentence_vectors(src_tokens, src_lengths) -> (B, D)``, which
``seqkit-embed`` calls; a sentence is its pieces then ``</s>``, as the data folder's lines are.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.models.modules.dropout import dropout
from seqkit.models.rnn import _embedding


@dataclass
class SkipThoughtConfig:
    name: str = arg("skip_thought", "registry name")
    embed_dim: int = arg(620, "word embedding size E (shared by the encoder and both decoders)", gt=0)
    hidden_dim: int = arg(2400, "encoder GRU size per direction H", gt=0)
    bidirectional: bool = arg(False, "read the sentence both ways; the vector is both final states (2H)")
    decoder_hidden: int = arg(0, "decoder GRU size (0: the sentence vector's size D)", ge=0)
    dropout: float = arg(0.0, "dropout on the embeddings and the decoders' outputs", ge=0, lt=1)
    max_positions: int = arg(256, "longest sentence in tokens, eos included (the decoders read one more)", gt=0)
    share_decoder_input_output_embed: bool = arg(True, "score the decoders' outputs against the word embeddings "
                                                       "(false: an output matrix of their own)")


@dataclass
class QuickThoughtConfig:
    name: str = arg("quick_thought", "registry name")
    embed_dim: int = arg(300, "word embedding size E of each encoder", gt=0)
    hidden_dim: int = arg(1200, "GRU size per direction H of each encoder", gt=0)
    bidirectional: bool = arg(False, "read the sentence both ways; each encoder's vector is both final states")
    dropout: float = arg(0.0, "dropout on the embeddings", ge=0, lt=1)
    max_positions: int = arg(256, "longest sentence in tokens, eos included", gt=0)


@MODELS.preset("skip_thought_uni")
def skip_thought_uni() -> SkipThoughtConfig:
    """Kiros et al.'s uni-skip: embeddings 620, a 2400-unit GRU."""
    return SkipThoughtConfig()


@MODELS.preset("skip_thought_bi")
def skip_thought_bi() -> SkipThoughtConfig:
    """Kiros et al.'s bi-skip: 1200 units each way, a 2400-dimensional vector."""
    return dataclasses.replace(skip_thought_uni(), hidden_dim=1200, bidirectional=True)


@MODELS.preset("skip_thought_small")
def skip_thought_small() -> SkipThoughtConfig:
    """For WikiText-2 on one CPU or a small GPU budget: embeddings 256, a 512-unit GRU."""
    return dataclasses.replace(skip_thought_uni(), embed_dim=256, hidden_dim=512, dropout=0.1)


@MODELS.preset("skip_thought_tiny")
def skip_thought_tiny() -> SkipThoughtConfig:
    """For tests and smoke runs: embeddings 16, a GRU of 12 each way."""
    return dataclasses.replace(skip_thought_uni(), embed_dim=16, hidden_dim=12, bidirectional=True)


@MODELS.preset("quick_thought_small")
def quick_thought_small() -> QuickThoughtConfig:
    """For WikiText-2 on one CPU or a small GPU budget: two encoders of embeddings 256, GRU 512."""
    return dataclasses.replace(QuickThoughtConfig(), embed_dim=256, hidden_dim=512, dropout=0.1)


@MODELS.preset("quick_thought_tiny")
def quick_thought_tiny() -> QuickThoughtConfig:
    """For tests and smoke runs: embeddings 16, GRU 12."""
    return dataclasses.replace(QuickThoughtConfig(), embed_dim=16, hidden_dim=12)


class GRUSentenceEncoder(nn.Module):
    """Embeddings -> dropout -> GRU over packed sequences -> the final state(s) ``(B, D)``."""

    def __init__(self, vocab: int, pad: int, embed_dim: int, hidden_dim: int, bidirectional: bool, p: float):
        super().__init__()
        self.p = p
        self.embed = _embedding(vocab, embed_dim, pad)
        self.gru = nn.GRU(embed_dim, hidden_dim, batch_first=True, bidirectional=bidirectional)
        for w in self.gru.parameters():
            nn.init.uniform_(w, -0.1, 0.1)
        self.dim = hidden_dim * (2 if bidirectional else 1)

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> torch.Tensor:
        B = src_tokens.size(0)
        x = dropout(self.embed(src_tokens), self.p, self.training)  # (B, S, E)
        packed = pack_padded_sequence(x, src_lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, final = self.gru(packed)  # (dirs, B, H), padding never read
        return final.transpose(0, 1).reshape(B, self.dim)  # (B, D): forward state, then backward


class ConditionalGRUDecoder(nn.Module):
    """A GRU over ``[emb(w_{t-1}); v]``: every gate reads the sentence vector ``v`` ``(B, D)``."""

    def __init__(self, embed_dim: int, vector_dim: int, hidden_dim: int):
        super().__init__()
        self.gru = nn.GRU(embed_dim + vector_dim, hidden_dim, batch_first=True)
        for w in self.gru.parameters():
            nn.init.uniform_(w, -0.1, 0.1)

    def forward(self, emb: torch.Tensor, vector: torch.Tensor) -> torch.Tensor:
        """``emb`` ``(B, T, E)`` -> the states ``(B, T, H)``."""
        cond = vector.unsqueeze(1).expand(-1, emb.size(1), -1)  # (B, T, D)
        out, _ = self.gru(torch.cat([emb, cond], dim=2))
        return out


def check_length(src_tokens: torch.Tensor, limit: int) -> None:
    if src_tokens.size(1) > limit:
        raise SeqkitError(f"a sentence of {src_tokens.size(1)} tokens exceeds model.max_positions={limit}")


@MODELS.register("skip_thought", SkipThoughtConfig)
class SkipThoughtModel(nn.Module):
    """Encoder + previous-sentence and next-sentence decoders; ``forward`` -> logits ``(B, 2, T, V)``."""

    kind = "skip_thought"

    def __init__(self, cfg: SkipThoughtConfig, dictionary: Dictionary):
        super().__init__()
        self.cfg = cfg
        V, E = len(dictionary), cfg.embed_dim
        self.encoder = GRUSentenceEncoder(V, dictionary.pad(), E, cfg.hidden_dim, cfg.bidirectional, cfg.dropout)
        D = self.encoder.dim
        H = cfg.decoder_hidden or D
        self.decoders = nn.ModuleList(ConditionalGRUDecoder(E, D, H) for _ in ("prev", "next"))
        tied = cfg.share_decoder_input_output_embed
        self.out_dim_proj = nn.Linear(H, E, bias=False) if tied else None  # (.., H) -> (.., E), then . embeddings
        self.output_proj = None if tied else nn.Linear(H, V, bias=False)
        for lin in (self.out_dim_proj, self.output_proj):
            if lin is not None:
                nn.init.uniform_(lin.weight, -0.1, 0.1)

    def max_positions(self) -> Tuple[int, int]:
        return self.cfg.max_positions, self.cfg.max_positions + 1

    def sentence_vectors(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> torch.Tensor:
        """Right-padded sentences ``(B, S)`` -> their vectors ``(B, D)``."""
        check_length(src_tokens, self.cfg.max_positions)
        return self.encoder(src_tokens, src_lengths)

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                prev_output_tokens: torch.Tensor) -> torch.Tensor:
        """Centre sentences ``(B, S)`` and the neighbours' decoder inputs ``(B, 2, T)`` (previous,
        next) -> logits ``(B, 2, T, V)``."""
        v = self.sentence_vectors(src_tokens, src_lengths)  # (B, D)
        embed = self.encoder.embed
        outs = [dec(dropout(embed(prev_output_tokens[:, i]), self.cfg.dropout, self.training), v)
                for i, dec in enumerate(self.decoders)]  # 2 x (B, T, H)
        h = dropout(torch.stack(outs, dim=1), self.cfg.dropout, self.training)  # (B, 2, T, H)
        if self.output_proj is not None:
            return self.output_proj(h)
        return F.linear(self.out_dim_proj(h), embed.weight)  # (B, 2, T, V)


@MODELS.register("quick_thought", QuickThoughtConfig)
class QuickThoughtModel(nn.Module):
    """Encoders ``f`` (the sentence) and ``g`` (its candidates); ``forward`` -> both vectors."""

    kind = "quick_thought"

    def __init__(self, cfg: QuickThoughtConfig, dictionary: Dictionary):
        super().__init__()
        self.cfg = cfg
        V, pad = len(dictionary), dictionary.pad()
        self.f = GRUSentenceEncoder(V, pad, cfg.embed_dim, cfg.hidden_dim, cfg.bidirectional, cfg.dropout)
        self.g = GRUSentenceEncoder(V, pad, cfg.embed_dim, cfg.hidden_dim, cfg.bidirectional, cfg.dropout)

    def max_positions(self) -> Tuple[int, int]:
        return self.cfg.max_positions, self.cfg.max_positions

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Sentences ``(B, S)`` -> ``f`` and ``g`` vectors, ``(B, D)`` each."""
        check_length(src_tokens, self.cfg.max_positions)
        return {"f": self.f(src_tokens, src_lengths), "g": self.g(src_tokens, src_lengths)}

    def sentence_vectors(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> torch.Tensor:
        """Right-padded sentences ``(B, S)`` -> ``[f(s); g(s)]`` ``(B, 2D)``."""
        out = self(src_tokens, src_lengths)
        return torch.cat([out["f"], out["g"]], dim=1)
