"""What the CPU can do for low precision, read from ``/proc/cpuinfo`` (Linux; unknown elsewhere).

Machines that look alike differ here: of three 2-core hosts this project ran on, one AMD EPYC had
AVX2 only, an Intel Xeon had AVX-512 without bf16, and another AMD EPYC had AVX512-BF16. Without
bf16 units torch emulates bf16 matmuls: the Multi30k recipe model trained at 61 tokens/s in bf16 on
the AVX2-only EPYC, against 2,300-2,700 in fp32."""

from __future__ import annotations

import logging
from typing import Dict, Optional

from seqkit.core.allocator import limit_onednn_cache

# the flags that decide what low precision can gain (/proc/cpuinfo names; ARM lists "bf16")
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8", "bf16")
BF16_UNITS = ("avx512_bf16", "amx_bf16", "bf16")


def cpu_info(path: str = "/proc/cpuinfo") -> Dict[str, object]:
    """The CPU's model name and which of CPU_FLAGS it has (empty when ``path`` cannot be read)."""
    model, flags = "", set()
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "Model") and not model:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:  # x86, ARM
                    flags = set(value.split())
    except OSError:
        pass
    return {"cpu_model": model, "cpu_flags": {f: f in flags for f in CPU_FLAGS}, "flags_known": bool(flags)}


def has_bf16_units(info: Dict[str, object]) -> bool:
    """Whether :func:`cpu_info` found any of BF16_UNITS."""
    return any(info["cpu_flags"][f] for f in BF16_UNITS)  # type: ignore[index]


def bf16_warning(info: Optional[Dict[str, object]] = None) -> Optional[str]:
    """A warning line when the CPU is known to lack bf16 units, else None."""
    info = info if info is not None else cpu_info()
    if not info["flags_known"] or has_bf16_units(info):
        return None
    return (f"common.precision=bf16 on a CPU without bf16 units ({info['cpu_model'] or 'unknown model'}: no "
            "AVX512-BF16, AMX or ARM bf16): torch emulates bf16 matmuls, many times slower than fp32 (61 "
            "tokens/s against 2,300 for the Multi30k recipe model on an AVX2-only AMD EPYC); use common.precision=fp32")


def prepare_low_precision(precision: str, log: logging.Logger, warn: bool = True) -> None:
    """For bf16/fp16 on a CPU: turn off oneDNN's primitive caches (:func:`limit_onednn_cache`) and,
    with ``warn``, log :func:`bf16_warning` for bf16 on a CPU without bf16 units."""
    limit_onednn_cache()
    warning = bf16_warning() if warn and precision == "bf16" else None
    if warning:
        log.warning(warning)
