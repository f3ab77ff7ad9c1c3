"""A Transformer decoder step for seqkit's search without nn.Module dispatch (installed by ``Translator``).

At batch 1 and beam 5 a step of the Multi30k model (3 decoder layers, C 256, 8k vocabulary) spends
about as long outside its matmuls as in them, and a sixth of that in nn.Module machinery: ~45
module calls and ~105 attribute lookups a step, each a few microseconds of Python. The plan reads
every weight once, when it is built (the prepacked copies of :mod:`seqkit.generation.packed` where
there are some), and runs the layers as a flat loop of functional calls on ``(B, C)`` rows. The
arithmetic is the modules', call for call, so the logits are equal bit for bit
(``tests/test_transformer_step.py``). On the 2-core EPYC, batch 1 and beam 5 on 300 Multi30k test
sentences went from 52.6-55.4 to 64.9-66.7 sentences/s with it and the search loop's own cuts
(2026-11-25; the plan alone, in a prototype: 53-55 -> 61-63).

It covers the decoder as Vaswani et al., fairseq, BART, Marian and FSMT build it: LayerNorm before
or after each block, any non-gated activation, with or without biases, learned, sinusoidal or
no positions, an embedding norm, a scaled or biased output. T5's relative positions, RMS norms and
gated feed-forward, attention weights for alignments, and training keep the modules' path
(:func:`unsupported` says why).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, List, Optional

import torch
import torch.nn.functional as F
from torch import nn

from seqkit.generation.packed import PackedLinear
from seqkit.models.base import STATIC
from seqkit.models.modules.kernels import padding_mask

log = logging.getLogger("seqkit.generate")
Fn = Callable[[torch.Tensor], torch.Tensor]


def _linear(module: nn.Module) -> Fn:
    """``module`` as a function of ``(..., in)``: the prepacked op or ``F.linear`` on its weights;
    any other kind (int8 quantized Linear) is called as the module it is."""
    if isinstance(module, PackedLinear):
        op, packed, bias = torch.ops.mkldnn._linear_pointwise, module.packed, module._bias
        return lambda x: op(x.contiguous(), packed, bias, "none", [], "")
    if type(module) is nn.Linear:
        weight, bias = module.weight.detach(), None if module.bias is None else module.bias.detach()
        return lambda x: F.linear(x, weight, bias)
    return module


def _norm(module: nn.Module) -> Fn:
    """A LayerNorm as ``F.layer_norm`` on its weights (others, e.g. apex's, as the module)."""
    if type(module) is nn.LayerNorm:
        shape, eps = module.normalized_shape, module.eps
        weight = None if module.weight is None else module.weight.detach()
        bias = None if module.bias is None else module.bias.detach()
        return lambda x: F.layer_norm(x, shape, weight, bias, eps)
    return module


def unsupported(model: Any) -> str:
    """Why ``model`` keeps the modules' step ("" when a :class:`DecoderStepPlan` can run it)."""
    from seqkit.models.transformer import TransformerModel

    if not isinstance(model, TransformerModel):
        return "not an encoder-decoder Transformer"
    cfg = model.cfg
    for name, on in (("relative_buckets", cfg.relative_buckets), ("rms_norm", cfg.rms_norm),
                     ("gated_ffn", cfg.gated_ffn)):
        if on:
            return f"model.{name}"
    return ""


class _Layer:
    """One decoder layer's functions and settings, read once."""

    def __init__(self, layer: nn.Module):
        sa, ca = layer.self_attn, layer.cross_attn
        self.heads, self.head_dim, self.scale = sa.num_heads, sa.head_dim, sa.sdpa_scale
        self.cross_heads = ca.num_heads  # differs from heads after head pruning
        self.pre = layer.self_res.normalize_before
        self.qkv, self.self_out, self.self_norm = _linear(sa.qkv_proj), _linear(sa.out_proj), _norm(layer.self_res.norm)
        self.q, self.cross_out, self.cross_norm = _linear(ca.q_proj), _linear(ca.out_proj), _norm(layer.cross_res.norm)
        self.fc1, self.fc2, self.ffn_norm = _linear(layer.ffn.fc1), _linear(layer.ffn.fc2), _norm(layer.ffn_res.norm)
        self.activation = layer.ffn.activation


class DecoderStepPlan:
    """``plan(tokens, cache, step)`` -> logits ``(B, V)``: what ``TransformerModel.decode_step``
    returns, from the cache ``init_cache`` made (cross keys/values and the source mask, static; rows
    reordered lazily by ``"order"``). Self-attention keys and values are kept as one ``(B, 2, H, t, D)``
    entry per layer, ``"{i}.kv"`` (the modules keep two): a search uses one path throughout."""

    def __init__(self, model: Any):
        reason = unsupported(model)
        if reason:
            raise ValueError(f"DecoderStepPlan: {reason}")
        self.model = model
        self.layers: List[_Layer] = [_Layer(layer) for layer in model.decoder_layers]

    def _block(self, x: torch.Tensor, norm: Fn, pre: bool, f: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """A residual block as ``_Residual`` runs it in eval mode: ``x + f(norm(x))`` or ``norm(x + f(x))``."""
        return x + f(norm(x)) if pre else norm(x + f(x))

    def __call__(self, tokens: torch.Tensor, cache: dict, step: int) -> torch.Tensor:
        model = self.model
        B = tokens.size(0)  # tokens (B, 1)
        keep = cache[f"{STATIC}keep"]  # (G, S): rows come in groups of B // G per sentence
        G = keep.size(0)
        mask: Optional[torch.Tensor] = padding_mask(keep)  # (G, 1, 1, S) or None
        order = cache.pop("order", None)  # (B,) cached row each row continues
        x = model._embed_target(tokens, step).view(B, -1)  # (B, C)
        for i, L in enumerate(self.layers):
            H, D = L.heads, L.head_dim

            def self_attention(h: torch.Tensor) -> torch.Tensor:
                qkv = L.qkv(h).view(B, 3, H, 1, D)
                kv = qkv[:, 1:]  # (B, 2, H, 1, D): keys and values kept together, one copy per step
                if step > 0:
                    past = cache[f"{i}.kv"]  # (B0, 2, H, t, D)
                    kv = torch.cat([past if order is None else past.index_select(0, order), kv], dim=3)
                cache[f"{i}.kv"] = kv
                out = F.scaled_dot_product_attention(qkv[:, 0], kv[:, 0], kv[:, 1], scale=L.scale)  # (B, H, 1, D)
                return L.self_out(out.view(B, H * D))

            def cross_attention(h: torch.Tensor) -> torch.Tensor:
                Hc = L.cross_heads
                q = L.q(h).view(G, B // G, Hc, D).transpose(1, 2)  # (G, Hc, B/G, D): a sentence's rows as queries
                keys, values = cache[f"{STATIC}{i}.ck"], cache[f"{STATIC}{i}.cv"]  # (G, Hc, S, D)
                out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=L.scale)
                return L.cross_out(out.transpose(1, 2).reshape(B, Hc * D))

            x = self._block(x, L.self_norm, L.pre, self_attention)
            x = self._block(x, L.cross_norm, L.pre, cross_attention)
            x = self._block(x, L.ffn_norm, L.pre, lambda h: L.fc2(L.activation(L.fc1(h))))
        return model._output(x)  # (B, V)


def install_step_plan(model: nn.Module) -> bool:
    """Give ``model`` a :class:`DecoderStepPlan` for its search when it can take one (after any
    packing or quantization: the plan reads the layers as they are then). Returns whether it did."""
    reason = unsupported(model)
    if reason:
        log.debug("decoder step plan: not used (%s)", reason)
        return False
    model.step_plan = DecoderStepPlan(model)
    return True
