"""ULMFiT's fine-tuning (Howard & Ruder 2018) for any pretrained body: discriminative learning
rates and gradual unfreezing over the body's layer groups; the slanted triangular schedule is
``lr_scheduler=slanted_triangular`` and the middle stage (the language model trained further on
the task's own text) a language-modeling run (see ``examples/transfer``).

The groups, top first: the task's head (with ELMo's layer mix and any prompt), then the body's
``transfer_groups()`` from its last layer down to its embeddings. Group d (0 = the head) learns at
``lr / lr_decay ** d`` and, with gradual unfreezing, trains from epoch ``d + 1`` on: the head alone
in epoch 1, the top body group joins in epoch 2, and so on (or from update ``d x unfreeze_every``:
a large task's few epochs would never reach the lower groups).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List

from torch import nn

from seqkit.core.config import arg


@dataclass
class ULMFiTConfig:
    lr_decay: float = arg(2.6, "each lower layer group learns at the rate of the group above / lr_decay "
                               "(1: one rate for all)", ge=1)
    gradual_unfreezing: bool = arg(True, "train the head alone in epoch 1, then one more body group per epoch, top "
                                         "first")
    unfreeze_every: int = arg(0, "with gradual_unfreezing: updates between two unfreezing steps instead of epochs "
                                 "(0: one group an epoch, as ULMFiT on its small datasets)", ge=0)


def layer_groups(model: nn.Module, body: nn.Module, cfg: ULMFiTConfig) -> List[Dict[str, Any]]:
    """``[{"name", "params", "lr_scale", "from_epoch", "from_update"}]``, head first; ``body`` is ``model.body``."""
    body_groups = body.transfer_groups()  # bottom to top, names inside the body
    params = dict(model.named_parameters())
    in_body = {f"body.{n}" for group in body_groups for n in group}
    head = [n for n in params if n not in in_body]  # head, mix, prompt, ...
    named = [("head", head)] + [(f"body.{len(body_groups) - 1 - i}", [f"body.{n}" for n in group])
                                for i, group in enumerate(reversed(body_groups))]
    out = []
    for depth, (name, names) in enumerate(named):
        gradual, by_updates = cfg.gradual_unfreezing, cfg.unfreeze_every > 0
        out.append({"name": name, "params": [params[n] for n in names], "lr_scale": cfg.lr_decay ** -depth,
                    "from_epoch": depth + 1 if gradual and not by_updates else 1,
                    "from_update": depth * cfg.unfreeze_every if gradual and by_updates else 0})
    return out
