"""The optimizer's parameter groups, for every run: no weight decay on biases and norms (every
parameter of fewer than 2 dimensions, as BERT's fine-tuning does), and a model's own groups where
it has them (``model.param_groups()``: ULMFiT's layer groups, each with a learning-rate scale and
the epoch it starts training in).

A group is a torch param-group dict with keys of ours, which the trainer reads every update:
``lr_scale`` (the group's rate = the schedule's rate x lr_scale), ``from_epoch`` and
``from_update`` (before them, the group's gradients are dropped: gradual unfreezing). They are
saved with the optimizer's state.
"""

from __future__ import annotations

from typing import Any, Dict, List

from torch import nn


def param_groups(model: nn.Module, weight_decay: float) -> List[Dict[str, Any]]:
    """The trainable parameters of ``model`` as optimizer groups (empty groups left out)."""
    own = getattr(model, "param_groups", None)
    groups = own() if callable(own) else [{"name": "all", "params": list(model.parameters())}]
    out = []
    for g in groups:
        trained = [p for p in g["params"] if p.requires_grad]
        for params, decay, suffix in (([p for p in trained if p.ndim >= 2], weight_decay, ""),
                                      ([p for p in trained if p.ndim < 2], 0.0, " (no decay)")):
            if params:
                out.append({"params": params, "weight_decay": decay, "name": g["name"] + suffix,
                            "lr_scale": float(g.get("lr_scale", 1.0)), "from_epoch": int(g.get("from_epoch", 1)),
                            "from_update": int(g.get("from_update", 0))})
    return out
