"""seqkit: train and use sequence models from the shell.

``import_builtin_components()`` registers every built-in component (tasks, models, criteria,
optimizers, LR schedulers, tokenizers), ``import_builtin_verifiers()`` the verifiers
(:mod:`seqkit.verify`); see :mod:`seqkit.core.registry`. Importing ``seqkit`` alone
imports nothing heavy (no torch).
"""

__version__ = "0.1.0"


def import_builtin_components() -> None:
    """Import the modules whose decorators fill the registries (cheap, idempotent)."""
    import importlib

    from seqkit import criteria, models, optim, tasks, tokenizers  # noqa: F401

    for package in (models, tasks):
        for name in package.BUILTIN:
            importlib.import_module(f"{package.__name__}.{name}")


def import_builtin_verifiers() -> None:
    """Import the modules of the built-in verifiers (``seqkit.verify.BUILTIN``; cheap, idempotent).
    Apart from import_builtin_components: a verifier may import something heavy (sympy)."""
    import importlib

    from seqkit import verify

    for name in verify.BUILTIN:
        importlib.import_module(name)
