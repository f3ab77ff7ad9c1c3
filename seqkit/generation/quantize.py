"""``quantize=int8`` for seqkit's own search engine: dynamic int8 quantization on CPU.

Every ``nn.Linear`` (and ``nn.LSTM`` / ``nn.GRU``) of the model keeps its weights in int8, one
scale per tensor, and quantizes its input per call (torch's eager dynamic quantization, fbgemm
kernels on x86). A decoder step is bound by reading weights at small batches, so a quarter of the
bytes pays even at batch 1; the tied output projection, the largest matmul of a step, is untied
into a Linear sharing the embedding's weight first (models with ``untie_output``) so it is
quantized too. Embeddings, norms and attention stay fp32. Search results can differ from fp32's:
``benchmarks/translation.py`` reports BLEU beside the speed.
"""

from __future__ import annotations

import logging
import warnings

import torch
from torch import nn

from seqkit.errors import SeqkitError

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
    untie = getattr(model, "untie_output", None)
    if untie is not None:
        untie()
    kinds = (nn.Linear, nn.LSTM, nn.GRU)
    targets = [m for m in model.modules() if type(m) in kinds]
    n_weights = sum(p.numel() for m in targets for p in m.parameters(recurse=False))
    model.eval()
    with warnings.catch_warnings():
        # torch 2.13 marks eager quantization deprecated (in favour of torchao); until it is gone
        # (the ImportError above) its warnings are noise to a user who asked for int8
        warnings.simplefilter("ignore")
        quantize_dynamic(model, set(kinds), dtype=torch.qint8, inplace=True)
    log.info("quantize=int8: %d layers, %s weights in int8", len(targets), f"{n_weights:,}")
    return model
