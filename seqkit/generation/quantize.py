"""``quantize=int8`` for seqkit's own search engine: dynamic int8 quantization on CPU.

Every ``nn.Linear`` (and ``nn.LSTM`` / ``nn.GRU``) of the model keeps its weights in int8, one
scale per tensor, and quantizes its input per call (torch's eager dynamic quantization, fbgemm
kernels on x86); an Elman ``nn.RNN`` (``model.cell=rnn``) stays fp32, torch having no dynamic
int8 module for it (only for its one-step ``nn.RNNCell``). A decoder step is bound by reading
weights at small batches, so a quarter of the bytes pays even at batch 1; the tied output
projection, the largest matmul of a step, is untied into a Linear sharing the embedding's weight
first (models with ``untie_output``) so it is quantized too. Embeddings, norms and attention stay
fp32. Search results can differ from fp32's: ``benchmarks/translation.py`` reports BLEU beside
the speed.

A LoRA checkpoint's updates are merged into their Linear layers first (``W + (alpha / r) B A``,
then int8): quantization swaps each Linear for a new module, which the update's forward hook
cannot follow. A model with no layer of those kinds (ConvS2S: weight-normed convolutions and
projections of its own) is refused, not returned unchanged.
"""

from __future__ import annotations

import logging
import warnings

import torch
from torch import nn

from seqkit.adapt.lora import merge_lora
from seqkit.core.errors import SeqkitError

log = logging.getLogger("seqkit.generate")


def quantize_int8(model: nn.Module) -> nn.Module:
    """``model`` (on CPU), put in eval mode, with its Linear/LSTM/GRU layers dynamically quantized
    to int8, in place. Logs how many layers and weights were converted."""
    try:
        from torch.ao.quantization import quantize_dynamic
    except ImportError:  # removed from a future torch
        raise SeqkitError(f"quantize=int8 needs torch.ao.quantization.quantize_dynamic, which torch "
                          f"{torch.__version__} lacks: use quantize=none") from None
    if torch.backends.quantized.engine not in ("x86", "fbgemm", "qnnpack", "onednn"):
        raise SeqkitError(f"quantize=int8: torch has no quantized engine on this CPU "
                          f"({torch.backends.quantized.engine})")
    kinds = (nn.Linear, nn.LSTM, nn.GRU)
    if not any(type(m) in kinds for m in model.modules()):
        raise SeqkitError(_nothing_to_quantize(model))
    merged = merge_lora(model)  # before untying: the untied projection shares the embedding's weight
    if merged:
        log.info("quantize=int8: %d LoRA update(s) merged into their Linear layers first", merged)
    untie = getattr(model, "untie_output", None)
    if untie is not None:
        untie()
    targets = [m for m in model.modules() if type(m) in kinds]
    n_weights = sum(p.numel() for m in targets for p in m.parameters(recurse=False))
    model.eval()
    with warnings.catch_warnings():
        # torch 2.13 marks eager quantization deprecated (in favour of torchao); until it is gone
        # (the ImportError above) its warnings are noise to a user who asked for int8
        warnings.simplefilter("ignore")
        quantize_dynamic(model, set(kinds), dtype=torch.qint8, inplace=True)
    log.info("quantize=int8: %d layers, %s weights in int8", len(targets), f"{n_weights:,}")
    elman = sum(type(m) is nn.RNN for m in model.modules())
    if elman:
        log.info("quantize=int8: %d Elman nn.RNN layer(s) stay fp32 (torch quantizes no multi-step nn.RNN)", elman)
    return model


def _nothing_to_quantize(model: nn.Module) -> str:
    """The one-line refusal for a model without a Linear/LSTM/GRU layer: the kinds of layer that
    hold its weights instead (those owning a parameter of two or more dimensions, embedding and
    position tables aside: int8 leaves those in fp32 in any model)."""
    names = sorted({type(m).__name__ for m in model.modules() if not isinstance(m, nn.Embedding)
                    and not any(w in type(m).__name__ for w in ("Embedding", "Position"))
                    and any(p.dim() >= 2 for p in m.parameters(recurse=False))})
    convs = [n for n in names if "conv" in n.lower()]
    why = f" ({', '.join(convs)}: convolutions, which it does not cover)" if convs else ""
    why += " (RNN: Elman layers, which it does not cover)" if "RNN" in names else ""
    return (f"quantize=int8: {type(model).__name__} has no nn.Linear, nn.LSTM or nn.GRU layer for torch's dynamic "
            f"int8 quantization to convert; its weights are in {', '.join(names) or 'no layer'}{why}: "
            "use quantize=none")
