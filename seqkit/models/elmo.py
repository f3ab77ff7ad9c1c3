"""ELMo-style bidirectional language model (Peters et al., 2018), kind ``lm``.

A forward and a backward stack of LSTM layers share the token embeddings and the (tied) softmax.
Trained with task ``language_modeling`` and criterion ``adaptive_loss`` (which passes the
targets): at each position the forward stack predicts the target from the tokens on its left, the
backward stack from the tokens on its right, and the loss is the mean of the two directions'
NLL (so the reported perplexity is the geometric mean of the two).

Features for downstream tasks: ``layer_representations(tokens, lengths)`` gives L + 1 layers
``(L + 1, B, T, 2H)`` (the token embeddings twice, then each LSTM layer's forward and backward
states, both of which have read token t), and :class:`ScalarMix` combines them with softmax-
normalised weights and a scale gamma, ELMo's ``gamma * sum_j s_j h_j``.

Shapes: B batch, T length, H = embed_dim = hidden_dim, L layers, V vocabulary.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
from torch import nn

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.models.base import Cache, LanguageModel
from seqkit.models.modules.dropout import dropout
from seqkit.models.modules.lm_head import LMHead
from seqkit.models.modules.prefix import groups_by_prefix, insert_prefix, prefix_length, remove_prefix


@dataclass
class ELMoConfig:
    name: str = arg("elmo", "registry name of the model family")
    dim: int = arg(512, "token embedding and LSTM width H (one width: the layers are mixed)", gt=0)
    layers: int = arg(2, "LSTM layers per direction", ge=1)
    dropout: float = arg(0.1, "dropout on embeddings, between layers and before the softmax", ge=0, lt=1)
    share_input_output_embed: bool = arg(True, "the softmax is the token embedding's transpose")
    adaptive_softmax_cutoff: List[int] = arg(help="adaptive softmax cluster boundaries (empty: full softmax; "
                                                  "needs share_input_output_embed=false)", factory=list)
    adaptive_softmax_factor: float = arg(4.0, "each adaptive softmax tail cluster's dimension is the previous one's / this",
                                         gt=1)
    max_positions: int = arg(1 << 20, "longest input in tokens (a safety bound)", gt=0)


@MODELS.preset("elmo_small")
def elmo_small() -> ELMoConfig:
    """2 layers of 512 per direction, dropout 0.1, tied softmax (ELMo's widths without its char CNN)."""
    return ELMoConfig()


@MODELS.preset("elmo_tiny")
def elmo_tiny() -> ELMoConfig:
    """For tests and CPU smoke runs: 2 layers of 16."""
    return dataclasses.replace(elmo_small(), dim=16)


class ScalarMix(nn.Module):
    """``gamma * sum_j softmax(w)_j * layers[j]`` over ``layers`` ``(L + 1, ..., D)`` -> ``(..., D)``."""

    def __init__(self, num_layers: int):
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, layers: torch.Tensor) -> torch.Tensor:
        s = torch.softmax(self.weights, dim=0).to(layers.dtype)
        return self.gamma * torch.einsum("l,l...->...", s, layers)


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Each row's first ``lengths[b]`` items of ``x`` ``(B, T, ...)`` in reverse, pads left in place."""
    T = x.size(1)
    t = torch.arange(T, device=x.device)[None, :]  # (1, T)
    L = lengths.to(x.device)[:, None]
    idx = torch.where(t < L, L - 1 - t, t)  # (B, T), its own inverse
    return x.gather(1, idx.view(*idx.shape, *([1] * (x.dim() - 2))).expand_as(x))


