"""fp32 / bf16 / fp16 training: autocast, loss scaling for fp16, clipping, skipping bad steps."""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Dict, Iterable, List, Optional

import torch

from seqkit.core.cpu import prepare_low_precision
from seqkit.core.errors import SeqkitError

log = logging.getLogger("seqkit.train")


class Precision:
    """Owns everything that differs between precisions; master weights always stay fp32 (in the model, or
    in the optimizer with ``common.param_dtype``: :mod:`seqkit.training.master_weights`)."""

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
        self.weights_cast = False  # the model holds bf16/fp16 weights itself (common.param_dtype): no autocast

    def autocast(self) -> Any:
        if self.dtype is None or self.weights_cast:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def unscale_and_clip(self, optimizer: torch.optim.Optimizer, params: Iterable[torch.nn.Parameter],
                         clip_norm: float) -> torch.Tensor:
        """Unscale fp16 gradients, clip to ``clip_norm`` (0: only measure); returns the norm, a 0-d
        tensor left on the device (reading it would make the host wait for the GPU)."""
        self.scaler.unscale_(optimizer)
        params = [p for p in params if p.grad is not None]
        if not params:
            return torch.zeros((), device=self.device)
        if any(p.grad.is_sparse for p in params):  # nn.Embedding(sparse=True): clip_grad_norm_ reads dense ones only
            return clip_sparse(params, clip_norm)
        norm = torch.nn.utils.clip_grad_norm_(params, clip_norm if clip_norm > 0 else float("inf"))
        if hasattr(norm, "full_tensor"):  # FSDP: a DTensor holding the global norm
            norm = norm.full_tensor()
        return norm.detach()

    def step(self, optimizer: torch.optim.Optimizer, gnorm: torch.Tensor) -> torch.Tensor:
        """Step unless the gradients are not finite; returns 1.0 (stepped) or 0.0 (skipped) as a
        0-d tensor on the device. torch's fused optimizers skip on the device (they read
        ``found_inf``, as under GradScaler), so the host never waits; other optimizers read the
        norm first (one host read). fp16: an overflow also halves the loss scale."""
        finite = torch.isfinite(gnorm)
        if self.scaler.is_enabled():
            self.scaler.step(optimizer)  # skips the step itself on inf/nan (on the device when fused)
            self.scaler.update()
            return finite.float()
        if getattr(optimizer, "_step_supports_amp_scaling", False):  # torch fused: skip on the device
            optimizer.grad_scale, optimizer.found_inf = None, (~finite).float()
            try:
                optimizer.step()
            finally:
                del optimizer.grad_scale, optimizer.found_inf
            return finite.float()
        if bool(finite):
            optimizer.step()
        return finite.float()

    def count_skipped(self, skipped: int) -> Optional[str]:
        """Record ``skipped`` steps found since the last read; returns the warning line (None when
        none). fp16 stops when the loss scale has fallen below its floor."""
        if not skipped:
            return None
        if not self.scaler.is_enabled():
            self.skipped_steps += skipped
            return f"non-finite gradient norm: {skipped} step(s) skipped ({self.skipped_steps} so far)"
        self.overflows += skipped
        scale = self.scaler.get_scale()
        if scale < self.min_scale:
            raise SeqkitError(
                f"fp16 loss scale fell below common.fp16_min_loss_scale={self.min_scale:g}: the loss keeps "
                "overflowing; lower optimizer.lr, use optimization.clip_norm, or train with common.precision=bf16/fp32"
            )
        return f"fp16 overflow: {skipped} step(s) skipped, loss scale now {scale:g} ({self.overflows} overflows so far)"

    def state_dict(self) -> Optional[Dict[str, Any]]:
        return self.scaler.state_dict() if self.scaler.is_enabled() else None

    def load_state_dict(self, state: Optional[Dict[str, Any]]) -> None:
        if state and self.scaler.is_enabled():
            self.scaler.load_state_dict(state)


def clip_sparse(params: List[torch.nn.Parameter], clip_norm: float) -> torch.Tensor:
    """The global norm of gradients some of which are sparse (word2vec's tables), clipped to
    ``clip_norm`` (0: only measured); a sparse gradient is coalesced first (rows summed per index)."""
    squares = []
    for p in params:
        if p.grad.is_sparse:
            p.grad = p.grad.coalesce()
            squares.append(torch.linalg.vector_norm(p.grad.values().float()).square())  # no (N, D) temporary
        else:
            squares.append(torch.linalg.vector_norm(p.grad.float()).square())
    norm = torch.stack(squares).sum().sqrt()
    if clip_norm > 0:
        scale = (clip_norm / (norm + 1e-6)).clamp(max=1.0)
        for p in params:
            p.grad.mul_(scale)
    return norm
