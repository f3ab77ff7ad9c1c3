"""What the CPU offers low precision (seqkit/core/cpu.py), read from fake /proc/cpuinfo files."""

import logging

import pytest

from seqkit.core import cpu

AVX2_EPYC = "processor\t: 0\nmodel name\t: AMD EPYC 7B12\nflags\t\t: fpu sse2 avx2 fma\n\nprocessor\t: 1\n"
BF16_EPYC = "model name\t: AMD EPYC 9B14\nflags\t\t: avx2 fma avx512f avx512_bf16 avx512_vnni\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n"


def info(tmp_path, text):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    return cpu.cpu_info(str(path))


def test_cpu_info_reads_model_and_flags(tmp_path):
    got = info(tmp_path, AVX2_EPYC)
    assert got["cpu_model"] == "AMD EPYC 7B12" and got["flags_known"]
    assert got["cpu_flags"]["avx2"] and got["cpu_flags"]["fma"] and not got["cpu_flags"]["avx512_bf16"]
    assert info(tmp_path, ARM)["cpu_flags"]["bf16"]
    missing = cpu.cpu_info(str(tmp_path / "absent"))
    assert missing == {"cpu_model": "", "cpu_flags": {f: False for f in cpu.CPU_FLAGS}, "flags_known": False}


def test_bf16_warning_only_where_the_units_are_known_missing(tmp_path):
    warning = cpu.bf16_warning(info(tmp_path, AVX2_EPYC))
    assert "AMD EPYC 7B12" in warning and "common.precision=fp32" in warning
    assert cpu.bf16_warning(info(tmp_path, BF16_EPYC)) is None
    assert cpu.bf16_warning(info(tmp_path, ARM)) is None
    assert cpu.bf16_warning(cpu.cpu_info(str(tmp_path / "absent"))) is None  # unknown: no guess


@pytest.mark.parametrize("precision, warned", [("bf16", True), ("fp16", False), ("fp32", False)])
def test_training_precision_warns_for_bf16_without_units(tmp_path, monkeypatch, caplog, precision, warned):
    import torch

    from seqkit.training.precision import Precision

    avx2 = info(tmp_path, AVX2_EPYC)
    monkeypatch.setattr(cpu, "cpu_info", lambda: avx2)
    with caplog.at_level(logging.WARNING, logger="seqkit.train"):
        Precision(precision, torch.device("cpu"))
    assert any("without bf16 units" in r.getMessage() for r in caplog.records) == warned
