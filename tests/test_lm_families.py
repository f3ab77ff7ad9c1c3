"""Every language-model family through the whole toolkit: the end-to-end shell test (synthetic
text -> preprocess -> train -> eval-lm -> generate from stdin prompts)."""

import json
import os
import re
import sys
from pathlib import Path

import pytest
from side_by_side import SideBySide, selected

SCRIPT = Path(__file__).parent / "e2e" / "language_model.sh"
BIN = os.path.dirname(sys.executable)
ENV = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def shell_runs(request, tmp_path_factory):
    """The selected models' shell tests, side by side (each is one thread): (model -> work folder, the runs)."""
    models = selected(request, "test_end_to_end_shell", "model")
    works = {model: tmp_path_factory.mktemp(f"e2e_{model}") for model in models}
    runs = SideBySide({model: (["bash", SCRIPT, works[model], model], works[model], ENV) for model in models},
                      timeout=300)
    yield works, runs
    runs.close()


@pytest.mark.parametrize("model, family", [("gpt_tiny", "transformer_lm"), ("lstm_lm_tiny", "lstm_lm")])
def test_end_to_end_shell(model, family, shell_runs):
    works, runs = shell_runs
    work, proc = works[model], runs.result(model)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert f"| model {family}: " in proc.stderr
    meta = json.loads((work / "data-bin" / "preprocess.json").read_text())
    r = json.loads((work / "eval.json").read_text())
    assert r["split"] == "test" and r["words"] == meta["words"]["test"] and r["context_window"] == 16
    assert r["tokens"] > r["words"]  # BPE pieces outnumber words: per-word perplexity is the higher one
    assert r["word_ppl"] > r["ppl"] > 1
    for name, per_prompt in (("beam.txt", 1), ("sample.txt", 2)):
        lines = (work / name).read_text(encoding="utf-8").splitlines()
        kinds = [re.match(r"^([SHDP])-(\d+)\t", line).groups() for line in lines]
        expect = [(k, str(i)) for i in range(2) for k in ["S"] + ["H", "D", "P"] * per_prompt]
        assert kinds == expect
        assert lines[0] == "S-0\tThe old cat"
