"""The energy a training run used and its CO2e, measured where the machine lets us, else estimated.

    kWh = energy.pue x (E_cpu + E_gpu) / 3.6e6 J        g CO2e = kWh x energy.grid_intensity

Strubell et al. 2019's p_t = 1.58 t (p_c + p_r + g p_g) / 1000, with the energies read from the
machine's counters in place of their mean power x hours, and the PUE a setting (1.58 there).

- CPU: the RAPL counters of the host's packages and DRAM (``/sys/class/powercap/intel-rapl:*``,
  AMD's included) where readable: they count the whole host, other processes too. Linux makes them
  root-only since 5.10 and most VMs and containers have none; there the CPU's energy is an
  *estimate*: ``energy.cpu_watts_per_core`` x torch's threads x wall seconds.
- GPU: NVML's energy counter of the run's device (``pynvml``, from ``nvidia-ml-py``; Volta and
  newer), else NVML's power draw sampled every :data:`SAMPLE_SECONDS`; without NVML an *estimate*:
  ``energy.gpu_watts`` x wall seconds.

A daemon thread reads the counters every :data:`SAMPLE_SECONDS` (a RAPL counter wraps around, at
``max_energy_range_uj``); the training step reads nothing. Totals are kept in the checkpoint's
``train_state["energy"]``, so a resumed run adds its energy to what the checkpoint had used.
"""

from __future__ import annotations

import glob
import os
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import torch

from seqkit.training.config import EnergyConfig

RAPL_ROOT = "/sys/class/powercap"  # tests point this at a fake tree
SAMPLE_SECONDS = 5.0  # counters read by the thread (a package counter wraps after minutes at the earliest)
J_PER_KWH = 3.6e6


# -- CPU: RAPL ------------------------------------------------------------------------------------
def _read_int(path: str) -> Optional[int]:
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def rapl_zones(root: Optional[str] = None) -> List[Tuple[str, int]]:
    """(energy_uj path, max_energy_range_uj) of every package and DRAM zone under ``root``, or []
    when there are none or one is unreadable (a package's core/uncore zones are inside it)."""
    root = RAPL_ROOT if root is None else root
    zones = []
    for d in sorted(glob.glob(os.path.join(root, "intel-rapl:*"))):
        try:
            with open(os.path.join(d, "name"), encoding="ascii") as f:
                name = f.read().strip()
        except OSError:
            return []
        if not (name.startswith("package") or name == "dram"):
            continue
        energy, top = os.path.join(d, "energy_uj"), _read_int(os.path.join(d, "max_energy_range_uj"))
        if top is None or _read_int(energy) is None:
            return []
        zones.append((energy, top))
    return zones


class RaplCounter:
    """Microjoules summed over RAPL zones since creation, each counter's wrap-around undone."""

    def __init__(self, zones: List[Tuple[str, int]]):
        self.zones = zones
        self.last = [_read_int(path) or 0 for path, _ in zones]
        self.total_uj = 0

    def read_joules(self) -> float:
        for i, (path, top) in enumerate(self.zones):
            now = _read_int(path)
            if now is None:
                continue
            delta = now - self.last[i]
            self.total_uj += delta if delta >= 0 else delta + top  # wrapped past max_energy_range_uj
            self.last[i] = now
        return self.total_uj / 1e6


# -- GPU: NVML ------------------------------------------------------------------------------------
class NvmlCounter:
    """Joules of one GPU since creation: NVML's energy counter, or its power draw integrated."""

    def __init__(self, device: torch.device):
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        index = device.index if device.index is not None else torch.cuda.current_device()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda._get_nvml_device_index(index))
        try:
            self.start_mj: Optional[int] = pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            self.label = "NVML energy counter"
        except pynvml.NVMLError:  # before Volta
            self.start_mj = None
            self.label = f"NVML power sampled every {SAMPLE_SECONDS:g} s"
            self.joules, self.last_t = 0.0, time.perf_counter()
            self.last_w = pynvml.nvmlDeviceGetPowerUsage(self.handle) / 1000

    def read_joules(self) -> float:
        if self.start_mj is not None:
            return (self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) - self.start_mj) / 1000
        now, watts = time.perf_counter(), self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000
        self.joules += (now - self.last_t) * (self.last_w + watts) / 2
        self.last_t, self.last_w = now, watts
        return self.joules


def nvml_counter(device: torch.device) -> Optional[NvmlCounter]:
    """NVML's counter of ``device``, or None without pynvml or a readable GPU."""
    if torch.device(device).type != "cuda":
        return None
    try:
        return NvmlCounter(torch.device(device))
    except Exception:  # no pynvml, no driver library, a device NVML does not know: estimated
        return None


def on_gpu(device_setting: str) -> bool:
    """Whether ``common.device`` puts the run on a GPU (auto: when one is there)."""
    return device_setting == "cuda" or (device_setting == "auto" and torch.cuda.is_available())


def unread(gpu: bool) -> List[Tuple[str, str]]:
    """The energy settings a run would not read on this machine, each with the reason."""
    out = []
    if rapl_zones():
        out.append(("energy.cpu_watts_per_core", "RAPL measures this machine's CPU"))
    if not gpu:
        out.append(("energy.gpu_watts", "the run is on the CPU"))
    elif nvml_counter(torch.device("cuda", 0)) is not None:
        out.append(("energy.gpu_watts", "NVML measures this machine's GPU"))
    return out


