"""End to end: tests/e2e/translation.sh (preprocess -> train -> generate -> score), resuming,
the commands' --help / --cfg job, and the Python translation API."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).parent / "e2e" / "translation.sh"
SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:"
BIN = os.path.dirname(sys.executable)


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    """Run the shell test once; every test of this module reads what it left in its work folder."""
    work = tmp_path_factory.mktemp("e2e")
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run(["bash", str(SCRIPT), str(work)], env=env, capture_output=True, text=True, timeout=300)
    return proc, work


def _blocks(text):
    """generate output -> [(kind, id, rest)] in file order."""
    rows = []
    for line in text.splitlines():
        m = re.match(r"^([STHDP])-(\d+)\t(.*)$", line)
        assert m, f"unexpected generate line: {line!r}"
        rows.append((m.group(1), int(m.group(2)), m.group(3)))
    return rows


def test_script_succeeds_and_prints_bleu_with_signature(e2e, bleu_floor):
    proc, _ = e2e
    assert proc.returncode == 0, proc.stderr[-3000:]
    bleu_floor(proc.stdout)  # the model translates, not just that a BLEU line was printed
    bleu = [line for line in proc.stdout.splitlines() if line.startswith("BLEU = ")]
    assert SIGNATURE in bleu[0]
    assert "Traceback" not in proc.stderr


def test_generate_prints_every_test_sentence_in_order(e2e):
    proc, work = e2e
    assert proc.returncode == 0, proc.stderr[-3000:]
    sources = (work / "raw" / "test.de").read_text(encoding="utf-8").splitlines()
    targets = (work / "raw" / "test.en").read_text(encoding="utf-8").splitlines()
    rows = _blocks((work / "gen.txt").read_text(encoding="utf-8"))
    # nbest 1: exactly S, T, H, D, P for ids 0..N-1, in id order, none dropped
    expected = [(kind, sid) for sid in range(len(sources)) for kind in "STHDP"]
    assert [(kind, sid) for kind, sid, _ in rows] == expected
    by_kind = {kind: [rest for k, _, rest in rows if k == kind] for kind in "STHDP"}
    assert by_kind["S"] == sources  # detokenized source round-trips through the tokenizer
    assert by_kind["T"] == targets
    for h, d, p in zip(by_kind["H"], by_kind["D"], by_kind["P"]):
        h_score, pieces = h.split("\t")
        d_score, text = d.split("\t")
        assert h_score == d_score
        assert "▁" not in text, f"D- line is not detokenized: {text!r}"
        assert text.strip(), "empty hypothesis"
        assert len(p.split()) == len(pieces.split()) + 1  # one score per piece, plus eos


def test_stdin_lines_are_translated(e2e):
    proc, work = e2e
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _blocks((work / "stdin.txt").read_text(encoding="utf-8"))
    assert [(kind, sid) for kind, sid, _ in rows] == [(k, i) for i in range(2) for k in "SHDP"]
    assert [rest for kind, _, rest in rows if kind == "S"] == ["Der Hund spielt im Park.", "Die kleine Katze sieht den Mann."]
    for kind, _, rest in rows:
        if kind == "D":
            assert "▁" not in rest
    assert len([line for line in proc.stdout.splitlines() if line.startswith("D-")]) == 2  # the script prints them


def test_train_again_resumes_from_checkpoint_last(e2e, tmp_path, run_cli, tiny_train_args):
    from seqkit.cli.train import main

    proc, work = e2e
    assert proc.returncode == 0, proc.stderr[-3000:]
    save_dir = tmp_path / "checkpoints"
    shutil.copytree(work / "checkpoints", save_dir)
    before = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)["train_state"]
    assert before["num_updates"] == 250
    r = run_cli(main, [f"task.data={work / 'data-bin'}", f"checkpoint.save_dir={save_dir}",
                       "optimization.max_update=256", *tiny_train_args])
    assert r.code == 0, r.err[-3000:]
    assert f"resuming from {save_dir / 'checkpoint_last.pt'}" in r.err
    assert re.search(rf"resumed at epoch {before['epoch']}, update 250, batch {before['batch_offset']}\b", r.err), r.err
    assert "done: reached max_update 256; 256 updates" in r.err
    after = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)["train_state"]
    assert after["num_updates"] == 256
    # the train log goes on from where it was: its update numbers never go back
    updates = [json.loads(line)["update"] for line in (save_dir / "train_log.jsonl").read_text().splitlines()]
    assert updates == sorted(updates) and updates[-1] == 256


def test_seqkit_help_lists_subcommands(run_cli):
    from seqkit.cli.main import main

    r = run_cli(main, ["--help"])
    assert r.code == 0
    for sub in ("preprocess", "train", "generate", "score"):
        assert re.search(rf"^\s+{sub}\s", r.out, re.M), r.out


def test_train_help_lists_component_choices(run_cli):
    from seqkit.cli.train import main

    r = run_cli(main, ["--help"])
    assert r.code == 0
    for name in ("transformer_small", "transformer_tiny", "label_smoothed_cross_entropy", "adam", "inverse_sqrt"):
        assert name in r.out
    assert "optimization.max_update" in r.out


def test_train_cfg_job_prints_composed_yaml(run_cli, tmp_path):
    from seqkit.cli.train import main

    r = run_cli(main, ["--cfg", "job", "model=transformer_tiny", "optimizer.lr=7e-4",
                       f"checkpoint.save_dir={tmp_path / 'ck'}"])
    assert r.code == 0, r.err
    assert re.search(r"^\s+lr: 0\.0007$", r.out, re.M), r.out
    assert re.search(r"^\s+embed_dim: 64$", r.out, re.M)  # the tiny preset's value
    assert not (tmp_path / "ck").exists()  # printing the config trains nothing


def test_translator_python_api(e2e):
    from seqkit.generation.translator import Translator

    proc, work = e2e
    assert proc.returncode == 0, proc.stderr[-3000:]
    t = Translator.from_checkpoint(str(work / "checkpoints" / "checkpoint_last.pt"), beam=2, max_len_b=40)
    inputs = ["Der Hund spielt.", "Die Frau sieht das Pferd im Garten.", ""]
    out = t.translate(inputs)
    assert isinstance(out, list) and len(out) == len(inputs)
    assert all(isinstance(s, str) and "▁" not in s for s in out)
    assert out[0] == t.translate(["Der Hund spielt."])[0]  # batching does not change a result


def test_sigterm_saves_and_resumes(toy_data, tmp_path):
    """Pre-emption: SIGTERM finishes the update, saves checkpoint_last, says how to resume, exits 143."""
    import signal
    import time

    _, data = toy_data
    save_dir = tmp_path / "ck"
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    args = ["seqkit-train", f"task.data={data}", f"checkpoint.save_dir={save_dir}", "model=transformer_tiny",
            "common.threads=1", "common.log_interval=1", "dataset.max_tokens=256", "optimization.max_update=100000"]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = save_dir / "train_log.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline and not (log.exists() and log.read_text().count("\n") >= 3):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "stopped by SIGTERM" in err and "run the same command again to resume" in err
    assert "Traceback" not in err
    import torch

    state = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)
    assert state["train_state"]["num_updates"] >= 3
    again = subprocess.run(args[:-1] + [f"optimization.max_update={state['train_state']['num_updates'] + 2}"],
                           env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"update {state['train_state']['num_updates']}" in again.stderr


def test_translator_batches_side_by_side(e2e):
    """inter_threads=2 searches two batches at once: same hypotheses, same order, threads restored."""
    import torch

    from seqkit.generation.translator import Translator

    proc, work = e2e
    assert proc.returncode == 0, proc.stderr[-3000:]
    ck = str(work / "checkpoints" / "checkpoint_last.pt")
    sentences = ["Der Hund spielt.", "Die Frau sieht das Pferd im Garten.", "Ein Mann.", "Zwei Kinder laufen.",
                 "Eine Katze schläft auf dem Sofa.", "Der Junge isst."] * 3
    threads = torch.get_num_threads()
    one = Translator.from_checkpoint(ck, beam=2, max_len_b=40, inter_threads=1)
    two = Translator.from_checkpoint(ck, beam=2, max_len_b=40, inter_threads=2)
    assert one.streams() == 1 and two.streams() == min(2, threads)
    src = [one.task.encode_source(s) for s in sentences]
    a = list(one.generate_batches(src, batch_size=4))
    b = list(two.generate_batches(src, batch_size=4))
    assert [r["id"] for r in a] == [r["id"] for r in b]
    for ra, rb in zip(a, b):
        assert [h["tokens"].tolist() for h in ra["hypos"]] == [h["tokens"].tolist() for h in rb["hypos"]]
    assert torch.get_num_threads() == threads  # the workers' thread setting stays in the workers
    auto = Translator.from_checkpoint(ck, beam=5)  # inter_threads=0: side by side only for big batches
    assert auto.streams(1) == 1 and auto.streams(64) == min(2, threads)
    sampler = Translator.from_checkpoint(ck, sampling=True, inter_threads=2)
    assert sampler.streams() == 1  # one seeded generator, drawn in batch order
