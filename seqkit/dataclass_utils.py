"""Deprecated old path of :mod:`seqkit.core.config`, kept so that users' plugins written as the
README showed (``from seqkit.dataclass_utils import arg``) keep working; import from
``seqkit.core.config`` instead. Importing this module emits a DeprecationWarning (shown where a
plugin's own tests or ``python -W default`` run, hidden from command-line users)."""

import warnings

from seqkit.core.config import (arg, check_keys, check_ranges, describe_range, field_help,  # noqa: F401
                                from_plain, to_plain)

warnings.warn("seqkit.dataclass_utils is deprecated: import from seqkit.core.config", DeprecationWarning,
              stacklevel=2)