# -- the meter ------------------------------------------------------------------------------------
class EnergyMeter:
    """CPU and GPU joules and wall seconds since ``base`` (a checkpoint's totals, or none).

    Under torchrun the host's RAPL packages are counted by ``local_rank`` 0 only; each rank adds its
    own GPU and its own CPU estimate."""

    def __init__(self, cfg: EnergyConfig, device: torch.device, base: Optional[Dict[str, float]] = None,
                 local_rank: int = 0):
        self.cfg, self.base = cfg, dict(base or {})
        zones = rapl_zones()
        self.rapl = RaplCounter(zones) if zones and local_rank == 0 else None
        self.cpu_w = 0.0  # watts of the estimate (0 where RAPL counts)
        if zones:
            self.cpu_label = "RAPL" if local_rank == 0 else "RAPL (local rank 0's)"
        else:
            threads = torch.get_num_threads()
            self.cpu_w = threads * cfg.cpu_watts_per_core
            self.cpu_label = f"estimate: {threads} thread{'s' * (threads != 1)} x {cfg.cpu_watts_per_core:g} W"
        self.gpu = nvml_counter(device)
        self.gpu_w = 0.0
        if self.gpu is not None:
            self.gpu_label = self.gpu.label
        elif torch.device(device).type == "cuda":
            self.gpu_w, self.gpu_label = cfg.gpu_watts, f"estimate: {cfg.gpu_watts:g} W"
        else:
            self.gpu_label = "none"
        self.start = time.perf_counter()
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._thread: Optional[threading.Thread] = None
        if self.rapl is not None or self.gpu is not None:
            self._thread = threading.Thread(target=self._sample, name="seqkit-energy", daemon=True)
            self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self._read()

    def _read(self) -> Tuple[float, float]:
        """This run's (CPU, GPU) joules so far."""
        with self._lock:
            seconds = time.perf_counter() - self.start
            cpu = self.rapl.read_joules() if self.rapl is not None else self.cpu_w * seconds
            gpu = self.gpu.read_joules() if self.gpu is not None else self.gpu_w * seconds
            return cpu, gpu

    def totals(self, dist: Any = None) -> Dict[str, float]:
        """The checkpoint's totals plus this run's: ``cpu_j``, ``gpu_j``, ``seconds`` (summed over
        ranks: a collective under torchrun, every rank calls it; ``seconds`` is rank 0's)."""
        cpu, gpu = self._read()
        seconds = time.perf_counter() - self.start
        if dist is not None and dist.world_size > 1:
            from seqkit.training.distributed import all_reduce_sum

            cpu, gpu = all_reduce_sum([cpu, gpu], dist)
        return {"cpu_j": self.base.get("cpu_j", 0.0) + cpu, "gpu_j": self.base.get("gpu_j", 0.0) + gpu,
                "seconds": self.base.get("seconds", 0.0) + seconds}

    def record(self, totals: Dict[str, float]) -> Dict[str, Any]:
        """The JSON record of ``totals``: kWh with the PUE, CO2e, and where each figure comes from."""
        kwh = self.cfg.pue * (totals["cpu_j"] + totals["gpu_j"]) / J_PER_KWH
        before = self.cfg.pue * (self.base.get("cpu_j", 0.0) + self.base.get("gpu_j", 0.0)) / J_PER_KWH
        return {"kwh": _sig(kwh), "co2e_g": _sig(kwh * self.cfg.grid_intensity),
                "cpu_kwh": _sig(totals["cpu_j"] / J_PER_KWH), "cpu_source": self.cpu_label,
                "gpu_kwh": _sig(totals["gpu_j"] / J_PER_KWH), "gpu_source": self.gpu_label,
                "pue": self.cfg.pue, "grid_g_per_kwh": self.cfg.grid_intensity,
                "hours": _sig(totals["seconds"] / 3600), "before_resume_kwh": _sig(before)}

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * SAMPLE_SECONDS)
        if self.gpu is not None:
            try:
                self.gpu.nvml.nvmlShutdown()
            except Exception:  # already shut down
                pass


def _sig(x: float) -> float:
    """``x`` to 4 significant digits (a tiny run's kWh are not rounded to 0)."""
    return float(f"{x:.4g}")


def energy_line(rec: Dict[str, Any]) -> str:
    """One log line of :meth:`EnergyMeter.record`'s ``rec``."""
    gpu = "" if rec["gpu_source"] == "none" else f"; GPU {rec['gpu_kwh']:.4g} kWh, {rec['gpu_source']}"
    resumed = f", {rec['before_resume_kwh']:.4g} of it before this run resumed" if rec["before_resume_kwh"] else ""
    return (f"energy: {rec['kwh']:.4g} kWh in {rec['hours']:.4g} h (CPU {rec['cpu_kwh']:.4g} kWh, {rec['cpu_source']}"
            f"{gpu}; PUE {rec['pue']:g}){resumed}; {rec['co2e_g']:.4g} g CO2e at {rec['grid_g_per_kwh']:g} g/kWh")