@MODELS.register("elmo", ELMoConfig)
class ELMo(LanguageModel):
    bidirectional = True  # each direction reads one way, the features both: no left-to-right scoring

    def __init__(self, cfg: ELMoConfig, dictionary: Dictionary):
        super().__init__()
        self.cfg = cfg
        H, V = cfg.dim, len(dictionary)
        self.pad, self.eos = dictionary.pad(), dictionary.eos()
        self.embed = nn.Embedding(V, H, padding_idx=self.pad)
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        with torch.no_grad():
            self.embed.weight[self.pad].zero_()
        self.forward_layers = nn.ModuleList(nn.LSTM(H, H, batch_first=True) for _ in range(cfg.layers))
        self.backward_layers = nn.ModuleList(nn.LSTM(H, H, batch_first=True) for _ in range(cfg.layers))
        self.head = LMHead(H, V, self.embed if cfg.share_input_output_embed else None, cfg.adaptive_softmax_cutoff,
                           cfg.adaptive_softmax_factor)

    @classmethod
    def build(cls, cfg: ELMoConfig, dictionary: Dictionary) -> "ELMo":
        return cls(cfg, dictionary)

    def max_positions(self) -> Tuple[int, int]:
        return self.cfg.max_positions, self.cfg.max_positions

    def _stack(self, layers: nn.ModuleList, x: torch.Tensor) -> List[torch.Tensor]:
        """Each layer's output ``(B, T, H)`` of a left-to-right stack over ``x``."""
        outs = []
        for i, lstm in enumerate(layers):
            x, _ = lstm(dropout(x, self.cfg.dropout, self.training) if i else x)
            outs.append(x)
        return outs

    def _directions(self, fwd_in: torch.Tensor, bwd_in: torch.Tensor, lengths: torch.Tensor,
                    prefix: Optional[torch.Tensor] = None) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        """Forward stack over ``fwd_in`` and backward stack over ``bwd_in`` (read right to left,
        outputs back in left-to-right order), each ``(B, T)`` -> per-layer ``(B, T, H)``; ``prefix``
        ``(B, k, H)``: learned vectors after the first token of both (the outputs keep T positions)."""
        drop, k = self.cfg.dropout, prefix_length(prefix)
        f = self._stack(self.forward_layers, dropout(insert_prefix(self.embed(fwd_in), prefix), drop, self.training))
        lengths = lengths + k
        rev = reverse_padded(dropout(insert_prefix(self.embed(bwd_in), prefix), drop, self.training), lengths)
        b = [reverse_padded(h, lengths) for h in self._stack(self.backward_layers, rev)]
        return [remove_prefix(h, k) for h in f], [remove_prefix(h, k) for h in b]

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                target: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Without ``target``: the forward direction's logits ``(B, T, V)``. With it: the mean of
        the two directions' log-probs of each target ``(B, T)`` (0 at pads)."""
        if target is None:
            f = self._stack(self.forward_layers, dropout(self.embed(src_tokens), self.cfg.dropout, self.training))
            return self.head.logits(dropout(f[-1], self.cfg.dropout, self.training))
        # the backward stack predicts target[t] after reading target[t + 1:], so it reads target
        # shifted left, with </s> standing for whatever follows the block
        following = torch.cat([target[:, 1:], target.new_full((target.size(0), 1), self.eos)], dim=1)
        lengths = src_lengths.to(target.device)
        following = following.masked_fill(torch.arange(target.size(1), device=target.device)[None, :]
                                          == (lengths - 1)[:, None], self.eos)
        f, b = self._directions(src_tokens, following, lengths)
        drop = self.cfg.dropout
        return 0.5 * sum(self.head.scored(dropout(h, drop, self.training), target, self.pad) for h in (f[-1], b[-1]))

    # -- transfer (seqkit.models.pretrained) ----------------------------------------------------
    transfer_pooling = "mean"
    pretraining_heads = ("head",)

    @property
    def transfer_dim(self) -> int:
        return 2 * self.cfg.dim

    @property
    def transfer_layers(self) -> int:
        return self.cfg.layers + 1  # the embeddings, then each LSTM layer

    def transfer_features(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                          segments: Optional[torch.Tensor] = None, prefix: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Every layer ``(L + 1, B, S, 2H)``: the fine-tuned model mixes them with its own ScalarMix."""
        return self.layer_representations(src_tokens, src_lengths, prefix)

    def transfer_embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed(tokens)

    def transfer_groups(self) -> List[List[str]]:
        """The embeddings, then each layer of both directions."""
        prefixes = [["embed"]] + [[f"forward_layers.{i}", f"backward_layers.{i}"] for i in range(self.cfg.layers)]
        return groups_by_prefix(self, prefixes)

    def layer_representations(self, tokens: torch.Tensor, lengths: torch.Tensor,
                              prefix: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(L + 1, B, T, 2H)``: ``[x; x]`` for the embeddings, then ``[forward_l; backward_l]``,
        each direction having read token t (right-padded ``tokens`` ``(B, T)``)."""
        f, b = self._directions(tokens, tokens, lengths, prefix)
        x = self.embed(tokens)
        return torch.stack([torch.cat([x, x], -1)] + [torch.cat([hf, hb], -1) for hf, hb in zip(f, b)])

    def prefill(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> Tuple[torch.Tensor, Cache]:
        raise SeqkitError("an ELMo bidirectional LM does not generate text (train model=lstm_lm or "
                          "transformer_lm for that); it scores text and gives features")
