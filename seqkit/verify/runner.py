"""Checking hypotheses with a verifier in worker processes, each check under a time limit.

A verifier may hang (sympy simplifying an expression that never ends) or raise, and neither can
be cut short inside a thread, so the checks run in worker processes that build the verifier once
(fresh interpreters: a fork of a process in which torch has started its threads may deadlock). A check that
outlasts its limit has its worker killed and replaced and counts as ``timeout``; an exception in
the verifier (or a worker that dies) counts as ``error``; neither stops the caller.

    with VerifierPool(verifier_config("numbers"), timeout=5.0) as pool:
        verdicts = pool.first_verified([("3 Hunde", ["3 dogs", "three dogs"])])
    verdicts[0].rank            # 0: the first candidate verified
    pool.counts.summary()       # "verified 1 of 1 (0 timed out, 0 raised)"
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing import Pipe
from multiprocessing.connection import Connection, wait
from typing import Any, Deque, Dict, List, Optional, Sequence, Set, Tuple

from seqkit.core.config import to_plain
from seqkit.core.errors import SeqkitError
from seqkit.verify import VERIFIERS, VerifierConfig

log = logging.getLogger("seqkit.verify")
STATUSES = ("verified", "rejected", "timeout", "error")


@dataclass
class VerifyCounts:
    """What a run of checks found: inputs, inputs with a verified hypothesis, and checks by status."""

    inputs: int = 0
    verified: int = 0
    checks: int = 0
    rejected: int = 0
    timeouts: int = 0
    errors: int = 0

    def summary(self) -> str:
        return f"verified {self.verified} of {self.inputs} ({self.timeouts} timed out, {self.errors} raised)"


@dataclass
class Verdict:
    """One input's outcome: ``rank``, the index of the first candidate that verified (None: none
    did), and the status of each check made, in candidate order."""

    rank: Optional[int]
    statuses: List[str] = field(default_factory=list)


# what a worker runs: the parent's import path first (a plugin importable there is importable here)
_BOOT = ("import json, os, sys; sys.path[:] = json.loads(os.environ.pop('SEQKIT_VERIFIER_PATH')); "
         "from seqkit.verify.runner import serve; serve(int(sys.argv[1]))")


def serve(fd: int) -> None:
    """A worker, on its end ``fd`` of the parent's pipe: build the verifier once from the first
    message ``(config, user_dir, module)``, then answer each ``(source, hypothesis)`` with
    ``(status, message)`` until told ``None`` (or the parent is gone)."""
    import importlib
    import os
    import signal
    import sys

    os.dup2(2, 1)  # a verifier's prints go to stderr, never into the generated output
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it kills the workers
    conn = Connection(fd)
    try:
        import seqkit
        from seqkit.core.plugins import import_user_dir

        plain, user_dir, module, module_file = conn.recv()
        seqkit.import_builtin_verifiers()
        if user_dir:
            import_user_dir(user_dir)
        if plain["name"] not in VERIFIERS and module not in sys.modules:
            try:  # where the parent's verifier was registered: a module on the path, or a plugin folder
                importlib.import_module(module)
            except ImportError:
                if not module_file:
                    raise
                import_user_dir(os.path.dirname(module_file))
        if plain["name"] not in VERIFIERS:
            raise SeqkitError(f"it is registered in {module}, which a worker process cannot import: register it "
                              "in a module or a plugin folder (common.user_dir)")
        check = VERIFIERS.build(VERIFIERS.make_config(plain))
    except BaseException as e:  # noqa: BLE001 - reported to the parent as one line
        conn.send(("failed", str(e) if isinstance(e, SeqkitError) else f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", ""))
    while True:
        try:
            item = conn.recv()
        except (EOFError, OSError):
            return
        if item is None:
            return
        try:
            status, message = ("verified" if bool(check(*item)) else "rejected"), ""
        except Exception as e:  # noqa: BLE001 - a raising verifier is a counted outcome, not a crash
            status, message = "error", f"{type(e).__name__}: {e}"
        conn.send((status, message))


class _Worker:
    """One worker process (a fresh interpreter: no fork of a process running torch's threads, and
    no re-import of the caller's main script) and the parent's end of its pipe."""

    def __init__(self, setup: Tuple[Any, ...]):
        self.conn, child = Pipe()
        env = dict(os.environ, SEQKIT_VERIFIER_PATH=json.dumps([p for p in sys.path if isinstance(p, str)]))
        self.process = subprocess.Popen([sys.executable, "-c", _BOOT, str(child.fileno())],
                                        pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL)
        child.close()
        self.conn.send(setup)
        self.job: Optional[int] = None  # the input whose candidate it is checking
        self.deadline = 0.0

    def exit_code(self) -> Optional[int]:
        try:
            return self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, kill: bool = False) -> None:
        if not kill:
            try:
                self.conn.send(None)
            except OSError:
                kill = True
        if kill or self.exit_code() is None:
            self.process.kill()
            self.process.wait()
        self.conn.close()


class VerifierPool:
    """``workers`` processes running ``cfg``'s verifier, ``timeout`` seconds per check.

    The verifier is built once in each worker, which imports what the parent imported it from:
    ``user_dir`` (``common.user_dir``), else the module that registered it (a plugin folder's
    module by its folder, as common.user_dir would); a build that fails, or takes more than
    ``start_timeout`` seconds, is one :class:`SeqkitError`. :attr:`counts` adds up every
    :meth:`first_verified` call.
    """

    def __init__(self, cfg: VerifierConfig, timeout: float = 10.0, workers: int = 1, user_dir: str = "",
                 start_timeout: float = 300.0):
        if timeout <= 0 or workers < 1:
            raise SeqkitError(f"a verifier needs timeout > 0 and workers >= 1, got timeout={timeout}, workers={workers}")
        VERIFIERS.config_class(cfg.name)  # an unknown name is the listing error, before any process starts
        self.name, self.timeout, self.start_timeout = cfg.name, timeout, start_timeout
        module = getattr(VERIFIERS.builder(cfg.name), "__module__", "")
        module_file = getattr(sys.modules.get(module), "__file__", None) or ""
        self._setup = (to_plain(cfg), user_dir, module, module_file)
        self.counts = VerifyCounts()
        self._warned: Set[str] = set()
        self._workers: List[_Worker] = []
        try:
            self._workers = [_Worker(self._setup) for _ in range(workers)]
            for w in self._workers:
                self._await_ready(w)
        except BaseException:
            self.close()
            raise

    def _await_ready(self, w: _Worker) -> None:
        if not w.conn.poll(self.start_timeout):
            raise SeqkitError(f"verifier {self.name!r} took more than {self.start_timeout:g}s to build")
        try:
            status, message = w.conn.recv()
        except EOFError:
            raise SeqkitError(f"verifier {self.name!r}: its worker process died while building it "
                              f"(exit code {w.exit_code()})") from None
        if status != "ready":
            raise SeqkitError(f"verifier {self.name!r} could not be built: {message}")

    def _replace(self, w: _Worker) -> _Worker:
        """Kill ``w`` (hung, or dead) and start another worker in its place, ready for checks."""
        w.stop(kill=True)
        new = _Worker(self._setup)
        self._workers[self._workers.index(w)] = new
        self._await_ready(new)
        return new

    def first_verified(self, jobs: Sequence[Tuple[str, Sequence[str]]]) -> List[Verdict]:
        """For each ``(source, candidates)``, the first candidate, in order, that the verifier accepts.

        One check per input runs at a time, so no candidate after the one kept is checked; the
        workers check different inputs side by side."""
        verdicts = [Verdict(None) for _ in jobs]
        queue: Deque[int] = deque(i for i, (_, candidates) in enumerate(jobs) if candidates)
        busy: Dict[int, _Worker] = {}  # job -> worker checking its next candidate
        while queue or busy:
            for w in self._workers:
                if w.job is None and queue:
                    w.job = queue.popleft()
                    source, candidates = jobs[w.job]
                    w.conn.send((source, candidates[len(verdicts[w.job].statuses)]))
                    w.deadline, busy[w.job] = time.monotonic() + self.timeout, w
            left = min(w.deadline for w in busy.values()) - time.monotonic()
            answered = wait([w.conn for w in busy.values()], timeout=max(left, 0.0))
            for w in list(busy.values()):
                # polled again: an answer that came while a hung worker was being replaced is no timeout
                if w.conn in answered or w.conn.poll(0):
                    status, dead = self._answer(w)
                elif time.monotonic() >= w.deadline:
                    status, dead = "timeout", True
                    self._warn_once("timeout", f"a check took more than {self.timeout:g}s: its worker was "
                                               "killed and replaced")
                else:
                    continue
                job, w.job = w.job, None
                del busy[job]
                if dead:
                    self._replace(w)  # hung or died: a fresh worker takes its place
                self._record(verdicts[job], job, status, len(jobs[job][1]), queue)
        self.counts.inputs += len(jobs)
        self.counts.verified += sum(v.rank is not None for v in verdicts)
        return verdicts

    def _answer(self, w: _Worker) -> Tuple[str, bool]:
        """``(status, whether the worker died)`` of a worker that answered; a death is an ``error``."""
        try:
            status, message = w.conn.recv()
        except (EOFError, OSError):
            self._warn_once("error", f"its worker process died (exit code {w.exit_code()})")
            return "error", True
        if status == "error":
            self._warn_once("error", f"raised {message}")
        return status, False

    def _warn_once(self, kind: str, what: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning("verifier %s: %s (counted as %s; later ones only counted)", self.name, what, kind)

    def _record(self, verdict: Verdict, job: int, status: str, n: int, queue: Deque[int]) -> None:
        verdict.statuses.append(status)
        self.counts.checks += 1
        self.counts.rejected += status == "rejected"
        self.counts.timeouts += status == "timeout"
        self.counts.errors += status == "error"
        if status == "verified":
            verdict.rank = len(verdict.statuses) - 1
        elif len(verdict.statuses) < n:
            queue.append(job)

    def close(self) -> None:
        """Stop the workers: told to exit when idle, killed when a check is still running (an interrupt)."""
        for w in self._workers:
            w.stop(kill=w.job is not None)
        self._workers = []

    def __enter__(self) -> "VerifierPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
