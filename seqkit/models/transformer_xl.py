"""Transformer-XL language model (Dai et al., 2019): segment-level recurrence with relative positions.

tokens -> embedding (x sqrt(C) with ``scale_embedding``) -> dropout -> L layers of relative
attention (:mod:`seqkit.models.modules.relative_attention`) over [memory; segment] and feed-forward
-> (a final LayerNorm when pre-norm) -> output layer (tied, its own, or an adaptive softmax with
adaptive input, as :class:`seqkit.models.transformer_lm.TransformerLM`).

Memory. Each layer's input over the last ``mem_len`` positions of the previous segments is kept,
detached (no gradient flows into it), and read as extra keys and values by the next segment. That
needs the next segment to be the continuation of this one in every batch row: the language-modeling
task's ``stream_batches`` order (:mod:`seqkit.data.lm_dataset`), whose collation adds
``src_blocks`` ``(B,)``, the block index of each row. The model keeps its memory between forward
calls (one for training, one for evaluation) with the block indices it came from, and reads it
only when every row of the new batch is the block after the one its memory row ends with (rows
beyond the batch dropped: a shorter last stream); else it starts again from no memory (the first
batch of an epoch, of a validation pass, a batch of another order). A trainer checkpoint saves the
training memory (``carry_state``), so a resumed run reads the same memory as the run it continues.

Generation is refused: a prompt is scored with ``seqkit-eval-lm``.

Shapes: B batch (streams), T segment length, M memory length, C embed_dim, V vocabulary, L layers.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch
from torch import nn

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.models.base import Cache, LanguageModel
from seqkit.models.modules.adaptive_input import AdaptiveInput, init_shared
from seqkit.models.modules.dropout import dropout
from seqkit.models.modules.lm_head import LMHead
from seqkit.models.modules.norm import layer_norm
from seqkit.models.modules.relative_attention import RelativeLayer, relative_positions
from seqkit.models.modules.transformer_layers import ACTIVATIONS

MAX_SEGMENT = 1 << 16  # a safety bound on one segment's length: positions are relative, no table ends


@dataclass
class TransformerXLConfig:
    name: str = arg("transformer_xl", "registry name of the model family")
    layers: int = arg(4, "number of Transformer layers", ge=1)
    embed_dim: int = arg(256, "model (embedding) dimension C", gt=0)
    ffn_dim: int = arg(1024, "inner dimension of the feed-forward blocks", gt=0)
    attention_heads: int = arg(4, "attention heads (embed_dim must be divisible by it)", ge=1)
    dropout: float = arg(0.1, "dropout on embeddings, position sinusoids and residual branches", ge=0, lt=1)
    attention_dropout: float = arg(0.0, "dropout on attention weights", ge=0, lt=1)
    activation_dropout: float = arg(0.0, "dropout after the feed-forward activation", ge=0, lt=1)
    activation: str = arg("gelu", "feed-forward activation", choices=tuple(ACTIVATIONS))
    normalize_before: bool = arg(True, "pre-norm (LayerNorm before each block, one after the last); false: "
                                       "post-norm, Dai et al.'s default")
    mem_len: int = arg(256, "training: positions of the previous segments each layer reads as memory (needs "
                            "task.stream_batches); 0: none, each segment alone. seqkit-eval-lm mem_len= sets "
                            "the evaluation's", ge=0)
    scale_embedding: bool = arg(False, "multiply token embeddings by sqrt(embed_dim)")
    share_input_output_embed: bool = arg(True, "the output layer is the input embedding's transpose")
    adaptive_softmax_cutoff: List[int] = arg(help="adaptive softmax cluster boundaries, e.g. [2000,10000] (empty: "
                                                  "full softmax; needs share_input_output_embed=false)", factory=list)
    adaptive_softmax_factor: float = arg(4.0, "each adaptive softmax tail cluster's dimension is the previous one's / this",
                                         gt=1)
    adaptive_input: bool = arg(False, "embed tokens in the adaptive softmax's bands with its weights (Baevski & Auli, "
                                      "2019): needs adaptive_softmax_cutoff and share_input_output_embed=false")
    layer_norm_eps: float = arg(1e-5, "epsilon added to the variance in every LayerNorm", gt=0)


@MODELS.preset("transformer_xl_mini")
def transformer_xl_mini() -> TransformerXLConfig:
    """gpt_mini's size for WikiText-2 on a CPU: 4 layers, C 256, 4 heads, ffn 1024, memory 256."""
    return TransformerXLConfig()


@MODELS.preset("transformer_xl_tiny")
def transformer_xl_tiny() -> TransformerXLConfig:
    """For tests and CPU smoke runs: 2 layers, C 64, 4 heads, ffn 128, memory 32."""
    return dataclasses.replace(transformer_xl_mini(), layers=2, embed_dim=64, ffn_dim=128, mem_len=32)


Memory = Tuple[List[torch.Tensor], torch.Tensor]  # each layer's input (B, M, C), and the rows' last block ids (B,)


