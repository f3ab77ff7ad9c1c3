"""The training set and its first epoch's batches, made in a thread while the trainer builds the rest.

On a corpus of tens of millions of pairs, opening the training split (the index check reads every
size and offset) and one epoch's token-budget batching are seconds of numpy that release the GIL,
while building the optimizer imports ``torch._dynamo`` (torch's optimizers do, about a second of
Python). Side by side on two cores the first update comes that much sooner (docs/scale.md).

Nothing about the batches changes: the thread makes the same ``dataset.batches(...)`` call the
trainer would, with the same arguments, and the trainer takes its result only for that epoch and
when no example is left out; a run that resumes into a later epoch, or skips examples too long
for the model, computes its batches as before. Datasets draw their randomness from their own
seeded generators, never torch's or numpy's global ones, so the thread cannot move a model's
initialisation or a restored RNG state. Only unsharded, unpacked training sets are made ahead.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

SWITCH_S = 0.0002  # the GIL handed over this often while the thread works (Python's default: 5 ms)
BatchArgs = Tuple[int, int, int, int]  # (max_tokens, max_sentences, seed, epoch)
_switch = {"threads": 0, "saved": 0.005}
_switch_lock = threading.Lock()


def _quick_switch(on: bool) -> None:
    """While any thread of this module works, the GIL changes hands every ``SWITCH_S``: the load's
    Python steps then wait a fraction of a millisecond for the trainer's thread, not 5 ms each."""
    with _switch_lock:
        if on:
            if not _switch["threads"]:
                _switch["saved"] = sys.getswitchinterval()
                sys.setswitchinterval(SWITCH_S)
            _switch["threads"] += 1
        else:
            _switch["threads"] -= 1
            if not _switch["threads"]:
                sys.setswitchinterval(_switch["saved"])


class Ahead:
    """Loads a dataset with ``load()`` in a daemon thread, then its batches for ``args``.

    ``dataset()`` waits for the load and re-raises its error in the caller's thread (a bad data
    folder still ends the run with its one line); ``batches(args, exclude)`` hands the batches over
    once, when they were made for ``args`` and ``exclude`` is empty, else None."""

    def __init__(self, load: Callable[[], Any], args: BatchArgs):
        self.args = args
        self._dataset: Any = None
        self._batches: Optional[List[np.ndarray]] = None
        self._error: Optional[BaseException] = None
        self._loaded = threading.Event()
        self._thread = threading.Thread(target=self._work, args=(load,), name="seqkit-train-set", daemon=True)
        self._thread.start()

    def _work(self, load: Callable[[], Any]) -> None:
        _quick_switch(True)
        try:
            self._work_on(load)
        finally:
            _quick_switch(False)

    def _work_on(self, load: Callable[[], Any]) -> None:
        try:
            self._dataset = load()
        except BaseException as e:  # noqa: BLE001 - handed to the trainer's thread by dataset()
            self._error = e
            return
        finally:
            self._loaded.set()
        max_tokens, max_sentences, seed, epoch = self.args
        try:
            self._batches = self._dataset.batches(max_tokens, max_sentences, seed, epoch, shuffle=True, exclude=None)
        except Exception:  # noqa: BLE001 - the trainer's own call meets the same error and reports it
            self._batches = None

    def dataset(self) -> Any:
        """The loaded dataset (waits for it); the load's error is raised here."""
        self._loaded.wait()
        if self._error is not None:
            raise self._error
        return self._dataset

    def batches(self, args: BatchArgs, exclude: Optional[np.ndarray]) -> Optional[List[np.ndarray]]:
        """The batches made ahead (waits for them) when they are the ones ``args`` and ``exclude``
        ask for; given once."""
        if args != self.args or (exclude is not None and len(exclude)):
            return None
        self._thread.join()
        batches, self._batches = self._batches, None
        return batches
