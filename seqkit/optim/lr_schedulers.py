"""Learning-rate schedules as pure functions of the update number.

A scheduler is built as ``LR_SCHEDULERS.build(cfg, peak_lr, max_update)`` and called as
``scheduler.lr_at(num_updates)``; having no state of its own makes resume exact by construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import LR_SCHEDULERS


def _warmup(num_updates: int, warmup: int, init_lr: float, peak: float) -> float:
    return init_lr + (peak - init_lr) * num_updates / warmup


@dataclass
class InverseSqrtConfig:
    name: str = arg("inverse_sqrt", "registry name")
    warmup_updates: int = arg(4000, "linear warmup from warmup_init_lr to the peak lr over this many updates", ge=0)
    warmup_init_lr: float = arg(1e-7, "learning rate at update 0", ge=0)


@LR_SCHEDULERS.register("inverse_sqrt", InverseSqrtConfig)
class InverseSqrtSchedule:
    """Warmup, then lr = peak * sqrt(warmup / num_updates) (Vaswani et al.)."""

    def __init__(self, cfg: InverseSqrtConfig, peak_lr: float, max_update: int):
        self.cfg, self.peak = cfg, peak_lr

    def lr_at(self, n: int) -> float:
        w = self.cfg.warmup_updates
        if n < w:
            return _warmup(n, w, self.cfg.warmup_init_lr, self.peak)
        return self.peak * math.sqrt(max(w, 1) / max(n, 1))


@dataclass
class CosineConfig:
    name: str = arg("cosine", "registry name")
    warmup_updates: int = arg(0, "linear warmup updates", ge=0)
    warmup_init_lr: float = arg(0.0, "learning rate at update 0", ge=0)
    min_lr: float = arg(0.0, "learning rate at the end of the cosine", ge=0)
    period_updates: int = arg(0, "length of the cosine after warmup (0: optimization.max_update - warmup)", ge=0)


@LR_SCHEDULERS.register("cosine", CosineConfig)
class CosineSchedule:
    """Warmup, then half a cosine from the peak down to min_lr; min_lr afterwards."""

    def __init__(self, cfg: CosineConfig, peak_lr: float, max_update: int):
        self.cfg, self.peak = cfg, peak_lr
        if not cfg.period_updates and max_update <= cfg.warmup_updates:  # else the LR would drop at once
            raise SeqkitError("lr_scheduler=cosine needs lr_scheduler.period_updates or an optimization.max_update "
                              "beyond its warmup (a run stopped by time has no max_update)")
        self.period = cfg.period_updates or max_update - cfg.warmup_updates

    def lr_at(self, n: int) -> float:
        c = self.cfg
        if n < c.warmup_updates:
            return _warmup(n, c.warmup_updates, c.warmup_init_lr, self.peak)
        t = min(1.0, (n - c.warmup_updates) / self.period)
        return c.min_lr + 0.5 * (self.peak - c.min_lr) * (1 + math.cos(math.pi * t))


@dataclass
class PolynomialDecayConfig:
    name: str = arg("polynomial_decay", "registry name")
    warmup_updates: int = arg(0, "linear warmup updates", ge=0)
    end_learning_rate: float = arg(0.0, "learning rate reached at total_num_update", ge=0)
    power: float = arg(1.0, "decay exponent (1.0 = linear)", gt=0)
    total_num_update: int = arg(0, "update at which the decay ends (0: optimization.max_update)", ge=0)


@LR_SCHEDULERS.register("polynomial_decay", PolynomialDecayConfig)
class PolynomialDecaySchedule:
    """Warmup from 0, then (peak - end) * (1 - progress)^power + end."""

    def __init__(self, cfg: PolynomialDecayConfig, peak_lr: float, max_update: int):
        self.cfg, self.peak = cfg, peak_lr
        if not (cfg.total_num_update or max_update):
            raise SeqkitError("lr_scheduler=polynomial_decay needs lr_scheduler.total_num_update or "
                              "optimization.max_update (a run stopped by time has no max_update)")
        self.total = cfg.total_num_update or max_update

    def lr_at(self, n: int) -> float:
        c = self.cfg
        if n < c.warmup_updates:
            return _warmup(n, c.warmup_updates, 0.0, self.peak)
        if n >= self.total:
            return c.end_learning_rate
        frac = 1.0 - (n - c.warmup_updates) / max(1, self.total - c.warmup_updates)
        return (self.peak - c.end_learning_rate) * frac**c.power + c.end_learning_rate


@dataclass
class FixedConfig:
    name: str = arg("fixed", "registry name")
    warmup_updates: int = arg(0, "linear warmup from 0 over this many updates, then constant", ge=0)


@LR_SCHEDULERS.register("fixed", FixedConfig)
class FixedSchedule:
    """Constant learning rate after an optional linear warmup."""

    def __init__(self, cfg: FixedConfig, peak_lr: float, max_update: int):
        self.cfg, self.peak = cfg, peak_lr

    def lr_at(self, n: int) -> float:
        if n < self.cfg.warmup_updates:
            return _warmup(n, self.cfg.warmup_updates, 0.0, self.peak)
        return self.peak


@dataclass
class SlantedTriangularConfig:
    name: str = arg("slanted_triangular", "registry name")
    cut_frac: float = arg(0.1, "share of the updates spent rising to the peak", gt=0, lt=1)
    ratio: float = arg(32.0, "how much smaller the lowest learning rate is than the peak", ge=1)
    total_num_update: int = arg(0, "updates the triangle spans (0: optimization.max_update)", ge=0)


@LR_SCHEDULERS.register("slanted_triangular", SlantedTriangularConfig)
class SlantedTriangularSchedule:
    """ULMFiT's slanted triangular rate (Howard & Ruder 2018, eq. 3): a short linear rise over
    ``cut_frac`` of the updates from peak / ratio to the peak, a long linear fall back to peak / ratio."""

    def __init__(self, cfg: SlantedTriangularConfig, peak_lr: float, max_update: int):
        self.cfg, self.peak = cfg, peak_lr
        self.total = cfg.total_num_update or max_update
        if not self.total:
            raise SeqkitError("lr_scheduler=slanted_triangular needs lr_scheduler.total_num_update or "
                              "optimization.max_update (a run stopped by time has no max_update)")
        self.cut = max(1, math.floor(self.total * cfg.cut_frac))

    def lr_at(self, n: int) -> float:
        c, cut = self.cfg, self.cut
        if n < cut:
            p = n / cut
        else:
            p = max(0.0, 1.0 - (n - cut) / max(1.0, cut * (1.0 / c.cut_frac - 1.0)))
        return self.peak * (1.0 + p * (c.ratio - 1.0)) / c.ratio