@MODELS.register("transformer_xl", TransformerXLConfig)
class TransformerXL(LanguageModel):
    """Decoder-only Transformer with relative positions and segment memory; ``build(cfg, dictionary)``."""

    def __init__(self, cfg: TransformerXLConfig, dictionary: Dictionary):
        super().__init__()
        self.cfg = cfg
        C, V = cfg.embed_dim, len(dictionary)
        self.pad = dictionary.pad()
        if cfg.adaptive_input:
            if not cfg.adaptive_softmax_cutoff or cfg.share_input_output_embed:
                raise SeqkitError("model.adaptive_input=true shares the adaptive softmax's weights: set "
                                  "model.adaptive_softmax_cutoff (e.g. [2000,10000]) and "
                                  "model.share_input_output_embed=false")
            head = LMHead(C, V, None, cfg.adaptive_softmax_cutoff, cfg.adaptive_softmax_factor)
            init_shared(head.adaptive)
            self.embed = AdaptiveInput(head.adaptive)
        else:
            self.embed = nn.Embedding(V, C, padding_idx=self.pad)
            nn.init.normal_(self.embed.weight, mean=0.0, std=C**-0.5)
            with torch.no_grad():
                self.embed.weight[self.pad].zero_()
            head = LMHead(C, V, self.embed if cfg.share_input_output_embed else None, cfg.adaptive_softmax_cutoff,
                          cfg.adaptive_softmax_factor)
        self.embed_scale = math.sqrt(C) if cfg.scale_embedding else 1.0
        self.layers = nn.ModuleList(
            RelativeLayer(C, cfg.attention_heads, cfg.ffn_dim, cfg.dropout, cfg.attention_dropout,
                          cfg.activation_dropout, cfg.activation, cfg.normalize_before, cfg.layer_norm_eps)
            for _ in range(cfg.layers))
        self.final_norm = layer_norm(C, "torch", cfg.layer_norm_eps) if cfg.normalize_before else nn.Identity()
        self.head = head
        self.mem_len = cfg.mem_len  # the evaluation may set another (seqkit-eval-lm mem_len=)
        self._memory: Dict[bool, Optional[Memory]] = {True: None, False: None}  # by self.training

    @classmethod
    def build(cls, cfg: TransformerXLConfig, dictionary: Dictionary) -> "TransformerXL":
        return cls(cfg, dictionary)

    def max_positions(self) -> Tuple[int, int]:
        return MAX_SEGMENT, MAX_SEGMENT

    def packing_refusal(self) -> Optional[str]:
        return ("transformer_xl's relative attention takes no document masks; train on sample_break_mode=none "
                "blocks (task.stream_batches for its memory)")

    # -- memory ---------------------------------------------------------------------------------
    def reset_memory(self) -> None:
        """Forget both memories (training's and evaluation's)."""
        self._memory = {True: None, False: None}

    def recall(self, blocks: Optional[torch.Tensor]) -> Optional[List[torch.Tensor]]:
        """The memory this batch reads: each layer's ``(B, M, C)`` when every row ``blocks`` ``(B,)``
        continues the block its memory row ends with; else None."""
        held = self._memory[self.training]
        if blocks is None or held is None or self.mem_len == 0:
            return None
        layers, last = held
        B = blocks.size(0)
        if B > last.size(0) or not torch.equal(last[:B].to(blocks.device) + 1, blocks):
            return None
        return [h[:B] for h in layers]

    def remember(self, inputs: List[torch.Tensor], memory: Optional[List[torch.Tensor]],
                 blocks: Optional[torch.Tensor]) -> None:
        """Keep the last ``mem_len`` positions of each layer's input over memory + this segment, detached."""
        if blocks is None or self.mem_len == 0:
            return
        kept = [(h if m is None else torch.cat([m, h], dim=1))[:, -self.mem_len :].detach()
                for h, m in zip(inputs, memory or [None] * len(inputs))]
        self._memory[self.training] = (kept, blocks.detach().clone())

    def carry_state(self) -> Optional[Dict[str, torch.Tensor]]:
        """The training memory, for a checkpoint (None: no memory held)."""
        held = self._memory[True]
        if held is None:
            return None
        state = {f"layer{i}": h.cpu() for i, h in enumerate(held[0])}
        state["blocks"] = held[1].cpu()
        return state

    def load_carry_state(self, state: Optional[Dict[str, torch.Tensor]]) -> None:
        """Inverse of :meth:`carry_state` (onto this model's device)."""
        if not state:
            self._memory[True] = None
            return
        device = next(self.parameters()).device
        layers = [state[f"layer{i}"].to(device) for i in range(len(self.layers))]
        self._memory[True] = (layers, state["blocks"].to(device))

    # -- forward --------------------------------------------------------------------------------
    def features(self, src_tokens: torch.Tensor, blocks: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(B, T)`` -> the last layer's (normalized) output ``(B, T, C)``, reading and updating the
        memory when ``blocks`` ``(B,)`` says which block of the stream each row is."""
        memory = self.recall(blocks)
        M = memory[0].size(1) if memory is not None else 0
        x = dropout(self.embed_scale * self.embed(src_tokens), self.cfg.dropout, self.training)  # (B, T, C)
        pos = dropout(relative_positions(M + x.size(1), self.cfg.embed_dim, x.device, x.dtype), self.cfg.dropout,
                      self.training)  # (M + T, C)
        inputs = []
        for i, layer in enumerate(self.layers):
            inputs.append(x)
            x = layer(x, memory[i] if memory is not None else None, pos)
        self.remember(inputs, memory, blocks)
        return self.final_norm(x)

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor, target: Optional[torch.Tensor] = None,
                src_blocks: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits ``(B, T, V)``, or with ``target`` the targets' log-probs ``(B, T)`` (0 at pads).
        ``src_blocks`` ``(B,)``: the stream order's block indices (see the module docstring)."""
        x = self.features(src_tokens, src_blocks)
        if target is None:
            return self.head.logits(x)
        return self.head.scored(x, target, self.pad)

    def train(self, mode: bool = True) -> "TransformerXL":
        """Entering evaluation starts its memory afresh (each validation pass reads its own stream)."""
        if not mode:
            self._memory[False] = None
        return super().train(mode)

    # -- generation -----------------------------------------------------------------------------
    def prefill(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> Tuple[torch.Tensor, Cache]:
        raise SeqkitError("seqkit-generate does not continue a transformer_xl model (its memory is no decoding "
                          "cache here); score text with seqkit-eval-lm, or train model=transformer_lm to generate")
