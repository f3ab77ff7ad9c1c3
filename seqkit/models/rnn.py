"""Recurrent encoder-decoder: LSTM, GRU or Elman RNN with attention (Bahdanau et al. 2015; Luong et al. 2015).

Shapes: B batch, S source length, T target length, E embed_dim, H decoder_hidden, L decoder layers,
V target vocabulary, A additive-attention size.

Encoder: embeddings -> dropout -> (bi)directional multi-layer LSTM/GRU/RNN over packed sequences (padding
never enters the recurrence) -> outputs projected to H: the attention memory ``m`` ``(B, S, H)``.
Its final states (both directions of each layer) are bridged (Linear + tanh) into the decoder's
initial states (h, and c for the LSTM: a GRU or an Elman RNN has no cell state).

Decoder, one step ``t`` (the same code serves training and incremental decoding):

* ``attention_step=luong`` (input feeding): the cells read ``[emb(y_t); f_{t-1}]``; the new top state
  ``h_t`` attends: ``a = softmax(score(h_t, m))``, ``c_t = a m``, ``f_t = tanh(W_c [c_t; h_t])``.
* ``attention_step=bahdanau``: the previous top state attends first, ``c_t`` from ``h_{t-1}``; the cells
  read ``[emb(y_t); c_t]``; ``f_t = tanh(W_c [c_t; h_t])``.
* ``attention=none``: no attention; the source reaches the decoder only through the bridged
  initial state (the encoder's final states), and ``f_t = h_t``.

``score`` is ``dot`` (``h . m_j``), ``general`` (``h . W m_j``) or ``additive`` (``v . tanh(W h + U m_j)``).
The output is ``dropout(f_t)``, projected to E when the output matrix is the (tied) embedding.
The cache is the cells' states and the fed vector; beam search reorders it with the base class's
``reorder_cache``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.models.base import Cache, EncoderDecoderModel, EncoderOut
from seqkit.models.modules.dropout import dropout
from seqkit.models.modules.pretrained_embeddings import WordTable, embed_path_arg, freeze_embed_arg


@dataclass
class RNNConfig:
    name: str = arg("rnn", "registry name of the model family")
    cell: str = arg("lstm", "recurrent cell of encoder and decoder: lstm, gru or rnn (Elman's: h = tanh(W [x; h] + b))",
                    choices=("lstm", "gru", "rnn"))
    embed_dim: int = arg(256, "embedding dimension E (source and target)", gt=0)
    encoder_hidden: int = arg(256, "encoder hidden size per direction", gt=0)
    encoder_layers: int = arg(1, "encoder layers", ge=1)
    encoder_bidirectional: bool = arg(True, "read the source in both directions")
    decoder_hidden: int = arg(512, "decoder hidden size H (also the attention memory's size)", gt=0)
    decoder_layers: int = arg(1, "decoder layers", ge=1)
    attention: str = arg("general", "score of the attention: none (encoder's final state only), additive "
                                    "(Bahdanau), dot or general (Luong)",
                         choices=("none", "additive", "dot", "general"))
    attention_step: str = arg("luong", "luong: attend with the new state, feed the attentional vector to the next "
                                       "step (input feeding); bahdanau: attend with the previous state, feed the "
                                       "context into this step", choices=("luong", "bahdanau"))
    additive_dim: int = arg(0, "hidden size A of additive attention (0: decoder_hidden)", ge=0)
    dropout: float = arg(0.2, "dropout on embeddings, between layers and on the decoder output", ge=0, lt=1)
    max_source_positions: int = arg(1024, "longest source (tokens, eos included)", gt=0)
    max_target_positions: int = arg(1024, "longest target (tokens, eos included)", gt=0)
    share_all_embeddings: bool = arg(False, "one embedding matrix for source, target and output (needs a joined dictionary)")
    share_decoder_input_output_embed: bool = arg(True, "tie the decoder's input embedding and output projection")
    encoder_embed_path: str = embed_path_arg("encoder_embed_path")
    decoder_embed_path: str = embed_path_arg("decoder_embed_path")
    freeze_embed: bool = freeze_embed_arg()


@MODELS.preset("lstm_luong_small")
def lstm_luong_small() -> RNNConfig:
    """Luong et al.: bi-LSTM encoder 2x256, LSTM decoder 512, general attention, input feeding."""
    return RNNConfig()


@MODELS.preset("lstm_bahdanau_small")
def lstm_bahdanau_small() -> RNNConfig:
    """Bahdanau et al.'s additive attention and step order, with LSTM cells."""
    return dataclasses.replace(lstm_luong_small(), attention="additive", attention_step="bahdanau")


