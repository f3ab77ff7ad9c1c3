"""A test module's long subprocesses (the tests/e2e/*.sh pipelines, benchmark runs) run side by side,
one per core, while the module's other tests go on: each is a chain of one-thread commands, so one
at a time leaves the second core of a 2-core machine idle. Imported by the tests that use it
(conftest puts this folder on sys.path)."""

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Dict, Hashable, List, Optional, Tuple

# key -> (argv, work folder, environment)
Jobs = Dict[Hashable, Tuple[List[Any], Path, Dict[str, str]]]


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class SideBySide:
    """Up to ``slots`` of ``jobs`` (default: one per core) run at once in ``cwd``, started in the order
    given by a watcher thread as others end; ``result(key)`` waits for that job and returns its
    ``subprocess.CompletedProcess``, stdout and stderr as text (kept beside the work folder as
    ``WORK.stdout`` / ``WORK.stderr``). A job past ``timeout`` seconds is killed with the commands it
    started and returns code -9 and a line saying so. ``close()`` kills what still runs."""

    def __init__(self, jobs: Jobs, timeout: float, slots: Optional[int] = None, cwd: Optional[Path] = None):
        self.timeout, self.slots, self.cwd = timeout, max(1, slots or cores()), cwd
        self.pending = list(jobs.items())
        self.running: Dict[Hashable, Tuple[subprocess.Popen, float, Path]] = {}
        self.done: Dict[Hashable, subprocess.CompletedProcess] = {}
        self.lock, self.closed = threading.Lock(), False
        with self.lock:
            self._fill()
        threading.Thread(target=self._watch, daemon=True).start()

    def _fill(self) -> None:
        while self.pending and len(self.running) < self.slots:
            key, (argv, work, env) = self.pending.pop(0)
            with open(f"{work}.stdout", "w") as out, open(f"{work}.stderr", "w") as err:
                # a session of its own: killing it kills the commands the script started
                proc = subprocess.Popen([str(a) for a in argv], env=env, stdout=out, stderr=err, cwd=self.cwd,
                                        start_new_session=True)
            self.running[key] = (proc, time.monotonic(), work)

    def _reap(self) -> None:
        for key, (proc, started, work) in list(self.running.items()):
            late = proc.poll() is None and time.monotonic() - started > self.timeout
            if late:
                _kill(proc)
            if proc.returncode is None:
                continue
            del self.running[key]
            out, err = (Path(f"{work}.{name}").read_text(encoding="utf-8", errors="replace")
                        for name in ("stdout", "stderr"))
            if late:
                err += f"\n(killed: still running after {self.timeout:.0f} s)\n"
            self.done[key] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        self._fill()

    def _watch(self) -> None:
        while True:
            with self.lock:
                if self.closed or not (self.running or self.pending):
                    return
                self._reap()
            time.sleep(0.1)

    def result(self, key: Hashable) -> subprocess.CompletedProcess:
        while True:
            with self.lock:
                if key in self.done:
                    return self.done[key]
                if key not in self.running and key not in dict(self.pending):
                    raise KeyError(f"no job {key!r}")
            time.sleep(0.1)

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.pending.clear()
            for proc, _, _ in self.running.values():
                _kill(proc)
            self.running.clear()


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def selected(request: Any, test: str, param: str) -> List[Any]:
    """The values of ``param`` in the collected items of ``test`` in the requesting module: the jobs
    worth starting when ``-k`` or a node id keeps only some."""
    return [item.callspec.params[param] for item in request.session.items
            if getattr(item, "module", None) is request.module and getattr(item, "originalname", None) == test]
