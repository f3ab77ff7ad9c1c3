"""Tasks: what data a run reads and how it becomes batches, models and criteria.

A task (``seqkit.registry.TASKS``) is built as ``TASKS.build(cfg)`` and offers the trainer
``load_dataset``, ``build_model``, ``build_criterion``, ``valid_metrics`` and ``checkpoint_state``.
"""

from seqkit.tasks import classification, denoising, language_modeling, masked_lm, translation  # noqa: F401
