"""LoRA (Hu et al. 2021): a frozen ``nn.Linear`` W plus a trained low-rank update,
``y = W x + (alpha / r) B A x`` with A ``(r, I)`` and B ``(O, r)``.

The update hangs on the Linear it adapts (``qkv_proj.lora``, a forward hook adds its output), so
the model's own code and the base weights' names do not change. B starts at zero: the adapted
model starts equal to the base. :func:`merge_lora` folds ``(alpha / r) B A`` into W and removes
the update, giving back plain ``nn.Linear`` layers (an ordinary checkpoint).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, List, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.models.modules.dropout import dropout


@dataclass
class LoRAConfig:
    rank: int = arg(8, "rank r of each update B A", gt=0)
    alpha: float = arg(16.0, "the update is scaled by alpha / rank", gt=0)
    dropout: float = arg(0.0, "dropout on the input of the low-rank path", ge=0, lt=1)
    targets: List[str] = arg(help="the nn.Linear layers that get an update, by the last part of their name: qkv_proj "
                                  "(self-attention's fused query/key/value), out_proj, q_proj and kv_proj "
                                  "(cross-attention), fc1, fc2 (feed-forward)",
                             factory=lambda: ["qkv_proj", "out_proj"])


class LoRA(nn.Module):
    """The low-rank path of one Linear: ``x (..., I) -> (alpha / r) B A dropout(x) (..., O)``."""

    def __init__(self, n_in: int, n_out: int, rank: int, alpha: float, p_dropout: float):
        super().__init__()
        self.A = nn.Parameter(torch.empty(rank, n_in))
        self.B = nn.Parameter(torch.zeros(n_out, rank))
        nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))  # as nn.Linear initialises its weight
        self.scale, self.p_dropout = alpha / rank, p_dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.linear(dropout(x, self.p_dropout, self.training), self.A), self.B) * self.scale

    def delta(self) -> torch.Tensor:
        """The update as a weight ``(O, I)``."""
        return (self.B @ self.A) * self.scale


def _add_update(module: nn.Module, inputs: Tuple[torch.Tensor, ...], output: torch.Tensor) -> torch.Tensor:
    return output + module.lora(inputs[0]).to(output.dtype)


def target_linears(body: nn.Module, targets: List[str]) -> List[Tuple[str, nn.Linear]]:
    """``(name, Linear)`` of every ``nn.Linear`` whose last name part is in ``targets``; a target
    that names nothing is an error that lists the Linear layers there are."""
    linears = [(n, m) for n, m in body.named_modules() if isinstance(m, nn.Linear)]
    found = [(n, m) for n, m in linears if n.rsplit(".", 1)[-1] in targets]
    have = sorted({n.rsplit(".", 1)[-1] for n, _ in linears})
    missing = [t for t in targets if not any(n.rsplit(".", 1)[-1] == t for n, _ in found)]
    if missing or not found:
        where = f"its Linear layers: {', '.join(have)}" if have else "it has no nn.Linear layer (an LSTM body)"
        raise SeqkitError(f"model.lora.targets: {', '.join(missing) or 'none given'} match(es) no layer of the "
                          f"{type(body).__name__} body; {where}")
    return found


def add_lora(body: nn.Module, cfg: LoRAConfig) -> List[str]:
    """Hang a :class:`LoRA` update on every target Linear of ``body``; returns their names."""
    found = target_linears(body, list(cfg.targets))
    for name, lin in found:
        if cfg.rank > min(lin.in_features, lin.out_features):
            raise SeqkitError(f"model.lora.rank={cfg.rank} is out of range for {name} ({lin.in_features} -> "
                              f"{lin.out_features}): at most {min(lin.in_features, lin.out_features)}")
    for _, lin in found:
        lin.lora = LoRA(lin.in_features, lin.out_features, cfg.rank, cfg.alpha, cfg.dropout).to(lin.weight.device)
        lin.register_forward_hook(_add_update)
    return [name for name, _ in found]


def merge_lora(model: nn.Module) -> int:
    """Fold every update into its Linear's weight and remove it: plain Linear layers again. Returns
    how many were merged."""
    merged = 0
    for lin in model.modules():
        lora: Any = getattr(lin, "lora", None)
        if not isinstance(lin, nn.Linear) or not isinstance(lora, LoRA):
            continue
        with torch.no_grad():
            lin.weight += lora.delta().to(lin.weight.dtype)
        for key, hook in list(lin._forward_hooks.items()):
            if hook is _add_update:
                del lin._forward_hooks[key]
        del lin.lora
        merged += 1
    return merged
