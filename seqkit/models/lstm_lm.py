"""LSTM language model (Zaremba et al., 2014; pytorch/examples' word_language_model) with presets.

tokens -> embedding E -> dropout -> L-layer LSTM of H units (dropout between layers) -> dropout ->
(linear H -> E when the output is tied and H != E) -> output layer (tied to the input embedding,
its own matrix, or an adaptive softmax, :mod:`seqkit.models.modules.lm_head`).

Each training block starts from a zero state (blocks are shuffled); evaluation gives a block its
left context through the task's ``context_window`` instead of carrying the state over.

``cell=gru`` or ``cell=rnn`` (Elman 1990: ``h_t = tanh(W x_t + U h_{t-1} + b)``, torch's ``nn.RNN``)
swaps the recurrent layers for the same sizes; the state is then ``h`` alone, no cell state ``c``.
The layers keep the attribute name ``lstm`` whatever the cell (checkpoints' keys, the analyses').

Shapes: B batch, T length, E embed_dim, H hidden_dim, L layers, V vocabulary.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from seqkit.core.config import arg
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.models.base import Cache, LanguageModel
from seqkit.models.modules.dropout import dropout
from seqkit.models.modules.lm_head import LMHead
from seqkit.models.modules.prefix import groups_by_prefix, insert_prefix, prefix_length, remove_prefix
from seqkit.models.modules.pretrained_embeddings import WordTable, embed_path_arg, freeze_embed_arg


@dataclass
class LSTMLMConfig:
    name: str = arg("lstm_lm", "registry name of the model family")
    cell: str = arg("lstm", "recurrent cell: lstm, gru or rnn (Elman's tanh RNN, h = tanh(W x + U h + b))",
                    choices=("lstm", "gru", "rnn"))
    embed_dim: int = arg(650, "token embedding dimension E", gt=0)
    hidden_dim: int = arg(650, "recurrent units per layer H", gt=0)
    layers: int = arg(2, "recurrent layers", ge=1)
    dropout: float = arg(0.5, "dropout on embeddings, between recurrent layers and before the output layer", ge=0, lt=1)
    share_input_output_embed: bool = arg(True, "the output layer is the input embedding's transpose (a linear "
                                               "H -> E first when H != E)")
    adaptive_softmax_cutoff: List[int] = arg(help="adaptive softmax cluster boundaries, e.g. [2000,10000] (empty: "
                                                  "full softmax; needs share_input_output_embed=false)", factory=list)
    adaptive_softmax_factor: float = arg(4.0, "each adaptive softmax tail cluster's dimension is the previous one's / this",
                                         gt=1)
    max_positions: int = arg(1 << 20, "longest input in tokens (an LSTM has no position table; a safety bound)", gt=0)
    embed_path: str = embed_path_arg()
    freeze_embed: bool = freeze_embed_arg()


@MODELS.preset("lstm_lm_medium")
def lstm_lm_medium() -> LSTMLMConfig:
    """Zaremba et al.'s medium model: 2 layers of 650, dropout 0.5, tied embeddings."""
    return LSTMLMConfig()


@MODELS.preset("lstm_lm_large")
def lstm_lm_large() -> LSTMLMConfig:
    """Zaremba et al.'s large model: 2 layers of 1500, dropout 0.65, tied embeddings."""
    return dataclasses.replace(lstm_lm_medium(), embed_dim=1500, hidden_dim=1500, dropout=0.65)


@MODELS.preset("lstm_lm_small")
def lstm_lm_small() -> LSTMLMConfig:
    """pytorch/examples' default: 2 layers of 200, embeddings 200, dropout 0.2, tied."""
    return dataclasses.replace(lstm_lm_medium(), embed_dim=200, hidden_dim=200, dropout=0.2)


@MODELS.preset("lstm_lm_tiny")
def lstm_lm_tiny() -> LSTMLMConfig:
    """For tests and CPU smoke runs: embeddings 16, 2 layers of 24 (projected to 16 for the tied output)."""
    return dataclasses.replace(lstm_lm_medium(), embed_dim=16, hidden_dim=24, dropout=0.1)


