"""Every encoder-decoder family through the whole toolkit: the end-to-end shell test (preprocess ->
train -> generate / stdin / alignments / sampling -> average -> score), exact resume, bf16
autocast and torchrun, for the RNN and ConvS2S families (the Transformer's are in test_e2e.py,
test_trainer.py and test_distributed.py)."""

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from side_by_side import SideBySide, selected

import seqkit
from seqkit.cli.common import ConfigBuilder
from seqkit.training.config import TrainConfig
from seqkit.training.trainer import Trainer

seqkit.import_builtin_components()
SCRIPT = Path(__file__).parent / "e2e" / "translation.sh"
SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:"
BIN = os.path.dirname(sys.executable)
ENV = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), OMP_NUM_THREADS="1")
FAMILIES = ["lstm_tiny", "convs2s_tiny"]
# the shell test's seqkit-train overrides per family: lstm_tiny's 24k parameters sit at the unigram
# loss for 250 updates (BLEU 0.06); one layer of 64/64/128 leaves that plateau after 100-200 updates
# and scores 97-99 at 600 (two layers of it: 27)
E2E_TRAIN = {"lstm_tiny": ["model.embed_dim=64", "model.encoder_hidden=64", "model.decoder_hidden=128",
                           "model.encoder_layers=1", "model.decoder_layers=1", "optimization.max_update=600"],
             "convs2s_tiny": []}


def _rows(text):
    return [re.match(r"^([STHDPA])-(\d+)\t(.*)$", line).groups() for line in text.splitlines()]


def make_cfg(data_dir, save_dir, model, *extra):
    overrides = [f"task.data={data_dir}", f"checkpoint.save_dir={save_dir}", f"model={model}",
                 "model.dropout=0.1", "dataset.max_tokens=200", "lr_scheduler.warmup_updates=5",
                 "common.log_format=json", "common.threads=1", *extra]
    return OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(overrides))


