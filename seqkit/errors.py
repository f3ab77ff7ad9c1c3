"""Deprecated old path of :mod:`seqkit.core.errors`, kept so that users' plugins raising
``seqkit.errors.SeqkitError`` keep working (it is the same class, still printed as one line);
import from ``seqkit.core.errors`` instead. Importing this module emits a DeprecationWarning (shown
where a plugin's own tests or ``python -W default`` run, hidden from command-line users)."""

import warnings

from seqkit.core.errors import SeqkitError  # noqa: F401

warnings.warn("seqkit.errors is deprecated: import from seqkit.core.errors", DeprecationWarning, stacklevel=2)
