"""fp32 / bf16 / fp16 training: autocast, loss scaling for fp16, clipping, skipping bad steps."""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Any, Dict, Iterable, Optional

import torch

from seqkit.errors import SeqkitError

log = logging.getLogger("seqkit.train")


class Precision:
    """Owns everything that differs between precisions; master weights always stay fp32."""

    def __init__(self, mode: str, device: torch.device):
        if mode not in ("fp32", "bf16", "fp16"):
            raise SeqkitError(f"unknown common.precision {mode!r}; valid: fp32, bf16, fp16")
        self.mode, self.device = mode, device
        self.dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[mode]
        self.scaler = torch.amp.GradScaler(device.type, enabled=(mode == "fp16"))
        self.skipped_steps = 0

    def autocast(self) -> Any:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def unscale_and_clip(self, optimizer: torch.optim.Optimizer, params: Iterable[torch.nn.Parameter], clip_norm: float) -> float:
        """Unscale fp16 gradients, clip to ``clip_norm`` (0: only measure); returns the norm."""
        self.scaler.unscale_(optimizer)
        params = [p for p in params if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, clip_norm if clip_norm > 0 else float("inf"))
        return float(norm)

    def step(self, optimizer: torch.optim.Optimizer, gnorm: float) -> bool:
        """Step unless the gradients are not finite; returns whether the step was taken."""
        if self.scaler.is_enabled():
            scale = self.scaler.get_scale()
            self.scaler.step(optimizer)  # skips the step itself on inf/nan
            self.scaler.update()
            if not math.isfinite(gnorm):
                self.skipped_steps += 1
                log.warning("fp16 overflow: step skipped, loss scale %g -> %g", scale, self.scaler.get_scale())
                return False
            return True
        if not math.isfinite(gnorm):
            self.skipped_steps += 1
            log.warning("non-finite gradient norm: step skipped (%d so far)", self.skipped_steps)
            return False
        optimizer.step()
        return True

    def state_dict(self) -> Optional[Dict[str, Any]]:
        return self.scaler.state_dict() if self.scaler.is_enabled() else None

    def load_state_dict(self, state: Optional[Dict[str, Any]]) -> None:
        if state and self.scaler.is_enabled():
            self.scaler.load_state_dict(state)
