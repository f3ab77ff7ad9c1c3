"""Energy per run (seqkit/training/energy.py): RAPL counters with wrap-around, the labelled
estimate, the CO2e arithmetic, totals kept across a resume, the log line and JSON record."""

import json

import pytest
import torch
from omegaconf import OmegaConf

import seqkit
from seqkit.cli.common import ConfigBuilder
from seqkit.cli.train import main as train_main
from seqkit.data.toy_corpus import make_corpus
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers.space import SpaceConfig
from seqkit.training import energy
from seqkit.training.config import EnergyConfig, TrainConfig
from seqkit.training.energy import EnergyMeter, RaplCounter, energy_line, rapl_zones
from seqkit.training.trainer import Trainer

seqkit.import_builtin_components()


def fake_rapl(root, packages=(("package-0", 1000, 10_000),), dram=None, core=True):
    """A powercap tree: zones ``intel-rapl:N`` of (name, energy_uj, max_energy_range_uj)."""
    zones = list(packages) + ([dram] if dram else []) + ([("core", 5, 10_000)] if core else [])
    for i, (name, uj, top) in enumerate(zones):
        d = root / f"intel-rapl:0:{i}" if name != "package-0" else root / "intel-rapl:0"
        d.mkdir(parents=True, exist_ok=True)
        (d / "name").write_text(name + "\n")
        (d / "energy_uj").write_text(f"{uj}\n")
        (d / "max_energy_range_uj").write_text(f"{top}\n")
    return root


@pytest.fixture
def no_rapl(tmp_path, monkeypatch):
    """A machine without readable RAPL counters (like the project's VMs), whatever runs the test."""
    monkeypatch.setattr(energy, "RAPL_ROOT", str(tmp_path / "no-powercap"))


def test_rapl_sums_packages_and_dram_and_undoes_a_wrap(tmp_path):
    root = fake_rapl(tmp_path, dram=("dram", 500, 2_000))
    zones = rapl_zones(str(root))
    assert [p.rsplit("/", 2)[-2] for p, _ in zones] == ["intel-rapl:0", "intel-rapl:0:1"]  # core: inside package
    counter = RaplCounter(zones)
    (root / "intel-rapl:0" / "energy_uj").write_text("9000\n")  # +8,000 uJ
    (root / "intel-rapl:0:1" / "energy_uj").write_text("1000\n")  # dram +500
    assert counter.read_joules() == pytest.approx(0.0085)
    (root / "intel-rapl:0" / "energy_uj").write_text("3000\n")  # wrapped: 9,000 -> 10,000 = 0 -> 3,000
    assert counter.read_joules() == pytest.approx((8000 + 500 + 4000) / 1e6)


def test_an_unreadable_zone_means_no_rapl(tmp_path):
    root = fake_rapl(tmp_path)
    (root / "intel-rapl:0" / "energy_uj").write_text("permission denied\n")
    assert rapl_zones(str(root)) == []
    assert rapl_zones(str(tmp_path / "absent")) == []


def test_without_rapl_the_cpu_is_an_estimate_labelled_as_one(no_rapl, monkeypatch):
    clock = iter([100.0, 460.0, 460.0])  # start, then 360 s later (read, then totals' seconds)
    monkeypatch.setattr(energy.time, "perf_counter", lambda: next(clock))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        meter = EnergyMeter(EnergyConfig(cpu_watts_per_core=10.0, pue=1.58), torch.device("cpu"))
    finally:
        torch.set_num_threads(threads)
    totals = meter.totals()
    assert totals == {"cpu_j": 3600.0, "gpu_j": 0.0, "seconds": 360.0}  # 1 thread x 10 W x 360 s
    rec = meter.record(totals)
    assert rec["cpu_source"] == "estimate: 1 thread x 10 W" and rec["gpu_source"] == "none"
    assert (rec["kwh"], rec["co2e_g"]) == (0.00158, 0.6837)  # 1.58 x 0.001 kWh; x 432.7 g/kWh
    meter.close()


