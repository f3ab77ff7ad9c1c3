"""``generation.verifier=numbers``: a translation keeps the numbers of its source.

A number dropped, added or changed is among the commonest errors a translation model makes where
BLEU hardly sees it (a date, a price, a count), and the numeral check of bitext filters catches
it without a model: the hypothesis must hold the same digit runs as the source, as many times
each. Digit runs, not whole numbers, so that locales agree: German ``3,5`` and ``1.000`` give the
same runs as English ``3.5`` and ``1,000``. Numbers written out in words are not seen.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from seqkit.verify import VERIFIERS, VerifierConfig

_DIGITS = re.compile(r"\d+")


def digit_runs(text: str) -> Counter:
    """The digit runs of ``text`` as a multiset, leading zeros kept, other scripts' digits as ASCII
    (``"٣"`` is ``"3"``)."""
    return Counter("".join(str(int(c)) for c in run) for run in _DIGITS.findall(text))


@dataclass
class NumbersConfig(VerifierConfig):
    name: str = "numbers"


@VERIFIERS.register("numbers", NumbersConfig)
def numbers(cfg: NumbersConfig) -> Callable[[str, str], bool]:
    """Accept a hypothesis holding the same digit runs as its source, as many times each."""
    return lambda source, hypothesis: digit_runs(source) == digit_runs(hypothesis)
