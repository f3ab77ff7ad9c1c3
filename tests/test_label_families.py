"""Every classifier and tagger family through the whole toolkit: the end-to-end shell test
(synthetic data -> preprocess -> train -> generate on the dev and test splits and on stdin -> score)."""

import json
import os
import re
import sys
from pathlib import Path

import pytest
from side_by_side import SideBySide, selected

SCRIPT = Path(__file__).parent / "e2e" / "classification.sh"
BIN = os.path.dirname(sys.executable)
ENV = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), OMP_NUM_THREADS="1")
FAMILIES = [
    ("cbow_tiny", "classification"),
    ("kim_cnn_tiny", "classification"),
    ("bilstm_classifier_tiny", "classification"),
    ("transformer_classifier_tiny", "classification"),
    ("bilstm_tagger_tiny", "tagging"),
    ("transformer_tagger_tiny", "tagging"),
]


@pytest.fixture(scope="module")
def shell_runs(request, tmp_path_factory):
    """The selected families' shell tests, side by side (each is one thread): (model -> work folder, the runs)."""
    models = selected(request, "test_end_to_end_shell", "model")
    works = {model: tmp_path_factory.mktemp(f"e2e_{model}") for model in models}
    runs = SideBySide({model: (["bash", SCRIPT, works[model], model, task], works[model], ENV)
                       for model, task in FAMILIES if model in models}, timeout=300)
    yield works, runs
    runs.close()


def run_script(shell_runs, model):
    works, runs = shell_runs
    proc = runs.result(model)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    family = model[: -len("_tiny")]
    assert f"| model {family}: " in proc.stderr  # the trainer built the model asked for
    return works[model], proc


def label_rows(text):
    return [re.match(r"^([STL])-(\d+)\t(.*)$", line).groups() for line in text.splitlines()]


def check_classification(tmp_path, proc):
    labels = json.loads((tmp_path / "data-bin" / "preprocess.json").read_text())["labels"]
    assert labels == ["0", "1"]
    n_dev, n_test = 16, 6
    rows = label_rows((tmp_path / "gen.txt").read_text(encoding="utf-8"))
    assert [(k, int(i)) for k, i, _ in rows] == [(k, i) for i in range(n_dev) for k in "STL"]
    for kind, _, rest in rows:
        fields = rest.split("\t")
        if kind == "S":
            assert len(fields) == 2  # the two sentences of the pair
        elif kind == "L":  # topk=2: both labels, most probable first
            assert sorted(fields[0::2]) == labels and float(fields[1]) >= float(fields[3])
    # the score matches the output: accuracy = L- label equals T- label
    gold = {i: rest for k, i, rest in rows if k == "T"}
    correct = sum(rest.split("\t")[0] == gold[i] for k, i, rest in rows if k == "L")
    assert f"accuracy = {100 * correct / n_dev:.2f} ({correct}/{n_dev})" in proc.stdout.splitlines()
    assert any(line.startswith("mcc = ") for line in proc.stdout.splitlines())
    test = label_rows((tmp_path / "predict" / "generate-test.txt").read_text(encoding="utf-8"))
    assert [(k, int(i)) for k, i, _ in test] == [(k, i) for i in range(n_test) for k in "SL"]  # no gold: no T-
    stdin = label_rows((tmp_path / "stdin.txt").read_text(encoding="utf-8"))
    assert [(k, int(i)) for k, i, _ in stdin] == [("S", 0), ("L", 0), ("S", 1), ("L", 1)]
    assert stdin[0][2] == "a good film\tthe plot was lovely"


def conll_blocks(path):
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n\n")  # a blank line after each sentence, the last one included
    return [[line.split(" ") for line in block.split("\n")] for block in text[:-2].split("\n\n")]


def check_tagging(tmp_path, proc):
    tags = json.loads((tmp_path / "data-bin" / "preprocess.json").read_text())["labels"]
    dev = conll_blocks(tmp_path / "raw" / "dev.conll")
    dev = [s for s in dev if s[0][0] != "-DOCSTART-"]
    gen = conll_blocks(tmp_path / "gen.txt")
    assert len(gen) == len(dev) == 10
    for out, ref in zip(gen, dev):  # word gold pred
        assert [row[:2] for row in out] == [[r[0], r[-1]] for r in ref]
        assert all(len(row) == 3 and row[2] in tags for row in out)
    (entity,) = [line for line in proc.stdout.splitlines() if line.startswith("entity_f1 = ")]
    n_gold = sum(row[-1].startswith("B-") for s in dev for row in s)
    assert f"{n_gold} gold phrases" in entity
    assert any(line.startswith("token_accuracy = ") for line in proc.stdout.splitlines())
    test = conll_blocks(tmp_path / "predict" / "generate-test.txt")
    assert len(test) == 4 and all(len(row) == 2 and row[1] in tags for s in test for row in s)  # word pred
    stdin = conll_blocks(tmp_path / "stdin.txt")
    assert [[row[0] for row in s] for s in stdin] == [["Peter", "Blackburn", "visited", "Amsterdam", "today"],
                                                     ["the", "European", "Commission", "said"]]


@pytest.mark.parametrize("model, task", FAMILIES, ids=[m for m, _ in FAMILIES])
def test_end_to_end_shell(model, task, shell_runs):
    work, proc = run_script(shell_runs, model)
    records = [json.loads(line) for line in (work / "checkpoints" / "train_log.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["tag"] == "valid"]
    metrics = {"accuracy", "macro_f1", "mcc"} if task == "classification" else {"precision", "recall", "f1", "accuracy"}
    assert valid and all(metrics <= set(r) for r in valid)
    assert (work / "checkpoints" / "checkpoint_best.pt").exists()
    (check_classification if task == "classification" else check_tagging)(work, proc)
