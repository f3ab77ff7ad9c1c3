"""The ground floor: what every other package may import, and nothing here imports them.

- :mod:`~seqkit.core.errors`: :class:`SeqkitError`, the error a user sees as one line;
- :mod:`~seqkit.core.config`: ``arg()`` for typed dataclass configs, range and key checks, plain
  data <-> dataclasses, and ``CommonConfig`` (the settings every command that runs a model shares);
- :mod:`~seqkit.core.registry`: the one generic ``Registry`` and its instances (tasks, models,
  criteria, optimizers, LR schedulers, tokenizers);
- :mod:`~seqkit.core.plugins`: importing a user's plugin folder (``common.user_dir``);
- :mod:`~seqkit.core.checkpoints`: checkpoint files (atomic writes, verified reads, epoch files,
  RNG state) and ``load_for_inference``, a trained task and model back from one file;
- :mod:`~seqkit.core.io`: strict UTF-8 reading, atomic writes, folders that appear whole;
- :mod:`~seqkit.core.cpu` and :mod:`~seqkit.core.allocator`: CPU features for low precision, and
  the allocator settings every command applies.
"""