def test_co2e_arithmetic_and_line_frozen(no_rapl):
    meter = EnergyMeter(EnergyConfig(grid_intensity=400.0, pue=1.5), torch.device("cpu"),
                        base={"cpu_j": 3.6e6, "gpu_j": 0.0, "seconds": 1800.0})
    rec = meter.record({"cpu_j": 7.2e6, "gpu_j": 3.6e6, "seconds": 7200.0})
    meter.close()
    assert (rec["kwh"], rec["co2e_g"], rec["cpu_kwh"], rec["gpu_kwh"], rec["hours"]) == (4.5, 1800.0, 2.0, 1.0, 2.0)
    assert rec["before_resume_kwh"] == 1.5
    rec["gpu_source"] = "NVML energy counter"
    assert energy_line(rec) == (
        f"energy: 4.5 kWh in 2 h (CPU 2 kWh, {rec['cpu_source']}; GPU 1 kWh, NVML energy counter; PUE 1.5), "
        "1.5 of it before this run resumed; 1800 g CO2e at 400 g/kWh")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("energy")
    make_corpus(str(root / "raw"), n_train=60, n_valid=10, n_test=5)
    raw = str(root / "raw")
    preprocess(PreprocessConfig(source_lang="de", target_lang="en", trainpref=f"{raw}/train", validpref=f"{raw}/valid",
                                destdir=str(root / "bin"), tokenizer=SpaceConfig()))
    return str(root / "bin")


TINY = ["model=transformer_tiny", "dataset.max_tokens=200", "common.threads=1", "common.log_format=simple"]


def test_a_resumed_run_adds_its_energy_to_the_checkpoints(data_dir, tmp_path, no_rapl):
    def cfg(n):
        return OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(
            [f"task.data={data_dir}", f"checkpoint.save_dir={tmp_path}", *TINY, f"optimization.max_update={n}"]))

    Trainer(cfg(2)).run()
    saved = torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)["train_state"]["energy"]
    assert saved["cpu_j"] > 0 and saved["seconds"] > 0 and saved["gpu_j"] == 0.0
    resumed = Trainer(cfg(4))
    result = resumed.run()
    assert resumed.energy.base == saved
    assert result["energy"]["before_resume_kwh"] == float(f"{saved['cpu_j'] / 3.6e6:.4g}")
    after = torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)["train_state"]["energy"]
    assert after["seconds"] > saved["seconds"] and after["cpu_j"] > saved["cpu_j"]


def test_seqkit_train_ends_with_its_energy_in_the_log_and_the_records(data_dir, tmp_path, run_cli, no_rapl):
    r = run_cli(train_main, [f"task.data={data_dir}", f"checkpoint.save_dir={tmp_path}", *TINY,
                             "optimization.max_update=1", "energy.grid_intensity=100"])
    assert r.code == 0, r.err
    line = next(x for x in r.err.splitlines() if "energy: " in x)
    assert "CPU" in line and "estimate: 1 thread x 5 W" in line and "g CO2e at 100 g/kWh" in line
    records = [json.loads(x) for x in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    last = records[-1]
    assert last["tag"] == "energy" and last["update"] == 1 and last["grid_g_per_kwh"] == 100.0
    assert last["co2e_g"] == pytest.approx(last["kwh"] * 100, rel=1e-3) and last["kwh"] > 0


def test_rapl_measured_runs_refuse_the_cpu_estimates_watts(data_dir, tmp_path, run_cli, monkeypatch):
    monkeypatch.setattr(energy, "RAPL_ROOT", str(fake_rapl(tmp_path / "powercap")))
    base = [f"task.data={data_dir}", f"checkpoint.save_dir={tmp_path / 'ck'}", *TINY, "optimization.max_update=1"]
    r = run_cli(train_main, [*base, "energy.cpu_watts_per_core=4"])
    assert r.code == 1 and r.err.strip().splitlines()[-1] == (
        "seqkit-train: error: energy.cpu_watts_per_core: seqkit-train (translation, transformer) does not "
        "read it; RAPL measures this machine's CPU; drop it")
    assert not (tmp_path / "ck").exists()
    r = run_cli(train_main, base)
    assert r.code == 0 and "kWh, RAPL;" in r.err


def test_a_cpu_run_refuses_the_gpu_estimates_watts(data_dir, tmp_path, run_cli, no_rapl):
    r = run_cli(train_main, [f"task.data={data_dir}", f"checkpoint.save_dir={tmp_path}", *TINY,
                             "common.device=cpu", "energy.gpu_watts=250"])
    assert r.code == 1 and "energy.gpu_watts" in r.err and "the run is on the CPU; drop it" in r.err
