"""What benchmarks/gpu.py needs of the machine and the clock: its child processes (one line on failure),
the GPU's name and peaks and its busy share sampled by ``nvidia-smi``, and ``--time-limit``'s budget."""

from __future__ import annotations

import datetime
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import torch

# dense bf16 (= fp16) tensor-core peaks of NVIDIA's data sheets, TFLOP/s without sparsity; the first
# name contained in the device's name wins ("NVIDIA H100 80GB HBM3" is the SXM part)
BF16_SPEC_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H200 NVL", 835.0), ("H100", 989.0),
                    ("H200", 989.0), ("A100", 312.0), ("L40S", 362.0), ("L40", 181.0), ("L4", 121.0))


class Budget:
    """``--time-limit``: the seconds left, and whether a step expected to take so long still ends in time
    (a lent GPU machine kills a command at its limit: what ran must be on ``--out`` by then)."""

    def __init__(self, limit: Optional[float]):
        self.limit, self.start = limit, time.perf_counter()
        # compiled or not -> seconds a seqkit-train run takes beyond its training time: a guess until one
        # of its kind ran, then the most any took
        self.overhead = {False: 45.0, True: 180.0}
        self.seen: set = set()

    def left(self) -> float:
        return math.inf if self.limit is None else self.limit - (time.perf_counter() - self.start)

    def timeout(self, default: float) -> float:
        """A child's timeout: ``default``, or less where less time is left."""
        return max(1.0, min(default, self.left()))

    def refuses(self, what: str, need: float) -> Optional[str]:
        """Why a step expected to take ``need`` seconds is not started (None: start it)."""
        left = self.left()
        if need <= left:
            return None
        return f"--time-limit {self.limit:g} s: {max(0.0, left):.0f} s left, {what} needs ~{need:.0f} s"

    def train_need(self, train_seconds: float, compiled: bool) -> float:
        return train_seconds + self.overhead[compiled]

    def ran(self, train_seconds: float, compiled: bool, wall: float) -> None:
        rest = max(0.0, wall - train_seconds)
        self.overhead[compiled] = max(rest, self.overhead[compiled]) if compiled in self.seen else rest
        self.seen.add(compiled)


def write_json(path: str, obj: Dict[str, Any]) -> None:
    """``obj`` as one line on ``path``, replaced whole (a reader never sees half a file)."""
    with open(path + ".part", "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, ensure_ascii=False) + "\n")
    os.replace(path + ".part", path)


def run_process(cmd: List[str], work: str, what: str, timeout: float = 900, log: bool = True) -> Tuple[Any, float]:
    """Run ``cmd`` in ``work``: (the finished process, or one line saying how it failed; wall seconds).
    With ``log``, a failed process' whole stderr goes on ``work/errors.log`` (kept with --workdir)."""
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"{what} ran past {timeout:.0f} s", time.perf_counter() - t0
    wall = time.perf_counter() - t0
    if done.returncode == 0:
        return done, wall
    if log:
        with open(os.path.join(work, "errors.log"), "a", encoding="utf-8") as f:
            f.write(f"$ {shlex.join(cmd)}\n{done.stderr}\n")
    # the last line: seqkit's one-line error as it is, or a traceback's exception
    line = ([x.strip() for x in done.stderr.splitlines() if x.strip()] or ["(nothing on stderr)"])[-1][:1000]
    return (line if line.startswith(f"{what}:") else f"{what} exited {done.returncode}: {line}"), wall


# -- the machine -------------------------------------------------------------------------------------
def gpu_index() -> str:
    """The physical GPU the children's cuda:0 is, for nvidia-smi's -i."""
    return os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"


def nvidia_smi(*fields: str) -> Optional[List[str]]:
    """One nvidia-smi query of our GPU (None without nvidia-smi or when it fails)."""
    if shutil.which("nvidia-smi") is None:
        return None
    done = subprocess.run(["nvidia-smi", "-i", gpu_index(), f"--query-gpu={','.join(fields)}",
                           "--format=csv,noheader,nounits"], capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return [v.strip() for v in done.stdout.strip().splitlines()[0].split(",")]


def spec_tflops(name: Optional[str]) -> Optional[float]:
    for key, tflops in BF16_SPEC_TFLOPS:
        if name and key in name:
            return tflops
    return None


def environment(device: str) -> Dict[str, Any]:
    """GPU name, driver, memory (nvidia-smi: nothing here touches CUDA, so no context of this process
    sits in the children's memory figures), versions, the CPU, and the bf16 spec peak."""
    from seqkit.core.cpu import cpu_info

    smi = nvidia_smi("name", "driver_version", "memory.total") if device == "cuda" else None
    name = smi[0] if smi else None
    return {"gpu_name": name, "driver_version": smi[1] if smi else None,
            "gpu_memory_mib": float(smi[2]) if smi else None, "torch_version": torch.__version__,
            "cuda_version": torch.version.cuda, "python_version": sys.version.split()[0], **cpu_info(),
            "bf16_spec_tflops": spec_tflops(name)}


def parse_sample(line: str) -> Optional[Tuple[float, float, float]]:
    """``timestamp, utilization.gpu, memory.used`` of nvidia-smi's csv (no units) -> (unix time, busy %,
    MiB); None for a line that is not one (a value of ``[N/A]``, a cut line)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 3:
        return None
    try:
        when = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()  # local time, as time.time()
        return when, float(parts[1]), float(parts[2])
    except ValueError:
        return None


class GpuSampler:
    """``nvidia-smi -lms 250`` in a background process for as long as a child runs."""

    def __init__(self, path: str):
        self.file = open(path, "w+", encoding="utf-8")
        query = "--query-gpu=timestamp,utilization.gpu,memory.used"
        lines = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []  # every sample on disk when it is stopped
        self.proc = subprocess.Popen([*lines, "nvidia-smi", "-i", gpu_index(), query, "--format=csv,noheader,nounits",
                                      "-lms", "250"], stdout=self.file, stderr=subprocess.DEVNULL)

    def stop(self) -> List[Tuple[float, float, float]]:
        self.proc.terminate()
        self.proc.wait()
        self.file.seek(0)
        samples = [parse_sample(line) for line in self.file]
        self.file.close()
        return [s for s in samples if s is not None]


def busy_share(samples: List[Tuple[float, float, float]], start: float, end: float) -> Tuple[Optional[float], int]:
    """Mean GPU utilization (0-1) of the samples taken from ``start`` to ``end``, and their count."""
    inside = [busy for when, busy, _ in samples if start <= when <= end]
    return (round(statistics.mean(inside) / 100, 3) if inside else None), len(inside)
