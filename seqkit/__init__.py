"""seqkit: train and use sequence models from the shell.

Importing ``seqkit`` registers every built-in component (tasks, models, criteria, optimizers,
LR schedulers, tokenizers); see :mod:`seqkit.registry`.
"""

__version__ = "0.1.0"


def import_builtin_components() -> None:
    """Import the modules whose decorators fill the registries (cheap, idempotent)."""
    from seqkit import criteria, models, optim, tasks, tokenizers  # noqa: F401
