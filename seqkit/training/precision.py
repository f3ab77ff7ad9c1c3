"""fp32 / bf16 / fp16 training: autocast, loss scaling for fp16, clipping, skipping bad steps."""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Any, Dict, Iterable, Optional

import torch

from seqkit.cpu import prepare_low_precision
from seqkit.errors import SeqkitError

log = logging.getLogger("seqkit.train")


class Precision:
    """Owns everything that differs between precisions; master weights always stay fp32."""

    def __init__(self, mode: str, device: torch.device, init_scale: float = 2.0**15, growth_interval: int = 2000,
                 min_scale: float = 1e-4):
        if mode not in ("fp32", "bf16", "fp16"):
            raise SeqkitError(f"unknown common.precision {mode!r}; valid: fp32, bf16, fp16")
        self.mode, self.device = mode, device
        self.dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[mode]
        if self.dtype is not None and device.type == "cpu":
            prepare_low_precision(mode, log)  # one cached primitive per batch shape would grow RSS without bound
        # fp16 only: dynamic loss scaling; an overflow skips the step and halves the scale, which
        # doubles again after `growth_interval` good steps
        self.scaler = torch.amp.GradScaler(device.type, init_scale=init_scale, growth_interval=growth_interval,
                                           enabled=(mode == "fp16"))
        self.min_scale = min_scale
        self.skipped_steps = 0
        self.overflows = 0

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
        if hasattr(norm, "full_tensor"):  # FSDP: a DTensor holding the global norm
            norm = norm.full_tensor()
        return float(norm)

    def step(self, optimizer: torch.optim.Optimizer, gnorm: float) -> str:
        """Step unless the gradients are not finite. Returns "ok", "overflow" (fp16: the loss scale
        was too high, the step is skipped and the scale halved) or "nonfinite" (step skipped)."""
        if self.scaler.is_enabled():
            scale = self.scaler.get_scale()
            self.scaler.step(optimizer)  # skips the step itself on inf/nan
            self.scaler.update()
            if math.isfinite(gnorm):
                return "ok"
            self.overflows += 1
            new_scale = self.scaler.get_scale()
            log.warning("fp16 overflow: step skipped, loss scale %g -> %g (%d overflows so far)", scale, new_scale,
                        self.overflows)
            if new_scale < self.min_scale:
                raise SeqkitError(
                    f"fp16 loss scale fell below common.fp16_min_loss_scale={self.min_scale:g}: the loss keeps "
                    "overflowing; lower optimizer.lr, use optimization.clip_norm, or train with common.precision=bf16/fp32"
                )
            return "overflow"
        if not math.isfinite(gnorm):
            self.skipped_steps += 1
            log.warning("non-finite gradient norm: step skipped (%d so far)", self.skipped_steps)
            return "nonfinite"
        optimizer.step()
        return "ok"

    def state_dict(self) -> Optional[Dict[str, Any]]:
        return self.scaler.state_dict() if self.scaler.is_enabled() else None

    def load_state_dict(self, state: Optional[Dict[str, Any]]) -> None:
        if state and self.scaler.is_enabled():
            self.scaler.load_state_dict(state)
