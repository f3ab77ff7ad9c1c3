"""Optimizers and learning-rate schedulers (``seqkit.core.registry.OPTIMIZERS`` / ``LR_SCHEDULERS``)."""

from seqkit.optim import lr_schedulers, optimizers  # noqa: F401
