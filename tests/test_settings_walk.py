"""Used or refused, walked: every field of a command's schema, set on its own to a valid value
other than its default, is either refused in one line that names it or read by the command
(seqkit.core.settings.ReadLog sees the read). A new setting is covered the day it is added: the
walk takes the fields from the schema, not from a list here."""

import dataclasses
import os
import typing

import pytest
from omegaconf import OmegaConf
from transfer_fixtures import make_text, pretrained_bodies

from label_fixtures import one_line_error, single, single_ckpt, tagged, tagged_ckpt, translation_ckpt  # noqa: F401
from seqkit.cli.common import ConfigBuilder
from seqkit.cli.generate import main as generate
from seqkit.core.registry import GROUPS
from seqkit.core.settings import ReadLog
from seqkit.generation.config import GenerateConfig

CLI_DIR = os.path.dirname(os.path.abspath(generate.__code__.co_filename))  # cli/ of a checkout, or seqkit/cli
# fields the walk cannot set to just any other value, each with where it is tested instead
NOT_WALKED = {
    "common.user_dir": "a plugin folder, imported before the config is built (tests/test_plugin.py)",
    "engine": "engine=ctranslate2 needs the optional ctranslate2 package (tests/test_ctranslate2.py)",
}
# a valid value other than the default, where the type alone does not give one
VALUES = {"common.attention_kernels": "math", "common.device": "cpu", "gen_subset": "valid", "input": "-",
          "icl.verbalizers": "[good,bad]", "icl.template": "'{0} : {label}'", "generation.nbest": "2"}


def _field(builder, key):
    node, f = builder.schema, None
    for depth, part in enumerate(key.split(".")):
        if depth == 1 and key.split(".")[0] in builder.defaults:  # a field of the group's chosen option
            node = type(GROUPS[key.split(".")[0]].choices()[builder.defaults[key.split(".")[0]]])
        f = {x.name: x for x in dataclasses.fields(node)}[part]
        node = typing.get_type_hints(node).get(part)
    return f


def other_value(builder, key, tmp_path):
    """A valid value of ``key`` other than its default, as an override's right-hand side."""
    if key in VALUES:
        return VALUES[key]
    f = _field(builder, key)
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    m = f.metadata
    if "choices" in m:
        return next(str(c) for c in m["choices"] if c != default)
    if isinstance(default, bool):
        return "false" if default else "true"
    kind = str(f.type)
    if "int" in kind or "float" in kind:
        value = (default or 0) + 1
        if ("le" in m and value > m["le"]) or ("lt" in m and value >= m["lt"]):
            value = (default or 0) - 1
        return str(value)
    if "List" in kind or "list" in kind:
        return "[x]"
    return str(tmp_path / key.replace(".", "_"))  # a path-like string: a new place under tmp


def walk(run_cli, monkeypatch, main, prog, config, schema, base, tmp_path, stdin=None, keys=None, declared=None):
    """Set each key of ``schema`` outside ``base`` and not read by the base run; return the problems.
    ``keys``: which keys to walk; ``declared``: the keys the base run reads by the command's own
    declaration, when its set-up reads every field (seqkit-train): the others must be refused."""
    logs = []
    original = OmegaConf.to_object

    def watched(cfg):
        out = original(cfg)
        if isinstance(out, schema):
            logs.append(ReadLog(CLI_DIR))
            logs[-1].watch(out)
        return out

    monkeypatch.setattr(OmegaConf, "to_object", watched)
    r = run_cli(main, base, stdin=stdin)
    assert r.code == 0, r.err
    read = set().union(*(log.keys for log in logs))
    given = {a.split("=", 1)[0] for a in base}
    problems = []
    builder = ConfigBuilder(config, schema)
    if declared is not None:  # the command's own declaration stands for the reads
        read = {k for k in builder.keys([]) if declared(k)}
    for key in builder.keys([]):
        if key in given or key in read or key in NOT_WALKED or (keys is not None and not keys(key)):
            continue
        logs.clear()
        setting = f"{key}={other_value(builder, key, tmp_path)}"
        r = run_cli(main, [*base, setting], stdin=stdin)
        if r.code != 0:
            last = r.err.strip().splitlines()[-1] if r.err.strip() else ""
            # the message names the key (task.name: task=; task.tokens_per_sample: tokens_per_sample)
            names = (key, key.rsplit(".", 1)[-1]) if not key.endswith(".name") else (key, key.split(".")[0] + "=")
            if "Traceback" in r.err or not last.startswith(f"{prog}: error: ") or not any(n in last for n in names):
                problems.append(f"{setting}: exit {r.code} without one line naming it: {last!r}")
        elif declared is not None or not any(log.read(key) for log in logs):
            problems.append(f"{setting}: accepted and not read")
    return problems


