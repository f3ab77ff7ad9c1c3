"""Settings the commands other than train/generate/eval-lm used to accept and ignore (or answer
with a traceback) are one line, exit 1, nothing written: carve settings off a carve, a prune
method's settings under the other method, a probe scored on its own training split, translation
metrics on label output, a quantization a format does not store, and a blank passage to draw."""

import pytest
from transfer_fixtures import binarize, make_text, pretrain, trainer_for

from label_fixtures import one_line_error, translation_ckpt  # noqa: F401  (fixtures by name)
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers.char import CharConfig


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    """make_text's folder: raw train/valid text and TSVs, the word-level LM folder ``lm``."""
    return make_text(tmp_path_factory.mktemp("refused_cmds"))


@pytest.fixture(scope="module")
def lstm_lms(text):
    """{"word": a 1-update lstm_lm_tiny on whitespace words, "char": one on characters}."""
    preprocess(PreprocessConfig(task="language_modeling", trainpref=str(text / "train.txt"),
                                validpref=str(text / "valid.txt"), destdir=str(text / "char"), tokenizer=CharConfig()))
    pretrain(text, "lstm_lm", text / "word_ck", updates=1)
    trainer_for(["task=language_modeling", "model=lstm_lm_tiny", f"task.data={text / 'char'}",
                 "task.tokens_per_sample=24", "optimization.max_update=1",
                 f"checkpoint.save_dir={text / 'char_ck'}"]).run()
    return {"word": text / "word_ck" / "checkpoint_last.pt", "char": text / "char_ck" / "checkpoint_last.pt"}


# -- 1. seqkit-preprocess: carve settings --------------------------------------------------------------
def _preprocess_case(text, case):
    if case.startswith("lm"):
        return ["task=language_modeling", f"trainpref={text / 'train.txt'}", "tokenizer=space"]
    if case.startswith("translation"):
        for side in ("de", "en"):
            (text / f"train.{side}").write_text((text / "train.txt").read_text())
        return ["source_lang=de", "target_lang=en", f"trainpref={text / 'train'}", "tokenizer=space"]
    return ["task=classification", f"trainpref={text / 'train.tsv'}", "tokenizer=space"]


@pytest.mark.parametrize("case, setting, fragments", [
    ("lm", "carve_unit=sentence", ["carve_unit=sentence", "classification and tagging", "task=language_modeling"]),
    ("translation", "carve_unit=bogus", ["carve_unit='bogus'", "example, sentence"]),
    ("translation-seed", "carve_seed=7", ["carve_seed=7", "classification and tagging", "task=translation"]),
    ("classification", "carve_seed=7", ["carve_seed=7", "carve_valid=0 holds out nothing", "set carve_valid"]),
    ("lm-columns", "label_column=Quality", ["label_column=Quality", "task=classification", "drop it"]),
])
def test_preprocess_refuses_a_carve_setting_it_would_ignore(text, run_cli, tmp_path, case, setting, fragments):
    from seqkit.cli.preprocess import main

    dest = tmp_path / "out"
    r = run_cli(main, [*_preprocess_case(text, case), setting, f"destdir={dest}"])
    one_line_error(r, "seqkit-preprocess", *fragments)
    assert not dest.exists()


# -- 2. seqkit-prune: each method's own settings -------------------------------------------------------
@pytest.mark.parametrize("settings, fragments", [
    (["method=heads", "scope=layer"], ["scope=layer", "method=magnitude", "head pruning"]),
    (["method=magnitude", "step=0.5", "data=DATA"], ["step=0.5, data=", "method=heads", "magnitude pruning reads"]),
    (["method=magnitude", "subset=test"], ["subset=test", "method=heads"]),
])
def test_prune_refuses_the_other_methods_settings(toy_data, translation_ckpt, run_cli, tmp_path,  # noqa: F811
                                                  settings, fragments):
    from seqkit.cli.prune import main as prune

    _, data = toy_data
    out = tmp_path / "pruned.pt"
    r = run_cli(prune, [f"path={translation_ckpt}", f"output={out}", "threads=1",
                        *[s.replace("DATA", str(data)) for s in settings]])
    one_line_error(r, "seqkit-prune", *fragments)
    assert not out.exists()


# -- 3. seqkit-probe: scored on the split its probes train on --------------------------------------------
@pytest.mark.parametrize("setting", ["report=train", "split=train"])
def test_probe_refuses_scoring_on_the_training_split(text, lstm_lms, run_cli, tmp_path, setting):
    from seqkit.cli.probe import main as probe

    data = binarize(text, tmp_path / "cls", lstm_lms["word"])
    out = tmp_path / "probe.json"
    r = run_cli(probe, [f"path={lstm_lms['word']}", f"data={data}", setting, f"output={out}", "threads=1"])
    one_line_error(r, "seqkit-probe", setting, "the probes are trained on train", "valid")
    assert not out.exists()


