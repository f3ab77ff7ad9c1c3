"""What ``benchmarks/scale.py`` measures with: synthetic parallel corpora streamed to disk, and a
command run as a child process whose whole process tree's memory is polled from ``/proc``.

No psutil: every 0.2 s the tree (the child and all its descendants, found by their parent ids in
``/proc/*/stat``) is summed, RSS from ``/proc/PID/status`` and PSS from ``/proc/PID/smaps_rollup``
(forked workers share their parent's pages, which RSS counts once per process and PSS splits
between them). The child's stderr is read line by line and each line stamped with its arrival time
(sub-second, where the log's own timestamps have whole seconds).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import threading
import time
from typing import Dict, Iterator, List, Optional, Tuple

POLL_S = 0.2
TATOEBA = "tatoeba_deu_eng"


# -- corpora ------------------------------------------------------------------------------------

def find_tatoeba(repo_root: str) -> Optional[str]:
    """``$SEQKIT_DATA/tatoeba_deu_eng/deu.txt``, else ``../shared/data/...`` beside the checkout, else None."""
    for base in (os.environ.get("SEQKIT_DATA", ""), os.path.join(repo_root, "..", "shared", "data")):
        path = os.path.join(base, TATOEBA, "deu.txt")
        if base and os.path.isfile(path):
            return os.path.abspath(path)
    return None


def read_tatoeba(path: str) -> List[Tuple[str, str]]:
    """(de, en) pairs of Tatoeba's ``en \\t de [\\t attribution]`` lines (170k pairs, 12 MB)."""
    pairs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) >= 2 and cols[0].strip() and cols[1].strip():
                pairs.append((cols[1].strip(), cols[0].strip()))
    return pairs


def generated_pairs(seed: int, vocab: int = 8000) -> Iterator[Tuple[str, str]]:
    """Endless seeded (de, en) pairs of random words, Zipf-distributed, 3 to 20 words a side."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = {side: ["".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(vocab)] for side in "de"}
    cum, total = [], 0.0
    for rank in range(1, vocab + 1):
        total += 1.0 / rank
        cum.append(total)
    while True:
        n = rng.randint(3, 20)
        de = rng.choices(words["d"], cum_weights=cum, k=n)
        en = rng.choices(words["e"], cum_weights=cum, k=max(2, n + rng.randint(-2, 2)))
        yield " ".join(de), " ".join(en)


def corpus_pairs(base: Optional[List[Tuple[str, str]]], seed: int) -> Iterator[Tuple[str, str]]:
    """The base pairs repeated with the repeat number appended to each side (so lines differ), or
    generated pairs when ``base`` is None."""
    if base is None:
        yield from generated_pairs(seed)
        return
    repeat = 0
    while True:
        for de, en in base:
            yield f"{de} {repeat}", f"{en} {repeat}"
        repeat += 1


def write_corpus(folder: str, splits: Dict[str, int], pairs: Iterator[Tuple[str, str]]) -> int:
    """``folder/{split}.de`` and ``.en`` with ``splits[split]`` pairs each, streamed; returns the bytes written."""
    os.makedirs(folder, exist_ok=True)
    written = 0
    for split, n in splits.items():
        with open(os.path.join(folder, f"{split}.de"), "w", encoding="utf-8", buffering=1 << 20) as fde, \
                open(os.path.join(folder, f"{split}.en"), "w", encoding="utf-8", buffering=1 << 20) as fen:
            for _ in range(n):
                de, en = next(pairs)
                fde.write(de + "\n")
                fen.write(en + "\n")
        written += sum(os.path.getsize(os.path.join(folder, f"{split}.{side}")) for side in ("de", "en"))
    return written


def mean_pair_bytes(base: Optional[List[Tuple[str, str]]]) -> float:
    """Bytes of one pair on disk (both sides, the repeat suffix included), for the disk check."""
    if base is None:
        return 2 * 11.5 * 6.5 + 2  # two sides of ~11.5 words of ~5.5 letters and a space
    sample = base[:: max(1, len(base) // 2000)]
    return sum(len(de.encode()) + len(en.encode()) + 2 for de, en in sample) / len(sample) + 2 * 4


def free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


# -- the process tree ---------------------------------------------------------------------------

def _children_map() -> Dict[int, List[int]]:
    """parent pid -> child pids, for every process /proc lists now."""
    kids: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        ppid = int(stat[stat.rfind(b")") + 2:].split()[1])  # after "(comm)": state, ppid
        kids.setdefault(ppid, []).append(int(name))
    return kids


def tree(root: int) -> List[int]:
    kids, out, todo = _children_map(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def _kb_fields(path: str, keys: Tuple[str, ...]) -> Dict[str, int]:
    """``Key:  N kB`` lines of a /proc file (empty when unreadable)."""
    out: Dict[str, int] = {}
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in keys:
                    out[key] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return out


class TreeMemory:
    """Peaks of a process tree's summed RSS and PSS, polled every POLL_S in a thread."""

    def __init__(self, root: int):
        self.root = root
        self.peak_rss_kb = self.peak_pss_kb = self.peak_hwm_kb = 0
        self.pss_readable = False
        self.pids_seen: set = set()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        rss = pss = 0
        for pid in tree(self.root):
            status = _kb_fields(f"/proc/{pid}/status", ("VmRSS", "VmHWM"))
            if not status:
                continue
            self.pids_seen.add(pid)
            rss += status.get("VmRSS", 0)
            self.peak_hwm_kb = max(self.peak_hwm_kb, status.get("VmHWM", 0))
            rollup = _kb_fields(f"/proc/{pid}/smaps_rollup", ("Pss",))
            if "Pss" in rollup:
                self.pss_readable = True
                pss += rollup["Pss"]
        self.peak_rss_kb, self.peak_pss_kb = max(self.peak_rss_kb, rss), max(self.peak_pss_kb, pss)
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(POLL_S)

    def __enter__(self) -> "TreeMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def figures(self) -> dict:
        return {"peak_rss_mb": round(self.peak_rss_kb / 1024, 1),
                "peak_pss_mb": round(self.peak_pss_kb / 1024, 1) if self.pss_readable else None,
                "peak_single_process_hwm_mb": round(self.peak_hwm_kb / 1024, 1),
                "processes_seen": len(self.pids_seen), "memory_samples": self.samples}


