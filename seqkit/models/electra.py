"""ELECTRA (Clark et al., 2020): a small masked-LM generator and a discriminator trained jointly on
replaced-token detection (kind ``masked_lm``, criterion ``electra``).

The generator (a narrower :class:`TransformerEncoder` + masked-LM head) fills the masked
positions by sampling from its softmax (no gradient flows through the sample); the discriminator
(``encoder``, the model kept for fine-tuning, so its ``encoder.*`` parameters load into the
classification models) reads the corrupted text and predicts, at every real position, whether
the token was replaced. A sample equal to the original counts as original (labels compare ids).
Both share the token embeddings (the generator projects them to its width).

Shapes: B batch, S length, C discriminator width, Cg generator width, N masked positions, V vocabulary.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from seqkit.core.config import arg
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.data.noising import replaced_token_labels
from seqkit.models.bert import MaskedLMHead, log_unigram
from seqkit.models.modules.transformer_layers import ACTIVATIONS
from seqkit.models.transformer_encoder import EncoderTransfer, TransformerEncoder, TransformerEncoderConfig


@dataclass
class ElectraConfig(TransformerEncoderConfig):
    """The encoder fields describe the discriminator; ``generator_*`` the generator."""

    name: str = arg("electra", "registry name of the model")
    generator_dim: int = arg(64, "generator width Cg (ELECTRA: 1/4 to 1/3 of the discriminator's)", gt=0)
    generator_ffn_dim: int = arg(256, "generator feed-forward dimension", gt=0)
    generator_heads: int = arg(1, "generator attention heads", ge=1)
    generator_layers: int = arg(0, "generator layers (0: as many as the discriminator)", ge=0)
    sampling_temperature: float = arg(1.0, "temperature of the generator's samples", gt=0)
    unigram_bias_init: bool = arg(False, "start the generator's output bias at the log unigram of the dictionary's "
                                         "counts; off (ELECTRA's zeros): its first samples are near-uniform, rare "
                                         "tokens the discriminator learns to spot, and the task hardens as the "
                                         "generator learns (from a unigram start no context-free cue tells a "
                                         "replacement, and the discriminator's states collapse to one vector)")


def _electra(layers: int, dim: int, heads: int, gen_dim: int, embedding_dim: int = 0) -> ElectraConfig:
    # embeddings at std 0.02 (ELECTRA's and BERT's init): small logits through the tied generator head
    return ElectraConfig(encoder_layers=layers, embed_dim=dim, ffn_dim=4 * dim, attention_heads=heads, dropout=0.1,
                         attention_dropout=0.1, activation="gelu", normalize_before=False, learned_positions=True,
                         max_positions=512, no_scale_embedding=True, embedding_dim=embedding_dim, embed_init_std=0.02,
                         generator_dim=gen_dim, generator_ffn_dim=4 * gen_dim, generator_heads=max(1, gen_dim // 64))


@MODELS.preset("electra_small")
def electra_small() -> ElectraConfig:
    """ELECTRA-Small: 12 layers, C 256, 4 heads, embeddings E 128; generator Cg 64 (1/4)."""
    return _electra(12, 256, 4, 64, embedding_dim=128)


@MODELS.preset("electra_mini")
def electra_mini() -> ElectraConfig:
    """For CPU runs: 4 layers, C 256, 4 heads, E 128; generator Cg 64."""
    return _electra(4, 256, 4, 64, embedding_dim=128)


@MODELS.preset("electra_base")
def electra_base() -> ElectraConfig:
    """ELECTRA-Base: 12 layers, C 768, 12 heads; generator Cg 256 (1/3)."""
    return _electra(12, 768, 12, 256)


@MODELS.register("electra", ElectraConfig)
class ElectraModel(EncoderTransfer, nn.Module):
    kind = "masked_lm"
    has_sentence_head = False
    has_span_head = False

    def __init__(self, cfg: ElectraConfig, dictionary: Dictionary):
        super().__init__()
        self.cfg = cfg
        self.pad = dictionary.pad()
        self.encoder = TransformerEncoder(cfg, dictionary)  # the discriminator
        E = self.encoder.embed_tokens.embedding_dim
        gen_cfg = dataclasses.replace(cfg, embed_dim=cfg.generator_dim, ffn_dim=cfg.generator_ffn_dim,
                                      attention_heads=cfg.generator_heads, share_layers=False, embedding_dim=E,
                                      encoder_layers=cfg.generator_layers or cfg.encoder_layers)
        self.generator = TransformerEncoder(gen_cfg, dictionary)
        self.generator.embed_tokens = self.encoder.embed_tokens  # shared token embeddings
        self.generator_head = MaskedLMHead(cfg.generator_dim, self.encoder.embed_tokens, cfg.layer_norm_impl,
                                           log_unigram(dictionary) if cfg.unigram_bias_init else None,
                                           norm_eps=cfg.layer_norm_eps)
        self.disc_dense = nn.Linear(cfg.embed_dim, cfg.embed_dim)
        self.disc_out = nn.Linear(cfg.embed_dim, 1)

    @classmethod
    def build(cls, cfg: ElectraConfig, dictionary: Dictionary) -> "ElectraModel":
        return cls(cfg, dictionary)

    def max_positions(self) -> Tuple[int, int]:
        return self.cfg.max_positions, 1 << 30

    # fine-tuning keeps the discriminator (EncoderTransfer) and drops the rest
    pretraining_heads = ("generator", "generator_head", "disc_dense", "disc_out")

    def discriminate(self, tokens: torch.Tensor, segments: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Replaced-token logits ``(B, S)`` (> 0: replaced)."""
        h = self.encoder(tokens, segments)  # (B, S, C)
        return self.disc_out(ACTIVATIONS[self.cfg.activation](self.disc_dense(h))).squeeze(-1)

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor, segments: Optional[torch.Tensor] = None,
                masked_tokens: Optional[torch.Tensor] = None,
                mlm_target: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
        """``mlm`` ``(N, V)`` generator logits at the masked positions; with ``mlm_target`` ``(N,)``
        (the originals there) also ``corrupted`` (the discriminator's input), ``disc`` logits,
        ``disc_labels`` (True where replaced) and ``keep`` (real positions), each ``(B, S)``."""
        if masked_tokens is None:
            masked_tokens = src_tokens.new_zeros(src_tokens.shape, dtype=torch.bool)
        g = self.generator(src_tokens, segments)  # (B, S, Cg)
        out = {"mlm": self.generator_head(g[masked_tokens])}  # (N, V)
        if mlm_target is None:
            return out
        with torch.no_grad():
            probs = F.softmax(out["mlm"].float() / self.cfg.sampling_temperature, dim=-1)  # (N, V)
            sampled = torch.multinomial(probs, 1).squeeze(1) if probs.numel() else mlm_target
        corrupted = src_tokens.masked_scatter(masked_tokens, sampled)  # (B, S)
        original = src_tokens.masked_scatter(masked_tokens, mlm_target)
        out["corrupted"] = corrupted
        out["disc"] = self.discriminate(corrupted, segments)
        out["disc_labels"] = replaced_token_labels(original, corrupted, self.pad)
        out["keep"] = src_tokens.ne(self.pad)
        return out