@MODELS.register("lstm_lm", LSTMLMConfig)
class LSTMLM(LanguageModel):
    """Multi-layer LSTM language model; ``build(cfg, dictionary)`` is the registry builder."""

    def __init__(self, cfg: LSTMLMConfig, dictionary: Dictionary):
        super().__init__()
        self.cfg = cfg
        E, H, V = cfg.embed_dim, cfg.hidden_dim, len(dictionary)
        self.pad = dictionary.pad()
        self.embed = nn.Embedding(V, E, padding_idx=self.pad)
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        with torch.no_grad():
            self.embed.weight[self.pad].zero_()
        rnn = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[cfg.cell]  # nn.RNN: tanh, Elman's
        self.lstm = rnn(E, H, cfg.layers, batch_first=True, dropout=cfg.dropout if cfg.layers > 1 else 0.0)
        tied = cfg.share_input_output_embed
        self.proj = nn.Linear(H, E, bias=False) if tied and H != E else None
        self.head = LMHead(E if tied else H, V, self.embed if tied else None,
                           cfg.adaptive_softmax_cutoff, cfg.adaptive_softmax_factor)

    @classmethod
    def build(cls, cfg: LSTMLMConfig, dictionary: Dictionary) -> "LSTMLM":
        return cls(cfg, dictionary)

    def max_positions(self) -> Tuple[int, int]:
        return self.cfg.max_positions, self.cfg.max_positions

    def word_embeddings(self) -> Dict[str, WordTable]:
        return {"embed_path": WordTable(self.embed, tied_output=self.cfg.share_input_output_embed)}

    def _out(self, h: torch.Tensor) -> torch.Tensor:
        """LSTM output ``(..., H)`` -> the output layer's input ``(..., E or H)``."""
        h = dropout(h, self.cfg.dropout, self.training)
        return self.proj(h) if self.proj is not None else h

    # -- transfer (seqkit.models.pretrained) ----------------------------------------------------
    transfer_pooling = "last"  # the final </s> has read the whole sentence
    pretraining_heads = ("head", "proj")

    @property
    def transfer_dim(self) -> int:
        return self.cfg.hidden_dim

    def transfer_features(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                          segments: Optional[torch.Tensor] = None, prefix: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = insert_prefix(self.embed(src_tokens), prefix)  # (B, k + S, E)
        h, _ = self.lstm(dropout(x, self.cfg.dropout, self.training))
        return remove_prefix(h, prefix_length(prefix))  # (B, S, H)

    def transfer_embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed(tokens)

    def transfer_groups(self) -> List[List[str]]:
        """The embeddings, then each LSTM layer (its ``*_l{i}`` weights and biases)."""
        layers = [[n for n, _ in self.lstm.named_parameters() if n.endswith(f"_l{i}")] for i in range(self.cfg.layers)]
        prefixes = [["embed"]] + [[f"lstm.{n}" for n in names] for names in layers]
        return groups_by_prefix(self, prefixes)

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                target: Optional[torch.Tensor] = None) -> torch.Tensor:
        # right padding needs no packing: the LSTM reads left to right, real positions never see pads
        x = dropout(self.embed(src_tokens), self.cfg.dropout, self.training)  # (B, T, E)
        h, _ = self.lstm(x)  # (B, T, H)
        x = self._out(h)
        if target is None:
            return self.head.logits(x)  # (B, T, V)
        return self.head.scored(x, target, self.pad)  # (B, T)

    # -- generation ---------------------------------------------------------------------------
    def prefill(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> Tuple[torch.Tensor, Cache]:
        B = src_tokens.size(0)
        packed = pack_padded_sequence(self.embed(src_tokens), src_lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, final = self.lstm(packed)  # final (L, B, H): h (and c) after each prompt's last real token
        out, _ = pad_packed_sequence(out, batch_first=True)  # (B, P, H)
        last = out[torch.arange(B, device=out.device), src_lengths - 1]  # (B, H)
        # the cache keeps the batch on dim 0
        return self.head.logits(self._out(last)), self._cache(final)

    def _cache(self, final: Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]) -> Cache:
        """The recurrence's state ``(L, B, H)``: ``(h, c)`` for the LSTM, ``h`` for GRU and RNN ->
        the cache's ``h`` (and ``c``) ``(B, L, H)``."""
        if self.cfg.cell != "lstm":
            return {"h": final.transpose(0, 1)}
        return {"h": final[0].transpose(0, 1), "c": final[1].transpose(0, 1)}

    def step(self, tokens: torch.Tensor, state: Cache, positions: torch.Tensor) -> torch.Tensor:
        h = state["h"].transpose(0, 1).contiguous()  # (L, B, H)
        hc = (h, state["c"].transpose(0, 1).contiguous()) if self.cfg.cell == "lstm" else h
        out, final = self.lstm(self.embed(tokens), hc)  # (B, 1, H)
        state.update(self._cache(final))
        return self.head.logits(self._out(out[:, 0]))  # (B, V)
