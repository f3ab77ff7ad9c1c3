"""Settings that would be accepted and then ignored, or fail late and misleadingly, are one line up
front: distillation's top_k for label tasks and above the vocabulary, a prompt longer than the
body's positions, head pruning on another task's data folder; a mode's settings under another mode
are named in the log; a parameter-efficient checkpoint's base is found from any folder; the
example scripts share one generate-and-score helper."""

import importlib.util
import logging
import os
import sys
from pathlib import Path

import pytest
import torch
from transfer_fixtures import make_text, pretrained_bodies, run

from label_fixtures import one_line_error, single, single_ckpt, translation_ckpt  # noqa: F401  (fixtures by name)
from seqkit.adapt.modes import unused_settings
from seqkit.core.checkpoints import unique_tensors
from seqkit.cli.prune import main as prune
from seqkit.cli.train import main as train
from seqkit.core import checkpoints
from seqkit.core.checkpoints import load_for_inference
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.models.pretrained import PretrainedClassifierConfig, resolve_base_path

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    """(a 2-update gpt_tiny pretraining checkpoint, classification data binarized in its vocabulary)."""
    text = make_text(tmp_path_factory.mktemp("refused"))
    return pretrained_bodies(text, ["gpt"], tmp_path_factory)["gpt"]


def finetune_args(base, data, save, *extra):
    return ["task=classification", f"task.data={data}", "model=pretrained_classifier", f"model.path={base}",
            "criterion=cross_entropy", "model.dropout=0", f"checkpoint.save_dir={save}", *extra]


# -- distillation's top_k ------------------------------------------------------------------------------
def test_top_k_on_a_label_task_is_one_line(single, run_cli, tmp_path):  # noqa: F811
    root, _ = single
    r = run_cli(train, ["task=classification", f"task.data={root / 'bin'}", "model=cbow_tiny", "common.threads=1",
                        "criterion=distillation", f"criterion.teacher={tmp_path / 'teacher.pt'}", "criterion.top_k=4",
                        f"checkpoint.save_dir={tmp_path / 'x'}"])
    one_line_error(r, "seqkit-train", "criterion.top_k=4 applies to translation and language models",
                   "a classifier keeps", log_lines_allowed=True)
    assert not (tmp_path / "x").exists()


def test_top_k_above_the_vocabulary_is_one_line(toy_data, run_cli, tmp_path):
    from seqkit.data.dictionary import Dictionary

    _, data = toy_data
    vocab = len(Dictionary.load(str(Path(data) / "dict.en.txt")))
    common = [f"task.data={data}", "model=transformer_tiny", "common.threads=1", "criterion=distillation",
              f"criterion.teacher={tmp_path / 'teacher.pt'}", f"checkpoint.save_dir={tmp_path / 'x'}"]
    r = run_cli(train, common + [f"criterion.top_k={vocab + 1}"])
    one_line_error(r, "seqkit-train", f"criterion.top_k={vocab + 1} is more than the target vocabulary's {vocab}",
                   log_lines_allowed=True)
    r = run_cli(train, common + [f"criterion.top_k={vocab}"])  # the whole vocabulary: allowed, on to the teacher
    one_line_error(r, "seqkit-train", "no such checkpoint", log_lines_allowed=True)
    assert not (tmp_path / "x").exists()


# -- a mode's settings under another mode --------------------------------------------------------------
def test_unused_settings_name_each_non_default_one():
    cfg = PretrainedClassifierConfig(adapt="full")
    assert unused_settings(cfg) == []
    cfg.lora.rank, cfg.lora.targets, cfg.prompt.length = 4, ["qkv_proj", "fc2"], 3
    assert unused_settings(cfg) == ["model.lora.rank=4", "model.lora.targets=[qkv_proj,fc2]", "model.prompt.length=3"]
    cfg.adapt = "lora"
    assert unused_settings(cfg) == ["model.prompt.length=3"]


def test_lora_settings_under_full_are_named_once_in_the_log(gpt, caplog, tmp_path):
    base, data = gpt
    with caplog.at_level(logging.WARNING, logger="seqkit.models"):
        trainer = run(finetune_args(base, data, tmp_path / "ft", "model.adapt=full", "model.lora.rank=4",
                                    "optimization.max_update=1", "dataset.valid_subset="))
    said = [r.getMessage() for r in caplog.records if "not used" in r.getMessage()]
    assert said == ["pretrained_classifier: model.lora.rank=4 not used: model.adapt=full (a mode's settings, "
                    "model.<mode>.*, are read by that mode alone)"]
    assert not any(hasattr(m, "lora") for m in trainer.model.modules())
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="seqkit.models"):  # loading the checkpoint: no second line
        load_for_inference(str(tmp_path / "ft" / "checkpoint_last.pt"))
    assert not [r for r in caplog.records if "not used" in r.getMessage()]


# -- prompt length ---------------------------------------------------------------------------------------
def test_a_prompt_longer_than_the_body_is_one_line_before_any_file(gpt, run_cli, tmp_path):
    base, data = gpt
    body = load_for_inference(str(base))[1]
    positions = body.max_positions()[0]
    for k in (positions, positions + 100):
        r = run_cli(train, finetune_args(base, data, tmp_path / "x", "model.adapt=prompt", f"model.prompt.length={k}",
                                         "common.threads=1"))
        one_line_error(r, "seqkit-train", f"model.prompt.length={k}", f"at most {positions} positions",
                       log_lines_allowed=True)
    assert not (tmp_path / "x").exists()


