"""Tasks: what data a run reads and how it becomes batches, models and criteria.

A task (``seqkit.core.registry.TASKS``) is built as ``TASKS.build(cfg)`` and offers the trainer
``load_dataset``, ``build_model``, ``build_criterion``, ``valid_metrics`` and ``checkpoint_state``.

Importing this package registers nothing; ``seqkit.import_builtin_components()`` imports the
modules below. ``translation`` imports torch only where it reads data or builds a model, so
``seqkit-generate engine=ctranslate2`` rebuilds its task from an export without torch.
"""

BUILTIN = ("classification", "denoising", "language_modeling", "masked_lm", "translation", "sentence_order",
           "word2vec", "permutation_lm", "xlm",
           "mass")
