"""A plugin folder for ``common.user_dir=examples/plugin/myplugin``: a GRU encoder-decoder with
dot-product attention, registered as model ``my_gru``. It only implements ``EncoderDecoderModel``'s methods;
nothing in seqkit changes (docs/configuration.md, "Extending: a new model is a new file")."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from seqkit.core.config import arg
from seqkit.models.base import EncoderDecoderModel
from seqkit.core.registry import MODELS


@dataclass
class MyGRUConfig:
    name: str = arg("my_gru", "registry name")
    embed_dim: int = arg(128, "embedding size", gt=0)
    hidden: int = arg(256, "GRU hidden size, encoder and decoder", gt=0)  # ranges are checked when the config is built


@MODELS.register("my_gru", MyGRUConfig)
class MyGRUModel(EncoderDecoderModel):
    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__()
        self.cfg, self.pad = cfg, src_dict.pad()
        self.src_embed = nn.Embedding(len(src_dict), cfg.embed_dim, padding_idx=self.pad)
        self.tgt_embed = nn.Embedding(len(tgt_dict), cfg.embed_dim, padding_idx=tgt_dict.pad())
        self.encoder = nn.GRU(cfg.embed_dim, cfg.hidden, batch_first=True)
        self.decoder = nn.GRU(cfg.embed_dim, cfg.hidden, batch_first=True)
        self.out = nn.Linear(2 * cfg.hidden, len(tgt_dict))

    def encode(self, src_tokens, src_lengths):
        x = self.src_embed(src_tokens)  # (B, S, E)
        packed = nn.utils.rnn.pack_padded_sequence(x, src_lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h = self.encoder(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=src_tokens.size(1))
        return {"out": out, "keep": src_tokens.ne(self.pad), "h": h[0]}  # (B, S, H), (B, S), (B, H)

    def _logits(self, y, enc):
        scores = torch.einsum("bth,bsh->bts", y, enc["out"])  # (B, T, S)
        scores = scores.masked_fill(~enc["keep"][:, None, :], float("-inf"))
        context = torch.einsum("bts,bsh->bth", F.softmax(scores, dim=-1), enc["out"])
        return self.out(torch.cat([y, context], dim=-1))  # (B, T, V)

    def decode(self, prev_output_tokens, enc):
        y, _ = self.decoder(self.tgt_embed(prev_output_tokens), enc["h"][None].contiguous())
        return self._logits(y, enc)

    def init_cache(self, enc, max_len):
        return {"h": enc["h"]}  # (B, H): batch first, so the inherited reorder applies

    def decode_step(self, tokens, enc, cache, step):
        y, h = self.decoder(self.tgt_embed(tokens), cache["h"][None].contiguous())
        cache["h"] = h[0]
        return self._logits(y, enc)[:, 0]  # (B, V)