# -- the base checkpoint's path --------------------------------------------------------------------------
def test_a_parameter_efficient_checkpoint_loads_from_another_folder(gpt, monkeypatch, tmp_path):
    base, data = gpt
    monkeypatch.chdir(base.parent)
    run(finetune_args(base.name, data, tmp_path / "ft", "model.adapt=bitfit", "optimization.max_update=1",
                      "dataset.valid_subset="))
    ck = tmp_path / "ft" / "checkpoint_last.pt"
    recorded = checkpoints.load(str(ck))["cfg"]["model"]["path"]
    assert recorded == str(base) and os.path.isabs(recorded)  # typed relative, recorded absolute
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    _, model = load_for_inference(str(ck))
    assert model.cfg.base_sha256


def test_an_older_relative_base_path_is_found_as_given_then_beside_the_checkpoint(monkeypatch, tmp_path):
    (tmp_path / "run" / "ck").mkdir(parents=True)
    (tmp_path / "run" / "ck" / "base.pt").write_bytes(b"x")
    values = {"name": "pretrained_classifier", "path": "base.pt", "base_sha256": "ab" * 32}
    ck = str(tmp_path / "run" / "ck" / "checkpoint_last.pt")
    monkeypatch.chdir(tmp_path)
    assert resolve_base_path(values, ck)["path"] == str(tmp_path / "run" / "ck" / "base.pt")  # beside it
    (tmp_path / "base.pt").write_bytes(b"y")
    assert resolve_base_path(values, ck)["path"] == "base.pt"  # as given first, when it is there
    (tmp_path / "base.pt").unlink()
    (tmp_path / "run" / "ck" / "base.pt").unlink()
    assert resolve_base_path(values, ck) == values  # nowhere: unchanged, loading names the missing base
    assert resolve_base_path({**values, "base_sha256": ""}, ck) == {**values, "base_sha256": ""}
    assert MODELS.builder("pretrained_tagger").resolve_paths is resolve_base_path  # the loaders' hook


def test_a_missing_relative_base_names_the_folder_it_was_read_from(gpt, monkeypatch, tmp_path):
    base, data = gpt
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SeqkitError) as e:
        run(finetune_args("no_base.pt", data, tmp_path / "ft", "model.adapt=frozen"))
    assert f"read from the folder seqkit runs in, {tmp_path}" in str(e.value) and "\n" not in str(e.value)


# -- head pruning on another task's data -----------------------------------------------------------------
def test_head_pruning_on_another_tasks_folder_is_one_line(translation_ckpt, single, run_cli, tmp_path):  # noqa: F811
    root, _ = single
    r = run_cli(prune, [f"path={translation_ckpt}", f"output={tmp_path / 'x.pt'}", "method=heads",
                        f"data={root / 'bin'}", "threads=1"])
    one_line_error(r, "seqkit-prune", "holds classification data", "is a translation model",
                   "the checkpoint's task and the data folder do not match", log_lines_allowed=True)
    assert ".idx" not in r.err and not (tmp_path / "x.pt").exists()


# -- the examples' shared generate-and-score -------------------------------------------------------------
def test_the_sweep_and_the_distillation_example_share_one_evaluate(single, single_ckpt, monkeypatch,  # noqa: F811
                                                                   tmp_path):
    sweep = (ROOT / "examples" / "pruning" / "sweep.py").read_text(encoding="utf-8")
    assert "from evaluate import generate, score, sh" in sweep and "\"seqkit-generate\"" not in sweep
    spec = importlib.util.spec_from_file_location(
        "kd_evaluate", ROOT / "examples" / "distillation" / "multi30k" / "evaluate.py")
    evaluate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(evaluate)  # importable: the script's work is under main()
    table = torch.zeros(3, 2)  # a tied table saved under two names: its parameters counted once
    assert sum(t.numel() for t in unique_tensors(
        {"embed": table, "output": table, "bias": torch.zeros(4), "x._float_tensor": torch.zeros(1)})) == 10
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    root, _ = single
    out = tmp_path / "b64"
    speed = evaluate.generate(str(single_ckpt / "checkpoint_best.pt"), str(root / "bin"), "valid", str(out), None, 64, 1)
    assert speed > 0  # classification prints examples/s
    scores = evaluate.score(str(out / "generate-valid.txt"))
    assert 0 <= scores["accuracy"] <= 100


def test_distillation_results_give_each_seeded_student_its_mean_and_sd(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "kd_evaluate", ROOT / "examples" / "distillation" / "multi30k" / "evaluate.py")
    evaluate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(evaluate)

    def row(model, bleu, speed):
        return {"model": model, "parameters": 10, "updates": 5,
                **{k: bleu for k in ("valid_beam5_bleu", "valid_beam1_bleu", "beam5_bleu", "beam1_bleu",
                                     "beam5_chrf", "beam1_chrf")},
                **{f"{k}_sent_per_s": speed for k in ("beam5_b64", "beam1_b64", "beam5_b1", "beam1_b1")}}

    evaluate.write_tables(str(tmp_path), [row("teacher", 40.0, 10.0), row("student-s1", 38.0, 20.0),
                                          row("student-s2", 39.0, 30.0), row("other", 1.0, 1.0)])
    text = (tmp_path / "results.md").read_text(encoding="utf-8")
    assert "| student | 2 | 38.50 ± 0.71 | 38.50 ± 0.71 | 38.50 ± 0.71 |" in text
    assert "| 2.00-3.00x | 2.00-3.00x | 2.00-3.00x | 2.00-3.00x |" in text
    assert "| other |" in text and "| other | 1 |" not in text  # one run is a row, not a seeds row
