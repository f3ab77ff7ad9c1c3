"""Bad input fails with exit code 1 and one line ``seqkit-<cmd>: error: ...`` on stderr (no
traceback), and leaves nothing half-written: no results file, no new or changed checkpoint."""

import hashlib
import os
import shutil
import subprocess
import sys

import pytest

from seqkit.cli.generate import main as generate
from seqkit.cli.train import main as train


def assert_one_line_error(r, prog, *fragments, log_lines_allowed=False):
    """Exit 1, no traceback, one error line naming ``prog`` that contains every fragment.

    ``log_lines_allowed``: the failure comes after logging started (e.g. the trainer announced the
    model), so log lines may precede the error; the error is still one line, and the last one.
    """
    assert r.code == 1, f"exit code {r.code}; stderr:\n{r.err}"
    assert "Traceback" not in r.err, r.err
    lines = r.err.strip().splitlines() if not log_lines_allowed else r.messages
    assert len(lines) == 1, f"expected one line on stderr, got:\n{r.err}"
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    assert r.err.strip().splitlines()[-1] == lines[0]
    for f in fragments:
        assert f in lines[0], f"{f!r} not in {lines[0]!r}"
    return lines[0]


def snapshot(folder):
    """{file name: sha1} of a folder (empty when it does not exist)."""
    if not os.path.isdir(folder):
        return {}
    return {n: hashlib.sha1((folder / n).read_bytes()).hexdigest() for n in sorted(os.listdir(folder))}


@pytest.fixture(scope="module")
def trained(toy_data, tmp_path_factory, tiny_train_args):
    """A tiny transformer trained 10 updates: 2 epochs of 5, the stop on epoch 2's last batch ends it
    (checkpoint1.pt, checkpoint2.pt, checkpoint_last.pt)."""
    from seqkit.cli.train import train as train_fn

    _, data = toy_data
    save_dir = tmp_path_factory.mktemp("trained") / "checkpoints"
    train_fn([f"task.data={data}", f"checkpoint.save_dir={save_dir}", "optimization.max_update=10", *tiny_train_args])
    assert {p.name for p in save_dir.glob("checkpoint*.pt")} >= {"checkpoint1.pt", "checkpoint2.pt", "checkpoint_last.pt"}
    return save_dir


@pytest.fixture
def save_dir_copy(trained, tmp_path):
    dest = tmp_path / "checkpoints"
    shutil.copytree(trained, dest)
    return dest


# -- config errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("override, fragments", [
    ("optimizer.foo=1", ["unknown config key 'optimizer.foo'", "lr", "betas"]),
    ("model.bogus=1", ["unknown config key 'model.bogus'", "embed_dim", "encoder_layers"]),
    ("bogus=1", ["unknown config key 'bogus'", "common", "optimization", "checkpoint"]),
    ("optimization.bogus=1", ["unknown config key 'optimization.bogus'", "max_update"]),
    ("model=nope", ["unknown model 'nope'", "transformer_tiny", "transformer_small"]),
    ("optimizer=nope", ["unknown optimizer 'nope'", "adam"]),
    ("lr_scheduler=nope", ["unknown lr_scheduler 'nope'", "inverse_sqrt"]),
    ("optimizer.lr=abc", ["optimizer.lr", "abc"]),
    ("optimization.max_update=1.5", ["max_update"]),
])
def test_train_bad_config(run_cli, toy_data, tmp_path, override, fragments):
    _, data = toy_data
    save_dir = tmp_path / "ck"
    r = run_cli(train, [f"task.data={data}", f"checkpoint.save_dir={save_dir}", "model=transformer_tiny", override])
    assert_one_line_error(r, "seqkit-train", *fragments)
    assert not save_dir.exists()


@pytest.mark.parametrize("override, fragments", [
    ("generation.bogus=1", ["unknown config key 'generation.bogus'", "beam", "lenpen"]),
    ("bogus=1", ["unknown config key 'bogus'", "path", "gen_subset"]),
    ("generation.beam=abc", ["generation.beam", "abc"]),
])
def test_generate_bad_config(run_cli, trained, tmp_path, override, fragments):
    r = run_cli(generate, [f"path={trained / 'checkpoint_last.pt'}", f"results_path={tmp_path / 'res'}", override])
    assert_one_line_error(r, "seqkit-generate", *fragments)
    assert not (tmp_path / "res").exists()