@pytest.mark.parametrize("model", FAMILIES)
def test_resume_is_bit_identical(model, toy_data, tmp_path):
    _, data = toy_data
    straight = Trainer(make_cfg(data, tmp_path / "a", model, "optimization.max_update=12"))
    straight.run()
    first = Trainer(make_cfg(data, tmp_path / "b", model, "optimization.max_update=5"))
    first.run()
    assert first.batch_offset > 0  # stopped inside an epoch
    torch.manual_seed(12345)  # resuming must not depend on the RNG state it starts with
    resumed = Trainer(make_cfg(data, tmp_path / "b", model, "optimization.max_update=12"))
    resumed.run()
    assert resumed.num_updates == straight.num_updates == 12
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("model", FAMILIES)
@pytest.mark.parametrize("reduced", ["bf16", "fp16"])
def test_reduced_precision_trains_like_fp32(model, reduced, toy_data, tmp_path):
    """bf16 autocast / fp16 autocast with loss scaling: fp32 master weights, and the validation
    loss falls as it does in fp32."""
    _, data = toy_data
    ends = {}
    for precision in ("fp32", reduced):
        t = Trainer(make_cfg(data, tmp_path / precision, model, f"common.precision={precision}",
                             "optimization.max_update=15", "optimizer.lr=1e-2", "lr_scheduler=fixed",
                             "dataset.max_tokens=1024"))
        start = t.validate()["loss"]
        ends[precision] = t.run()["valid"]["loss"]
        assert ends[precision] < 0.9 * start, (precision, start, ends[precision])
    assert all(p.dtype == torch.float32 for p in t.model.parameters())
    assert abs(ends[reduced] - ends["fp32"]) < 0.1 * ends["fp32"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("model", FAMILIES)
def test_torchrun_two_ranks_equal_one_rank_with_update_freq_2(model, toy_data, tmp_path):
    _, data = toy_data
    args = [os.path.join(BIN, "seqkit-train"), f"task.data={data}", f"model={model}", "model.dropout=0",
            "dataset.max_tokens=200", "common.threads=1", "dataset.valid_subset=", "optimization.max_update=4"]
    two = subprocess.run([os.path.join(BIN, "torchrun"), "--nproc_per_node=2", f"--master_port={_free_port()}",
                          *args, f"checkpoint.save_dir={tmp_path / 'two'}"], env=ENV, capture_output=True, text=True,
                         timeout=180)
    one = subprocess.run([*args, f"checkpoint.save_dir={tmp_path / 'one'}", "optimization.update_freq=2"], env=ENV,
                         capture_output=True, text=True, timeout=180)
    assert two.returncode == 0, two.stderr[-3000:]
    assert one.returncode == 0, one.stderr[-3000:]
    a = torch.load(tmp_path / "two" / "checkpoint_last.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "one" / "checkpoint_last.pt", weights_only=True)["model"]
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-6, rtol=1e-5, msg=k)


# -- the end-to-end shell test, last: its runs start with the module's first test and go on beside the others
@pytest.fixture(scope="module", autouse=True)
def shell_runs(request, tmp_path_factory):
    """The selected families' shell tests, side by side and beside this module's other tests (each is one
    thread): (model -> work folder, the runs)."""
    models = selected(request, "test_end_to_end_shell", "model")
    works = {model: tmp_path_factory.mktemp(f"e2e_{model}") for model in models}
    runs = SideBySide({m: (["bash", SCRIPT, works[m], m, *E2E_TRAIN[m]], works[m], ENV) for m in models}, timeout=300)
    yield works, runs
    runs.close()


@pytest.mark.parametrize("model", FAMILIES)
def test_end_to_end_shell(model, shell_runs, check_alignment_lines, bleu_floor):
    works, runs = shell_runs
    work, proc = works[model], runs.result(model)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    bleu_floor(proc.stdout)
    bleu = [line for line in proc.stdout.splitlines() if line.startswith("BLEU = ")]
    assert SIGNATURE in bleu[0]
    assert f"model {model.split('_')[0] if model.startswith('convs2s') else 'rnn'}:" in proc.stderr
    n = len((work / "raw" / "test.de").read_text(encoding="utf-8").splitlines())
    for name, kinds in (("gen.txt", "STHDP"), ("avg.txt", "STHDP"), ("align.txt", "STHDPA")):
        rows = _rows((work / name).read_text(encoding="utf-8"))
        assert [(k, int(i)) for k, i, _ in rows] == [(k, i) for i in range(n) for k in kinds], name
    assert check_alignment_lines((work / "align.txt").read_text(encoding="utf-8")) == n
    # alignment is an extra output: the hypotheses are the same with and without it
    plain = [r for r in _rows((work / "gen.txt").read_text(encoding="utf-8")) if r[0] == "H"]
    aligned = [r for r in _rows((work / "align.txt").read_text(encoding="utf-8")) if r[0] == "H"]
    assert plain == aligned
    samples = [r for r in _rows((work / "sample.txt").read_text(encoding="utf-8")) if r[0] == "H"]
    assert len(samples) == 2 * n  # nbest 2 samples per sentence
    stdin = _rows((work / "stdin.txt").read_text(encoding="utf-8"))
    assert [k for k, _, _ in stdin] == list("SHDP" * 2)
    # the Python API, with attention: one row per target piece and eos, one column per source piece and eos
    from seqkit.generation.translator import Translator

    t = Translator.from_checkpoint(str(work / "checkpoints" / "checkpoint_last.pt"), beam=2, max_len_b=20,
                                   print_alignment=True)
    sentence = "Der Hund spielt im Park."
    best = t.translate_nbest([sentence])[0][0]
    n_src = len(t.task.encode_source(sentence))
    assert best["attention"].shape == (len(best["pieces"]) + 1, n_src)
    torch.testing.assert_close(best["attention"].sum(1), torch.ones(len(best["pieces"]) + 1))
    assert [tgt for _, tgt in best["alignment"]] == list(range(len(best["pieces"])))
    assert t.translate([sentence]) == [best["text"]]