@pytest.fixture(scope="module")
def lm_bodies(tmp_path_factory):
    text = make_text(tmp_path_factory.mktemp("walk"))
    return {**pretrained_bodies(text, ["gpt", "bert"], tmp_path_factory), "lm": text / "lm"}


def test_generate_on_a_translation_checkpoint(translation_ckpt, toy_data, run_cli, monkeypatch, tmp_path):  # noqa: F811
    _, data = toy_data
    base = [f"path={translation_ckpt}", f"task.data={data}", "common.threads=1", "generation.beam=2",
            "generation.max_len_b=6", "batch_size=64"]
    assert walk(run_cli, monkeypatch, generate, "seqkit-generate", "generate", GenerateConfig, base, tmp_path,
                stdin="ein haus\n") == []


@pytest.mark.parametrize("kind", ["classifier", "tagger"])
def test_generate_on_a_label_checkpoint(kind, request, run_cli, monkeypatch, tmp_path):
    root, _ = request.getfixturevalue("single" if kind == "classifier" else "tagged")
    ck = request.getfixturevalue("single_ckpt" if kind == "classifier" else "tagged_ckpt")
    base = [f"path={ck / 'checkpoint_best.pt'}", f"task.data={root / 'bin'}", "common.threads=1"]
    assert walk(run_cli, monkeypatch, generate, "seqkit-generate", "generate", GenerateConfig, base, tmp_path,
                stdin="a b c\n") == []


@pytest.mark.parametrize("body", ["gpt", "bert"])
def test_generate_on_a_language_model(body, lm_bodies, run_cli, monkeypatch, tmp_path):
    ck, _ = lm_bodies[body]
    base = [f"path={ck}", "input=-", "common.threads=1", *(["generation.max_len_b=4"] if body == "gpt" else [])]
    stdin = "v1 v2\n" if body == "gpt" else "v1 <mask> v2\n"
    assert walk(run_cli, monkeypatch, generate, "seqkit-generate", "generate", GenerateConfig, base, tmp_path,
                stdin=stdin) == []


def test_generate_in_context(lm_bodies, run_cli, monkeypatch, tmp_path):
    ck, cls = lm_bodies["gpt"]
    base = [f"path={ck}", f"task.data={cls}", "gen_subset=valid", "icl.verbalizers=[v1,v2]", "icl.shots=1",
            "common.threads=1"]
    assert walk(run_cli, monkeypatch, generate, "seqkit-generate", "generate", GenerateConfig, base, tmp_path) == []


# -- seqkit-train: the sections every task shares (a component's own fields are its config's) --------
TRAIN_SECTIONS = ("common.", "dataset.", "optimization.", "checkpoint.", "distributed.", "energy.")


def train_walk(run_cli, monkeypatch, base, tmp_path):
    from seqkit.cli.train import main as train
    from seqkit.training.config import TrainConfig

    from seqkit.training.settings import train_reads

    cfg = OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(base))
    reads = train_reads(cfg, 1, cfg.model.name.startswith("transformer"))
    return walk(run_cli, monkeypatch, train, "seqkit-train", "train", TrainConfig, base, tmp_path,
                keys=lambda key: key.startswith(TRAIN_SECTIONS), declared=reads.covers)


def test_train_translation(toy_data, tiny_train_args, run_cli, monkeypatch, tmp_path):
    _, data = toy_data
    base = [f"task.data={data}", f"checkpoint.save_dir={tmp_path / 'ck'}", "optimization.max_update=2",
            *tiny_train_args]
    assert train_walk(run_cli, monkeypatch, base, tmp_path) == []


def test_train_classifier(single, run_cli, monkeypatch, tmp_path):  # noqa: F811
    root, _ = single
    base = ["task=classification", f"task.data={root / 'bin'}", "model=cbow_tiny", "criterion=cross_entropy",
            f"checkpoint.save_dir={tmp_path / 'ck'}", "optimization.max_update=2", "common.threads=1"]
    assert train_walk(run_cli, monkeypatch, base, tmp_path) == []


# -- the other commands: every field, the read seen by ReadLog ---------------------------------------
def test_eval_lm(lm_bodies, run_cli, monkeypatch, tmp_path):
    from seqkit.analysis.eval_lm import EvalLMConfig
    from seqkit.cli.eval_lm import main as eval_lm

    ck, _ = lm_bodies["gpt"]
    base = [f"path={ck}", f"task.data={lm_bodies['lm']}", "gen_subset=valid", "common.threads=1"]
    assert walk(run_cli, monkeypatch, eval_lm, "seqkit-eval-lm", "eval_lm", EvalLMConfig, base, tmp_path) == []