# -- missing or broken files ------------------------------------------------------------------------
def test_train_missing_data_folder(run_cli, tmp_path, tiny_train_args):
    save_dir = tmp_path / "ck"
    r = run_cli(train, ["task.data=/nonexistent", f"checkpoint.save_dir={save_dir}", *tiny_train_args])
    assert_one_line_error(r, "seqkit-train", "/nonexistent", log_lines_allowed=True)
    assert not save_dir.exists()


def test_generate_missing_data_folder(run_cli, trained, tmp_path, fast_gen_args):
    r = run_cli(generate, [f"path={trained / 'checkpoint_last.pt'}", "task.data=/nonexistent",
                           f"results_path={tmp_path / 'res'}", *fast_gen_args])
    assert_one_line_error(r, "seqkit-generate", "/nonexistent", log_lines_allowed=True)
    assert not list(tmp_path.glob("res/generate-*"))


def test_generate_missing_checkpoint(run_cli, toy_data, tmp_path, fast_gen_args):
    _, data = toy_data
    r = run_cli(generate, [f"path={tmp_path / 'nope.pt'}", f"task.data={data}", f"results_path={tmp_path / 'res'}",
                           *fast_gen_args])
    assert_one_line_error(r, "seqkit-generate", "checkpoint not found", str(tmp_path / "nope.pt"), log_lines_allowed=True)
    assert not list(tmp_path.glob("res/generate-*"))