# -- a measured child ---------------------------------------------------------------------------

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| (\w+) \| ([\w.]+) \| (.*)$")


def _kill_tree(root: int) -> None:
    """SIGKILL the child and its workers (only the tree this benchmark started)."""
    for pid in tree(root):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def run_measured(cmd: List[str], env: Dict[str, str], cwd: str, timeout: float) -> dict:
    """Run ``cmd``; its wall time, return code, tree memory peaks and stderr lines with arrival times."""
    lines: List[Tuple[float, str]] = []
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out_chunks: List[str] = []
    reader = threading.Thread(target=lambda: out_chunks.append(proc.stdout.read()), daemon=True)
    reader.start()
    killer = threading.Timer(timeout, _kill_tree, (proc.pid,))  # the stderr loop below ends when the child does
    killer.start()
    with TreeMemory(proc.pid) as mem:
        for line in proc.stderr:
            lines.append((round(time.monotonic() - start, 3), line.rstrip("\n")))
        rc = proc.wait()
    wall = time.monotonic() - start
    timed_out = not killer.is_alive()
    killer.cancel()
    reader.join()
    return {"rc": rc, "timed_out": timed_out, "wall_s": round(wall, 3), **mem.figures(), "stderr": lines,
            "stdout": "".join(out_chunks)}


def log_messages(stderr: List[Tuple[float, str]], logger_prefix: str = "seqkit") -> List[dict]:
    """The INFO/WARNING messages of seqkit's loggers with the second they arrived at."""
    out = []
    for t, line in stderr:
        m = LOG_LINE.match(line)
        if m and m.group(2).startswith(logger_prefix):
            out.append({"t_s": t, "msg": m.group(3)})
    return out


STEP = re.compile(r"^(.*?) in (\d+(?:\.\d+)?)s\b")


def step_seconds(messages: List[dict]) -> Dict[str, float]:
    """The steps the log times itself (``... in 12.3s``), by the message's words before ``in``."""
    out: Dict[str, float] = {}
    for m in messages:
        hit = STEP.match(m["msg"])
        if hit:
            out[re.sub(r"\d[\d,]*", "N", hit.group(1))] = float(hit.group(2))
    return out