@MODELS.preset("gru_bahdanau_small")
def gru_bahdanau_small() -> RNNConfig:
    """Bahdanau et al. as published: GRU cells, additive attention, attend-then-step."""
    return dataclasses.replace(lstm_bahdanau_small(), cell="gru")


@MODELS.preset("lstm_tiny")
def lstm_tiny() -> RNNConfig:
    """For tests and CPU smoke runs: embeddings 16, encoder 2x12, decoder 2 layers of 20."""
    return dataclasses.replace(lstm_luong_small(), embed_dim=16, encoder_hidden=12, decoder_hidden=20,
                               decoder_layers=2, encoder_layers=2, max_source_positions=256, max_target_positions=256)


@MODELS.preset("elman_luong_small")
def elman_luong_small() -> RNNConfig:
    """lstm_luong_small with Elman cells (tanh RNN, Elman 1990): the baseline the LSTM was made to fix."""
    return dataclasses.replace(lstm_luong_small(), cell="rnn")


@MODELS.preset("elman_tiny")
def elman_tiny() -> RNNConfig:
    """lstm_tiny with Elman cells, for tests and CPU smoke runs."""
    return dataclasses.replace(lstm_tiny(), cell="rnn")


GATES = {"lstm": 4, "gru": 3, "rnn": 1}  # gate blocks of H rows in a cell's weights, per model.cell


def _embedding(num: int, dim: int, pad: int) -> nn.Embedding:
    emb = nn.Embedding(num, dim, padding_idx=pad)
    nn.init.uniform_(emb.weight, -0.1, 0.1)
    with torch.no_grad():
        emb.weight[pad].zero_()
    return emb


