"""Deprecated old path of :mod:`seqkit.core.registry`, kept so that users' plugins written as the
README showed (``from seqkit.registry import MODELS``) keep working; import from
``seqkit.core.registry`` instead. Importing this module emits a DeprecationWarning (shown where a
plugin's own tests or ``python -W default`` run, hidden from command-line users)."""

import warnings

from seqkit.core.registry import (CRITERIA, GROUPS, LR_SCHEDULERS, MODELS, OPTIMIZERS, TASKS,  # noqa: F401
                                  TOKENIZERS, Registry)

warnings.warn("seqkit.registry is deprecated: import from seqkit.core.registry", DeprecationWarning, stacklevel=2)