def test_generate_truncated_checkpoint(run_cli, trained, toy_data, tmp_path, fast_gen_args):
    _, data = toy_data
    good = (trained / "checkpoint_last.pt").read_bytes()
    bad = tmp_path / "half.pt"
    bad.write_bytes(good[: len(good) // 2])
    r = run_cli(generate, [f"path={bad}", f"task.data={data}", f"results_path={tmp_path / 'res'}", *fast_gen_args])
    assert_one_line_error(r, "seqkit-generate", str(bad), "corrupt", log_lines_allowed=True)
    assert not list(tmp_path.glob("res/generate-*"))


def test_generate_file_that_is_not_a_checkpoint(run_cli, toy_data, tmp_path, fast_gen_args):
    import torch

    _, data = toy_data
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, foreign)
    r = run_cli(generate, [f"path={foreign}", f"task.data={data}", *fast_gen_args])
    assert_one_line_error(r, "seqkit-generate", "not a seqkit checkpoint", log_lines_allowed=True)


def test_train_resumes_from_older_checkpoint_when_last_is_corrupt(run_cli, save_dir_copy, toy_data, tiny_train_args):
    _, data = toy_data
    last = save_dir_copy / "checkpoint_last.pt"
    last.write_bytes(last.read_bytes()[:1000])
    r = run_cli(train, [f"task.data={data}", f"checkpoint.save_dir={save_dir_copy}", "optimization.max_update=12",
                        *tiny_train_args])
    assert r.code == 0, r.err
    assert "Traceback" not in r.err
    warnings = [line for line in r.err.splitlines() if "| WARNING |" in line]
    assert any(str(last) in w and "corrupt" in w and "older checkpoint" in w for w in warnings), r.err
    assert f"resuming from {save_dir_copy / 'checkpoint2.pt'}" in r.err
    assert "resumed at epoch 3, update 10," in r.err  # checkpoint2.pt: the end of epoch 2, 10 updates
    assert "done: reached max_update 12; 12 updates" in r.err


def test_train_all_checkpoints_corrupt(run_cli, save_dir_copy, toy_data, tiny_train_args):
    _, data = toy_data
    for p in save_dir_copy.glob("*.pt"):
        p.write_bytes(p.read_bytes()[:1000])
    before = snapshot(save_dir_copy)
    r = run_cli(train, [f"task.data={data}", f"checkpoint.save_dir={save_dir_copy}", "optimization.max_update=12",
                        *tiny_train_args])
    assert_one_line_error(r, "seqkit-train", "no usable checkpoint", str(save_dir_copy), log_lines_allowed=True)
    assert snapshot(save_dir_copy) == before


# -- a checkpoint that does not fit ----------------------------------------------------------------------
def test_generate_with_data_binarized_for_another_dictionary(run_cli, trained, toy_data, toy_data_factory,
                                                               tmp_path, fast_gen_args):
    raw, _ = toy_data
    _, other = toy_data_factory(tmp_path, vocab_size=150, raw=raw)  # same text, another vocabulary
    r = run_cli(generate, [f"path={trained / 'checkpoint_last.pt'}", f"task.data={other}",
                           f"results_path={tmp_path / 'res'}", *fast_gen_args])
    assert_one_line_error(r, "seqkit-generate", "dictionary", log_lines_allowed=True)
    assert not list(tmp_path.glob("res/generate-*"))


@pytest.mark.parametrize("change, differs", [
    (["model.embed_dim=32"], "embed_dim"),
    (["model=transformer_small"], "encoder_layers"),
])
def test_train_resume_with_another_model_config(run_cli, save_dir_copy, toy_data, tiny_train_args, change, differs):
    _, data = toy_data
    before = snapshot(save_dir_copy)
    r = run_cli(train, [f"task.data={data}", f"checkpoint.save_dir={save_dir_copy}", "optimization.max_update=12",
                        *tiny_train_args, *change])
    msg = assert_one_line_error(r, "seqkit-train", "different model", log_lines_allowed=True)
    assert differs in msg and "checkpoint.reset=true" in msg
    assert snapshot(save_dir_copy) == before


# -- bad sentences at generation -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def short_model(toy_data, tmp_path_factory, tiny_train_args):
    """A model that accepts at most 16 source tokens (no validation: see the report on valid sets)."""
    from seqkit.cli.train import train as train_fn

    _, data = toy_data
    save_dir = tmp_path_factory.mktemp("short") / "checkpoints"
    train_fn([f"task.data={data}", f"checkpoint.save_dir={save_dir}", "optimization.max_update=3",
              "model.max_source_positions=16", "model.max_target_positions=16", "dataset.valid_subset=",
              *tiny_train_args])
    return save_dir / "checkpoint_last.pt"


def test_generate_source_longer_than_max_positions(run_cli, short_model, tmp_path, fast_gen_args):
    line = " ".join(["Der Hund spielt im Park."] * 20)  # 100 words
    r = run_cli(generate, [f"path={short_model}", "input=-", f"results_path={tmp_path / 'res'}", *fast_gen_args],
                stdin="Der Hund spielt.\n" + line + "\n")
    assert_one_line_error(r, "seqkit-generate", "at most 16", log_lines_allowed=True)
    assert not list(tmp_path.glob("res/generate-*"))


def test_generate_long_source_error_names_its_input_line(run_cli, short_model, fast_gen_args):
    """stdin is read in chunks of batch_size lines: the error must give the line's id in the whole input."""
    lines = ["Der Hund spielt.", "Die Katze schläft.", "Der Mann läuft.", " ".join(["Der Hund spielt im Park."] * 20)]
    r = run_cli(generate, [f"path={short_model}", "input=-", "batch_size=2", *fast_gen_args],
                stdin="".join(line + "\n" for line in lines))
    assert_one_line_error(r, "seqkit-generate", "sentence 3 ", "at most 16", log_lines_allowed=True)


def test_generate_non_utf8_stdin(trained, fast_gen_args):
    """Real bytes on a real stdin (a separate process): Latin-1 text is not UTF-8."""
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               OMP_NUM_THREADS="1")
    proc = subprocess.run(["seqkit-generate", f"path={trained / 'checkpoint_last.pt'}", "input=-", *fast_gen_args],
                          input="Der Hund läuft über die Straße.\n".encode("latin-1"), env=env,
                          capture_output=True, timeout=120)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 1, err
    assert "Traceback" not in err, err
    lines = [line for line in err.strip().splitlines() if " | INFO | " not in line]
    assert len(lines) == 1 and lines[0].startswith("seqkit-generate: error: "), err
    assert "UTF-8" in lines[0] or "utf-8" in lines[0]