class Cell(nn.Module):
    """One LSTM, GRU or Elman layer, stepped by hand (the equations of ``nn.LSTMCell`` / ``nn.GRUCell`` /
    ``nn.RNNCell`` with tanh: Elman's ``h' = tanh(W [x; u; h] + b)``, no gate and no cell state).

    Its input has two parts: ``pre`` (``pre_dim``: layer 0's embeddings), whose share of the gates
    is computed for all steps at once by :meth:`pre_gates`, and ``u`` (``step_dim``: the fed vector,
    or the layer below), only known step by step. G = 4 gates for LSTM, 3 for GRU, 1 for RNN."""

    def __init__(self, kind: str, pre_dim: int, step_dim: int, hidden: int):
        super().__init__()
        self.kind, self.lstm, self.hidden = kind, kind == "lstm", hidden
        G = GATES[kind]
        self.w_pre = nn.Parameter(torch.empty(G * hidden, pre_dim)) if pre_dim else None
        self.bias = nn.Parameter(torch.empty(G * hidden))
        if kind != "gru":  # [u; h] -> gates in one matmul per step
            self.w_step = nn.Parameter(torch.empty(G * hidden, step_dim + hidden))
        else:  # the GRU's candidate gate needs the state's share apart: n = tanh(x_n + r * (W_hn h + b_hn))
            self.w_step = nn.Parameter(torch.empty(G * hidden, step_dim)) if step_dim else None
            self.w_hh = nn.Parameter(torch.empty(G * hidden, hidden))
            self.b_hh = nn.Parameter(torch.empty(G * hidden))
        for p in self.parameters():
            nn.init.uniform_(p, -0.1, 0.1)

    def pre_gates(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``(..., pre_dim)`` -> its share of the gates, bias included ``(..., G*H)``."""
        return F.linear(x, self.w_pre, self.bias)

    def forward(self, pre: Optional[torch.Tensor], u: Optional[torch.Tensor], h: torch.Tensor,
                c: Optional[torch.Tensor]) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """``pre`` ``(B, G*H)`` from :meth:`pre_gates` (None: bias only), ``u`` ``(B, step_dim)``,
        state ``h``, ``c`` ``(B, H)`` -> new ``h``, ``c`` (None for GRU and RNN)."""
        base = self.bias if pre is None else pre
        if self.kind != "gru":
            x = h if u is None else torch.cat([u, h], dim=1)  # (B, step_dim + H)
            gates = torch.addmm(base, x, self.w_step.t())  # (B, G*H)
            if not self.lstm:  # Elman: the new state is the squashed sum itself
                return torch.tanh(gates), None
            i, f, g, o = gates.chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            return torch.sigmoid(o) * torch.tanh(c), c
        xg = base if u is None else torch.addmm(base, u, self.w_step.t())  # (B, 3H)
        xr, xz, xn = xg.chunk(3, dim=1)
        hr, hz, hn = torch.addmm(self.b_hh, h, self.w_hh.t()).chunk(3, dim=1)
        r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
        n = torch.tanh(xn + r * hn)
        return n + z * (h - n), None  # (1 - z) * n + z * h


@MODELS.register("rnn", RNNConfig)
class RNNModel(EncoderDecoderModel):
    """Encoder-decoder RNN; ``build(cfg, src_dict, tgt_dict)`` is the registry builder."""

    def __init__(self, cfg: RNNConfig, src_dict: Dictionary, tgt_dict: Dictionary):
        super().__init__()
        self.cfg, self.pad = cfg, src_dict.pad()
        E, H, lstm = cfg.embed_dim, cfg.decoder_hidden, cfg.cell == "lstm"
        self.lstm = lstm
        if cfg.share_all_embeddings and src_dict != tgt_dict:
            raise SeqkitError("model.share_all_embeddings=true needs a joined dictionary (seqkit-preprocess joined_dictionary=true)")
        self.src_embed = _embedding(len(src_dict), E, self.pad)
        self.tgt_embed = self.src_embed if cfg.share_all_embeddings else _embedding(len(tgt_dict), E, self.pad)
        rnn = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[cfg.cell]  # nn.RNN: tanh, Elman's
        dirs = 2 if cfg.encoder_bidirectional else 1
        self.encoder = rnn(E, cfg.encoder_hidden, cfg.encoder_layers, batch_first=True,
                           dropout=cfg.dropout if cfg.encoder_layers > 1 else 0.0, bidirectional=cfg.encoder_bidirectional)
        for p in self.encoder.parameters():
            nn.init.uniform_(p, -0.1, 0.1)
        enc_out = dirs * cfg.encoder_hidden
        # final states of both directions -> the decoder's initial states (h, and c for the LSTM)
        self.bridge = nn.ModuleList(nn.Linear(enc_out, H) for _ in range(2 if lstm else 1))
        self.memory_proj = nn.Linear(enc_out, H, bias=False)  # encoder outputs -> attention memory (B, S, H)
        attend = cfg.attention != "none"
        fed = H if attend else 0  # layer 0 reads [emb; fed vector]
        self.cells = nn.ModuleList(Cell(cfg.cell, E, fed, H) if i == 0 else Cell(cfg.cell, 0, H, H)
                                   for i in range(cfg.decoder_layers))
        if cfg.attention == "general":
            self.attn_w = nn.Linear(H, H, bias=False)
        elif cfg.attention == "additive":
            A = cfg.additive_dim or H
            self.attn_key = nn.Linear(H, A, bias=False)  # U m_j, once per sentence
            self.attn_query = nn.Linear(H, A)  # W h
            self.attn_v = nn.Linear(A, 1, bias=False)
        self.combine = nn.Linear(2 * H, H, bias=False) if attend else None  # f = tanh(W_c [c; h])
        tied = cfg.share_decoder_input_output_embed or cfg.share_all_embeddings
        self.out_dim_proj = nn.Linear(H, E, bias=False) if tied and H != E else None
        self.output_proj = None if tied else nn.Linear(H, len(tgt_dict), bias=False)
        for lin in (getattr(self, n, None) for n in ("bridge", "memory_proj", "attn_w", "attn_key", "attn_query",
                                                     "attn_v", "combine", "out_dim_proj", "output_proj")):
            for p in (lin.parameters() if lin is not None else ()):
                nn.init.uniform_(p, -0.1, 0.1)

    @classmethod
    def build(cls, cfg: RNNConfig, src_dict: Dictionary, tgt_dict: Dictionary) -> "RNNModel":
        return cls(cfg, src_dict, tgt_dict)

    def max_positions(self) -> Tuple[int, int]:
        return self.cfg.max_source_positions, self.cfg.max_target_positions

    def word_embeddings(self) -> Dict[str, WordTable]:
        shared = self.cfg.share_all_embeddings
        tied = self.cfg.share_decoder_input_output_embed or shared
        return {"encoder_embed_path": WordTable(self.src_embed, tied_output=shared),
                "decoder_embed_path": WordTable(self.tgt_embed, target=True, tied_output=tied)}

    # -- encoder ---------------------------------------------------------------------------------
    def encode(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> EncoderOut:
        cfg = self.cfg
        B, S = src_tokens.shape
        if S > cfg.max_source_positions:
            raise SeqkitError(f"source of {S} tokens exceeds model.max_source_positions={cfg.max_source_positions}")
        x = dropout(self.src_embed(src_tokens), cfg.dropout, self.training)  # (B, S, E)
        packed = pack_padded_sequence(x, src_lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, final = self.encoder(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=S)  # (B, S, dirs*He), zeros at pads
        out = dropout(out, cfg.dropout, self.training)
        keep = src_tokens.ne(self.pad)  # (B, S)
        enc: EncoderOut = {"memory": self.memory_proj(out), "keep": keep}  # (B, S, H)
        if cfg.attention == "general":
            enc["keys"] = self.attn_w(enc["memory"])  # (B, S, H): W m_j, so a step's score is one bmm
        elif cfg.attention == "additive":
            enc["keys"] = self.attn_key(enc["memory"])  # (B, S, A)
        dirs = 2 if cfg.encoder_bidirectional else 1
        # decoder layer i starts from encoder layer i (from the top one when the decoder is deeper)
        pick = [min(i, cfg.encoder_layers - 1) for i in range(cfg.decoder_layers)]
        for name, state, bridge in zip(("h0", "c0"), final if self.lstm else (final,), self.bridge):
            # (layers*dirs, B, He) -> (layers, B, dirs*He): both directions of each layer side by side
            state = state.view(cfg.encoder_layers, dirs, B, -1).permute(0, 2, 1, 3).reshape(cfg.encoder_layers, B, -1)
            enc[name] = torch.tanh(bridge(state[pick])).transpose(0, 1).contiguous()  # (B, L, H)
        return enc

    # -- decoder ---------------------------------------------------------------------------------
    def _attend(self, q: torch.Tensor, enc: EncoderOut) -> Tuple[torch.Tensor, torch.Tensor]:
        """Query ``q`` ``(B, H)`` -> context ``(B, H)`` and attention weights ``(B, S)``."""
        memory, keep = enc["memory"], enc["keep"]
        if self.cfg.attention == "additive":
            e = torch.tanh(enc["keys"] + self.attn_query(q).unsqueeze(1))  # (B, S, A)
            scores = self.attn_v(e).squeeze(2)  # (B, S)
        else:  # dot: h . m_j; general: h . (W m_j)
            keys = memory if self.cfg.attention == "dot" else enc["keys"]
            scores = torch.bmm(keys, q.unsqueeze(2)).squeeze(2)  # (B, S)
        attn = torch.softmax(scores.masked_fill(~keep, -math.inf), dim=1)  # (B, S)
        return torch.bmm(attn.unsqueeze(1), memory).squeeze(1), attn

    def _step(self, pre: torch.Tensor, state: Dict[str, Any], enc: EncoderOut
              ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """One decoder step: ``pre`` ``(B, G*H)`` is layer 0's gates from the embedding; ``state``
        holds per-layer lists ``h``, ``c`` (LSTM) of ``(B, H)`` and ``fed`` ``(B, H)`` (luong) and is
        updated in place. Returns the output vector ``f_t`` ``(B, H)`` and the attention ``(B, S)``
        (None without attention)."""
        cfg, hs, cs = self.cfg, state["h"], state.get("c") or [None] * len(self.cells)
        luong, attn, fed = cfg.attention_step == "luong", None, None
        if self.combine is not None:  # attention: layer 0 also reads a fed vector (B, H)
            # luong: last step's attentional vector; bahdanau: the context of the previous top state
            fed, attn = (state["fed"], None) if luong else self._attend(hs[-1], enc)
        x = None
        for i, cell in enumerate(self.cells):
            u = fed if i == 0 else dropout(x, cfg.dropout, self.training)
            x, cs[i] = cell(pre if i == 0 else None, u, hs[i], cs[i])
            hs[i] = x
        if self.lstm:
            state["c"] = cs
        if self.combine is None:
            return x, None
        ctx = fed
        if luong:
            ctx, attn = self._attend(x, enc)
        out = torch.tanh(self.combine(torch.cat([ctx, x], dim=1)))  # (B, H)
        if luong:
            state["fed"] = out
        return out, attn

    def _embed_gates(self, tokens: torch.Tensor) -> torch.Tensor:
        """Layer 0's input gates from the target embeddings ``tokens`` ``(..., T)``: ``(..., T, G*H)``."""
        x = dropout(self.tgt_embed(tokens), self.cfg.dropout, self.training)  # (..., E)
        return self.cells[0].pre_gates(x)

    def _output(self, f: torch.Tensor) -> torch.Tensor:
        f = dropout(f, self.cfg.dropout, self.training)
        if self.output_proj is not None:
            return self.output_proj(f)  # (..., V)
        if self.out_dim_proj is not None:
            f = self.out_dim_proj(f)  # (..., E)
        return F.linear(f, self.tgt_embed.weight)  # (..., V)

    def init_cache(self, enc: EncoderOut, max_len: int) -> Cache:
        """The decoder's state before step 0: bridged encoder states ``h``, ``c`` ``(B, L, H)`` (and a
        zero fed vector ``(B, H)`` for luong attention)."""
        cache: Cache = {"h": enc["h0"]}
        if self.lstm:
            cache["c"] = enc["c0"]
        if self.combine is not None and self.cfg.attention_step == "luong":
            cache["fed"] = enc["memory"].new_zeros(enc["memory"].size(0), self.cfg.decoder_hidden)  # (B, H)
        return cache

    @staticmethod
    def _unstack(cache: Cache) -> Dict[str, Any]:
        """Cache tensors ``(B, L, H)`` -> per-layer lists, as ``_step`` keeps them."""
        return {k: list(v.unbind(1)) if k in ("h", "c") else v for k, v in cache.items()}

    def decode(self, prev_output_tokens: torch.Tensor, enc: EncoderOut, return_attention: bool = False):
        """Teacher-forced logits ``(B, T, V)`` (and the attention ``(B, T, S)`` with ``return_attention``)."""
        T = prev_output_tokens.size(1)
        if T > self.cfg.max_target_positions:
            raise SeqkitError(f"target of {T} tokens exceeds model.max_target_positions={self.cfg.max_target_positions}")
        # time-major, unbound once: indexing step t of a (B, T, G*H) tensor would make its backward
        # write a whole zero (B, T, G*H) gradient per step
        gates = self._embed_gates(prev_output_tokens.t()).unbind(0)  # T x (B, G*H)
        state = self._unstack(self.init_cache(enc, T))
        outs: List[torch.Tensor] = []
        attns: List[torch.Tensor] = []
        for t in range(T):
            out, attn = self._step(gates[t], state, enc)
            outs.append(out)
            if attn is not None:
                attns.append(attn)
        logits = self._output(torch.stack(outs, dim=1))  # (B, T, V)
        if return_attention:
            return logits, (torch.stack(attns, dim=1) if attns else None)
        return logits

    def decode_step_attention(self, tokens: torch.Tensor, enc: EncoderOut, cache: Cache, step: int,
                              layer: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """One step ``(B, 1)`` -> logits ``(B, V)`` and attention ``(B, S)`` (one attention: ``layer`` unused)."""
        if self.cfg.attention == "none":
            return super().decode_step_attention(tokens, enc, cache, step, layer)
        return self._decode_step(tokens, enc, cache)

    def decode_step(self, tokens: torch.Tensor, enc: EncoderOut, cache: Cache, step: int) -> torch.Tensor:
        return self._decode_step(tokens, enc, cache)[0]

    def _decode_step(self, tokens: torch.Tensor, enc: EncoderOut, cache: Cache):
        state = self._unstack(cache)
        out, attn = self._step(self._embed_gates(tokens)[:, 0], state, enc)
        cache.update({k: torch.stack(v, dim=1) if k in ("h", "c") else v for k, v in state.items()})  # (B, L, H)
        return self._output(out), attn
