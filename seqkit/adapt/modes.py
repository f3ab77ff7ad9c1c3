"""One switch per way of adapting a pretrained body (``model.adapt=``), and what each one trains.

| mode | the body | trained in the body | a checkpoint holds |
| --- | --- | --- | --- |
| ``full`` | as pretrained | everything | everything |
| ``ulmfit`` | as pretrained | everything, by layer group (:mod:`seqkit.adapt.ulmfit`) | everything |
| ``frozen`` | fixed, no dropout | nothing | the head |
| ``adapter`` | + bottleneck adapters | adapters, layer norms | those + the head |
| ``lora`` | + low-rank updates | the updates | those + the head |
| ``bitfit`` | as pretrained | biases | those + the head |
| ``prompt`` | fixed, no dropout | nothing (k learned input vectors) | the vectors + the head |

The head (and ELMo's layer mix) always trains. The parameter-efficient modes (the last five)
save only what they trained: the base checkpoint's path and sha256 go into the model config, and
loading refuses a base whose sha256 differs.

A mode's own settings (``model.adapter.*``, ``model.lora.*``, ``model.prompt.*``,
``model.ulmfit.*``) are read by that mode alone. Set under another mode they change nothing, and the
first build names them in one log line (:func:`unused_settings`) rather than refusing them: a sweep
passes one set of overrides to every mode, and a LoRA run exported with its updates merged becomes
``adapt=full`` with its ``lora`` settings kept as a record.
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Tuple

from torch import nn

from seqkit.adapt.adapters import add_adapters
from seqkit.adapt.lora import add_lora

MODES = ("full", "frozen", "adapter", "lora", "bitfit", "prompt", "ulmfit")
PARAMETER_EFFICIENT = ("frozen", "adapter", "lora", "bitfit", "prompt")
FIXED_BODY = ("frozen", "prompt")  # the body runs in eval mode (no dropout) as features
# the modes with settings of their own (``model.<mode>.*``), read by that mode alone
OWN_SETTINGS = ("adapter", "lora", "prompt", "ulmfit")


def is_norm(module: nn.Module) -> bool:
    return isinstance(module, nn.LayerNorm) or type(module).__name__.endswith(("LayerNorm", "RMSNorm"))


def adapt_body(body: nn.Module, mode: str, cfg: Any) -> List[str]:
    """Change ``body`` for ``mode`` (adapters, LoRA updates) and leave exactly what the mode trains
    with ``requires_grad``; ``cfg`` is the pretrained model's config (``cfg.adapter``, ``cfg.lora``).
    Returns the names of the modules it added to."""
    added: List[str] = []
    if mode == "adapter":
        added = add_adapters(body, cfg.adapter)
    elif mode == "lora":
        added = add_lora(body, cfg.lora)
    if mode in ("full", "ulmfit"):
        body.requires_grad_(True)
        return added
    body.requires_grad_(False)
    if mode == "adapter":
        for name, m in body.named_modules():
            if name.rsplit(".", 1)[-1] == "adapter" or is_norm(m):
                m.requires_grad_(True)
    elif mode == "lora":
        for name, m in body.named_modules():
            if name.rsplit(".", 1)[-1] == "lora":
                m.requires_grad_(True)
    elif mode == "bitfit":
        for name, p in body.named_parameters():
            if name.rsplit(".", 1)[-1].startswith("bias"):  # Linear/LayerNorm bias, LSTM bias_ih_l0 / bias_hh_l0
                p.requires_grad_(True)
    return added


def unused_settings(cfg: Any) -> List[str]:
    """The ``model.<mode>.*`` settings that differ from their defaults while ``cfg.adapt`` is another
    mode (``model.lora.rank=4`` with ``model.adapt=full``): ``["model.lora.rank=4", ...]``."""
    unused = []
    for mode in OWN_SETTINGS:
        own = getattr(cfg, mode, None)
        if mode == cfg.adapt or not dataclasses.is_dataclass(own):
            continue
        default = type(own)()
        for f in dataclasses.fields(own):
            value = getattr(own, f.name)
            if value != getattr(default, f.name):
                shown = f"[{','.join(map(str, value))}]" if isinstance(value, (list, tuple)) else value
                unused.append(f"model.{mode}.{f.name}={shown}")
    return unused


def count_parameters(model: nn.Module) -> Tuple[int, int]:
    """``(trainable, all)``: each parameter once, however many modules share it (tied embeddings)."""
    params = list(model.parameters())  # nn.Module.parameters() yields a shared tensor once
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def parameter_line(model: nn.Module) -> str:
    """The same line for every run and mode: ``trainable parameters: T of N (S%)``."""
    trainable, total = count_parameters(model)
    return f"trainable parameters: {trainable:,} of {total:,} ({100.0 * trainable / max(total, 1):.3g}%)"
