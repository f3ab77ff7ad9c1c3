"""The ``integral`` verifier (``generation.verifier=integral``): a hypothesis is right when its
derivative is the source, both in prefix tokens (:mod:`seqkit.symbolic.check` has the checks).

Importing this module registers the verifier without importing sympy; building it imports sympy
(``pip install 'seqkit[symbolic]'``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.verify import VERIFIERS, VerifierConfig


@dataclass
class IntegralConfig(VerifierConfig):
    name: str = arg("integral", "registry name")
    time_limit: float = arg(5.0, "seconds sympy may spend on one check (mostly simplifying d/dx(hypothesis) - "
                                 "source); a check past it rejects the hypothesis", gt=0)
    numeric_accept: bool = arg(False, "also accept a hypothesis that sympy did not simplify to the source in time "
                                      "but that agrees with it at 3 or more check points: probabilistic, not a proof")


@VERIFIERS.register("integral", IntegralConfig)
def integral(cfg: IntegralConfig) -> Callable[[str, str], bool]:
    """``(source, hypothesis) -> bool``: whether d/dx(hypothesis) = source."""
    if cfg.model:
        raise SeqkitError(f"verifier.model={cfg.model}: the integral verifier checks with sympy and reads no "
                          "checkpoint; drop it")
    try:
        from seqkit.symbolic.check import is_antiderivative
    except ImportError as e:
        raise SeqkitError(f"the integral verifier needs sympy ({e}); pip install 'seqkit[symbolic]'") from None
    return functools.partial(is_antiderivative, limit=cfg.time_limit, numeric_accept=cfg.numeric_accept)
