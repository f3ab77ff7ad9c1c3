"""seqkit-generate icl.verbalizers=[...] reads the language model's own task.eos_prefix: an LM
trained without it (an imported GPT-2's setting) is prompted with nothing before its first
demonstration, one trained with it with ``</s>`` first; the printed labels and probabilities are
those of that prompt, and differ from the other's (so a command that forced either would fail)."""

import re

import pytest
import torch
from transfer_fixtures import binarize, make_text, pretrain

from seqkit.core.checkpoints import load_for_inference
from seqkit.core.registry import TASKS
from seqkit.generation.config import InContextConfig
from seqkit.generation.in_context import InContextClassifier

VERBALIZERS = ["v1", "v2"]  # words of the LM's vocabulary, for labels 0 and 1
SHOTS = 2


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return make_text(tmp_path_factory.mktemp("icl_text"))


@pytest.fixture(scope="module", params=[False, True], ids=["eos_prefix=false", "eos_prefix=true"])
def lm(request, text, tmp_path_factory):
    """(eos_prefix the GPT trained with, its checkpoint, the classification folder in its vocabulary)."""
    save = tmp_path_factory.mktemp(f"icl_gpt_{request.param}")
    pretrain(text, "gpt", save, updates=3, extra=[f"task.eos_prefix={str(request.param).lower()}"])
    ck = save / "checkpoint_last.pt"
    return request.param, ck, binarize(text, save / "cls", ck)


def api_predictions(ck, data, eos_prefix: bool):
    """What InContextClassifier predicts for the valid split with ``eos_prefix`` given explicitly."""
    _, model = load_for_inference(str(ck))
    task = TASKS.build(TASKS.make_config({"name": "classification", "data": str(data)}))
    c = InContextClassifier(task, model, torch.device("cpu"), InContextConfig(verbalizers=VERBALIZERS, shots=SHOTS),
                            eos_prefix=eos_prefix)
    ds = task.load_dataset("valid")
    return [(p["label"], p["prob"]) for p in c.predict_ids([ds.src[i].tolist() for i in range(len(ds))])]


def test_in_context_classification_prompts_as_the_language_model_trained(lm, run_cli):
    from seqkit.cli.generate import main as generate

    trained, ck, data = lm
    assert load_for_inference(str(ck))[0].cfg.eos_prefix is trained  # the checkpoint holds the setting
    r = run_cli(generate, [f"path={ck}", f"task.data={data}", "gen_subset=valid", f"icl.shots={SHOTS}",
                           f"icl.verbalizers=[{','.join(VERBALIZERS)}]", "common.threads=1"])
    assert r.code == 0, r.err
    got = [(label, float(p)) for label, p in re.findall(r"^L-\d+\t(\S+)\t([\d.]+)", r.out, re.M)]
    assert len(got) == 20  # the dev rows
    right, wrong = api_predictions(ck, data, trained), api_predictions(ck, data, not trained)
    assert [g[0] for g in got] == [w[0] for w in right]
    assert [g[1] for g in got] == pytest.approx([w[1] for w in right], abs=1e-4)
    # the test can tell: the other setting's prompt prints other probabilities
    assert max(abs(g[1] - w[1]) for g, w in zip(got, wrong)) > 1e-3
