"""Small C libraries of seqkit's own, built at first use and loaded with ctypes.

Used where a loop is the whole cost and numpy or torch cannot say it without temporaries or random
memory waits: word2vec's row loops (``seqkit/core/rowkernels.c``) and the epoch's shuffle and
length sort (``seqkit/data/orderkernels.c``). Each source is compiled with the system's C compiler
(``$CC``, else ``cc``; ``-O3 -march=native``, no OpenMP runtime: one thread) into
``$SEQKIT_CACHE`` (default ``~/.cache/seqkit``), once per source, compiler and CPU. Where no
compiler works, :meth:`CLibrary.available` is False, :meth:`CLibrary.why_unavailable` says why, and
the callers keep their numpy or torch path. Calls go through ctypes, which releases the GIL for
their length.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from seqkit.core.errors import SeqkitError

log = logging.getLogger("seqkit.cbuild")

FLAGS = ["-O3", "-march=native", "-fopenmp-simd", "-fno-math-errno", "-std=gnu11", "-shared", "-fPIC"]

Signatures = Dict[str, Tuple[Optional[type], List[type]]]  # name: (restype, argtypes)


def cache_dir() -> Path:
    """Where built libraries are kept: ``$SEQKIT_CACHE`` or ``~/.cache/seqkit``."""
    return Path(os.environ.get("SEQKIT_CACHE") or Path.home() / ".cache" / "seqkit")


def _cpu_tag() -> str:
    """What ``-march=native`` depends on: the CPU's model name and flags (a library built for one
    CPU is not loaded on another)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "|".join(sorted({ln for ln in lines if ln.startswith(("model name", "flags"))}))
    except OSError:
        return os.uname().machine


class CLibrary:
    """One C source (``source``), its functions' ctypes ``signatures``, and ``what`` it is called in
    messages ("the row kernels"). Built and loaded on the first :meth:`library` call."""

    def __init__(self, source: Path, signatures: Signatures, what: str):
        self.source, self.signatures, self.what = source, signatures, what
        self._lib: Optional[ctypes.CDLL] = None
        self._why: Optional[str] = None  # why it could not be built (after the first try)

    def _build(self) -> ctypes.CDLL:
        """Compile the source (unless a library for this source, compiler and CPU is cached) and load it."""
        compiler = os.environ.get("CC", "cc")
        key = hashlib.sha256("\n".join([self.source.read_text(), compiler, " ".join(FLAGS), _cpu_tag()]).encode())
        target = cache_dir() / f"{self.source.stem}-{key.hexdigest()[:16]}.so"
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
            os.close(fd)
            try:
                done = subprocess.run([compiler, *FLAGS, str(self.source), "-o", tmp, "-lm"], capture_output=True,
                                      text=True)
                if done.returncode != 0:
                    first = (done.stderr.strip().splitlines() or ["no message"])[0]
                    raise OSError(f"{compiler} failed: {first}")
                os.replace(tmp, target)  # atomic: a concurrent build of the same key writes the same bytes
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        lib = ctypes.CDLL(str(target))
        for name, (restype, argtypes) in self.signatures.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        return lib

    def library(self) -> Optional[ctypes.CDLL]:
        """The loaded library, built on the first call; None where it cannot be (:meth:`why_unavailable`)."""
        if self._lib is None and self._why is None:
            try:
                self._lib = self._build()
                log.debug("%s: %s", self.what, self.source)
            except (OSError, FileNotFoundError, AttributeError) as e:
                self._why = f"{self.what} could not be built ({e})"
                log.info("%s: the fallback path is used", self._why)
        return self._lib

    def available(self) -> bool:
        return self.library() is not None

    def why_unavailable(self) -> str:
        self.library()
        return self._why or ""

    def require(self, setting: str, instead: str = "the auto or torch setting") -> None:
        """For a setting that asks for the library by name: one line when it cannot be built."""
        if not self.available():
            raise SeqkitError(f"{setting} but {self.why_unavailable()}; use {instead}")