@pytest.mark.parametrize("kind", ["translation", "classification"])
def test_score(kind, request, run_cli, tmp_path, monkeypatch):
    from seqkit.cli.score import main as score
    from seqkit.scoring.text import ScoreConfig

    if kind == "translation":
        hyp = tmp_path / "hyp.txt"
        hyp.write_text("".join(f"S-{i}\tein haus\nT-{i}\ta house\nH-{i}\t-0.5\ta house\nD-{i}\t-0.5\ta house\n"
                               f"P-{i}\t-0.5 -0.5\n" for i in range(3)), encoding="utf-8")
    else:
        hyp = tmp_path / "labels.txt"
        hyp.write_text("".join(f"S-{i}\ta b\nT-{i}\t{i % 2}\nL-{i}\t1\t0.9\n" for i in range(4)), encoding="utf-8")
    assert walk(run_cli, monkeypatch, score, "seqkit-score", "score", ScoreConfig, [f"hyp={hyp}"], tmp_path) == []


@pytest.mark.parametrize("method", ["heads", "magnitude"])
def test_prune(method, translation_ckpt, toy_data, run_cli, monkeypatch, tmp_path):  # noqa: F811
    from seqkit.analysis.prune import PruneConfig
    from seqkit.cli.prune import main as prune

    _, data = toy_data
    base = [f"path={translation_ckpt}", f"output={tmp_path / 'pruned.pt'}", f"method={method}", "threads=1",
            *([f"data={data}", "subset=valid"] if method == "heads" else [])]
    assert walk(run_cli, monkeypatch, prune, "seqkit-prune", "prune", PruneConfig, base, tmp_path) == []


@pytest.mark.parametrize("task", ["translation", "language_modeling", "classification"])
def test_preprocess(task, single, tmp_path, run_cli, monkeypatch):  # noqa: F811
    from seqkit.cli.preprocess import main as preprocess
    from seqkit.data.toy_corpus import make_corpus
    from seqkit.preprocess.text import PreprocessConfig

    raw = tmp_path / "raw"
    make_corpus(str(raw), 40, 8, 8, seed=1)
    root, _ = single
    prefs = {"translation": ["source_lang=de", "target_lang=en", f"trainpref={raw}/train", f"validpref={raw}/valid"],
             "language_modeling": [f"trainpref={raw}/train.en", f"validpref={raw}/valid.en"],
             "classification": [f"trainpref={root}/train", f"validpref={root}/dev.tsv"]}[task]
    base = [f"task={task}", *prefs, f"destdir={tmp_path / 'bin'}", "overwrite=true", "tokenizer=space"]
    assert walk(run_cli, monkeypatch, preprocess, "seqkit-preprocess", "preprocess", PreprocessConfig, base,
                tmp_path) == []


# -- the cases of issue 60, each by name -----------------------------------------------------------
@pytest.mark.parametrize("settings, fragment", [
    (["generation.sampling=true", "generation.sampling_topk=5"],
     "generation.sampling (and generation.sampling_topk): seqkit-generate on a classification checkpoint does not read"),
    (["generation.sampling_topk=5"], "generation.sampling_topk: seqkit-generate on a classification checkpoint"),
    (["generation.beam=7"], "without search or sampling"),
    (["topk=5"], "topk=5: the checkpoint has 3 labels; at most topk=3"),
    (["max_tokens=100"], "max_tokens: seqkit-generate on a classification checkpoint does not read it"),
])
def test_a_classifier_refuses_search_settings(settings, fragment, single, single_ckpt, run_cli, tmp_path):  # noqa: F811
    root, _ = single
    r = run_cli(generate, [f"path={single_ckpt / 'checkpoint_best.pt'}", f"task.data={root / 'bin'}",
                           "common.threads=1", f"results_path={tmp_path / 'out'}", *settings])
    one_line_error(r, "seqkit-generate", fragment, log_lines_allowed=True)
    assert not (tmp_path / "out").exists()


def test_average(translation_ckpt, run_cli, monkeypatch, tmp_path):  # noqa: F811
    from seqkit.cli.average import main as average
    from seqkit.training.average import AverageConfig

    base = [f"inputs=[{translation_ckpt},{translation_ckpt}]", f"output={tmp_path / 'avg.pt'}"]
    assert walk(run_cli, monkeypatch, average, "seqkit-average", "average", AverageConfig, base, tmp_path) == []