def test_probe_refuses_a_sentence_pooling_on_tagging_data(text, lstm_lms, run_cli, tmp_path):
    from seqkit.cli.probe import main as probe
    from seqkit.tokenizers.space import SpaceConfig

    for split in ("train", "valid"):
        rows = [f"v{i} {'A' if i % 2 else 'B'}\nv{i + 1} B\n" for i in range(10)]
        (tmp_path / f"{split}.conll").write_text("\n".join(rows), encoding="utf-8")
    preprocess(PreprocessConfig(task="tagging", trainpref=str(tmp_path / "train.conll"),
                                validpref=str(tmp_path / "valid.conll"), destdir=str(tmp_path / "tags"),
                                tokenizer=SpaceConfig(), vocab_from=str(lstm_lms["word"])))
    r = run_cli(probe, [f"path={lstm_lms['word']}", f"data={tmp_path / 'tags'}", "pooling=first", "threads=1"])
    one_line_error(r, "seqkit-probe", "pooling=first", "tagging data", "drop pooling", log_lines_allowed=True)


# -- 4. seqkit-score: translation options on label output -----------------------------------------------
CLASSIFICATION_OUTPUT = "S-0\tgood film\nT-0\tpos\nL-0\tpos\t0.9\nS-1\tbad film\nT-1\tneg\nL-1\tpos\t0.6\n"
TAGGING_OUTPUT = "Peter NN I-NP B-PER\nvisited VB I-VP O\n\nAmsterdam NN I-NP B-LOC\n"


@pytest.mark.parametrize("kind, setting, fragments", [
    ("classification", "metrics=bleu", ["metrics=bleu", "translation", "accuracy", "macro-F1", "MCC"]),
    ("classification", "metrics=chrf", ["metrics=chrf", "classification output"]),
    ("classification", "tokenize=intl", ["tokenize=intl", "translation"]),
    ("tagging", "metrics=[bleu,ter]", ["metrics=[bleu,ter]", "tagging output", "entity F1"]),
    ("tagging", "sentence_level=true", ["sentence_level=true", "translation"]),
    ("translation", "positive_label=pos", ["positive_label=pos", "classification", "translation output"]),
])
def test_score_refuses_metrics_of_another_kind_of_output(run_cli, tmp_path, kind, setting, fragments):
    from seqkit.cli.score import main as score

    hyp = tmp_path / "hyp.txt"
    hyp.write_text({"classification": CLASSIFICATION_OUTPUT, "tagging": TAGGING_OUTPUT,
                    "translation": "S-0\tx\nT-0\tthe cat\nH-0\t-0.1\tthe cat\nD-0\t-0.1\tthe cat\n"}[kind])
    r = run_cli(score, [f"hyp={hyp}", setting])
    one_line_error(r, "seqkit-score", *fragments, log_lines_allowed=True)
    assert r.out == ""


# -- 5. seqkit-export: a quantization only CTranslate2 stores -----------------------------------------
@pytest.mark.parametrize("fmt, setting, fragments", [
    ("checkpoint", "quantization=int8", ["quantization=int8", "format=ctranslate2", "format=checkpoint writes"]),
    ("huggingface", "quantization=int8", ["quantization=int8", "format=ctranslate2", "format=huggingface writes"]),
    ("ctranslate2", "peft=true", ["peft=true", "format=huggingface"]),
])
def test_export_refuses_a_setting_its_format_does_not_take(translation_ckpt, run_cli, tmp_path,  # noqa: F811
                                                           fmt, setting, fragments):
    from seqkit.cli.export import main as export

    out = tmp_path / "out"
    r = run_cli(export, [f"format={fmt}", f"path={translation_ckpt}", f"output={out}", setting])
    one_line_error(r, "seqkit-export", *fragments)
    assert not out.exists()


# -- 6. seqkit-plot activations: a passage with no text ----------------------------------------------
@pytest.mark.parametrize("lm", ["word", "char"])
@pytest.mark.parametrize("content", ["", "   \n\n \t \n"])
def test_plot_activations_refuses_a_passage_without_text(lstm_lms, run_cli, tmp_path, lm, content):
    from seqkit.cli.plot import main as plot

    passage = tmp_path / "empty.txt"
    passage.write_text(content, encoding="utf-8")
    out = tmp_path / "act.png"
    r = run_cli(plot, ["activations", f"path={lstm_lms[lm]}", f"text_file={passage}", f"output={out}"])
    one_line_error(r, "seqkit-plot", f"{passage} has no text", "a passage", log_lines_allowed=True)
    assert not out.exists()
