"""Every pretraining objective's checkpoint fine-tunes in the classification and tagging tasks
(model=pretrained_classifier / pretrained_tagger, data binarized with vocab_from=)."""

import json
import math
import os
import re
import sys
from pathlib import Path

import pytest
import torch
from side_by_side import SideBySide, selected
from transfer_fixtures import OBJECTIVES, WORDS, binarize, make_text, pretrain, run, trainer_for

from seqkit.core import checkpoints
from seqkit.core.errors import SeqkitError
from seqkit.core.io import file_sha256
from seqkit.generation.classifier import Classifier
from seqkit.models.pretrained import pool
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers.space import SpaceConfig

@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return make_text(tmp_path_factory.mktemp("transfer"))


@pytest.fixture(scope="module")
def runs(text, tmp_path_factory):
    """objective -> (the checkpoint of a few updates of it, its last validation)."""
    out = {}
    for name in OBJECTIVES:
        save = tmp_path_factory.mktemp(f"pre_{name}")
        result = pretrain(text, name, save)
        out[name] = (save / "checkpoint_last.pt", result["valid"])
    return out


@pytest.fixture(scope="module")
def pretrained(runs):
    return {name: ck for name, (ck, _) in runs.items()}


@pytest.mark.parametrize("objective", list(OBJECTIVES))
def test_every_objective_loads_into_the_classification_task(text, pretrained, tmp_path, objective):
    ck = pretrained[objective]
    data = binarize(text, tmp_path / "bin", ck)
    trainer = trainer_for(["task=classification", f"task.data={data}", "model=pretrained_classifier", f"model.path={ck}",
                           f"checkpoint.save_dir={tmp_path / 'ft'}"])
    body = trainer.model.body.state_dict()
    saved = checkpoints.load(str(ck))["model"]
    # every tensor the body keeps is the pretrained one; the pretraining heads are gone
    assert body and all(torch.equal(v, saved[k]) for k, v in body.items())
    heads = trainer.model.body.pretraining_heads
    assert all(getattr(trainer.model.body, h) is None for h in heads)
    assert all(k.split(".")[0] in heads for k in set(saved) - set(body))  # (a tied softmax has no tensor of its own)
    assert trainer.cfg.model.body["vocab_size"] >= len(trainer.task.src_dict)


def test_frozen_run_keeps_the_body_saves_the_head_and_needs_its_base(text, pretrained, tmp_path):
    ck_copy = tmp_path / "bert.pt"
    ck_copy.write_bytes(pretrained["bert"].read_bytes())
    data = binarize(text, tmp_path / "bin", ck_copy)
    ft = tmp_path / "ft"
    trainer = trainer_for(["task=classification", f"task.data={data}", "model=pretrained_classifier",
                           f"model.path={ck_copy}", "model.adapt=frozen", "optimization.max_update=10",
                           f"checkpoint.save_dir={ft}"])
    head_before = trainer.model.head.out.weight.detach().clone()
    trainer.run()
    saved = checkpoints.load(str(ck_copy))["model"]
    assert all(torch.equal(v, saved[k]) for k, v in trainer.model.body.state_dict().items())
    state = checkpoints.load(str(ft / "checkpoint_last.pt"))
    assert sorted(state["model"]) == sorted(k for k in trainer.model.state_dict() if k.startswith("head."))
    assert state["cfg"]["model"]["base_sha256"] == file_sha256(str(ck_copy))
    clf = Classifier.from_checkpoint(str(ft / "checkpoint_last.pt"))
    assert not torch.equal(clf.model.head.out.weight, head_before)  # the head did train
    assert torch.equal(clf.model.head.out.weight, trainer.model.head.out.weight)
    result = clf.predict(["v3 v0 v5", "v3 v2 v5"])
    assert [r["label"] in ("0", "1") for r in result] == [True, True]
    ck_copy.unlink()  # the head alone cannot classify
    with pytest.raises(SeqkitError, match="is not there: a model.adapt=frozen checkpoint holds only what it trained"):
        Classifier.from_checkpoint(str(ft / "checkpoint_last.pt"))


def test_finetuned_checkpoint_stands_alone(text, pretrained, tmp_path):
    ck_copy = tmp_path / "gpt.pt"
    ck_copy.write_bytes(pretrained["gpt"].read_bytes())
    data = binarize(text, tmp_path / "bin", ck_copy)
    trainer = run(["task=classification", f"task.data={data}", "model=pretrained_classifier", f"model.path={ck_copy}",
                   "optimization.max_update=3", f"checkpoint.save_dir={tmp_path / 'ft'}"])
    ck_copy.unlink()
    clf = Classifier.from_checkpoint(str(tmp_path / "ft" / "checkpoint_last.pt"))
    for k, v in trainer.model.state_dict().items():
        assert torch.equal(v, clf.model.state_dict()[k]), k


@pytest.mark.parametrize("objective", ["elmo", "bart"])
def test_pretrained_tagger_gives_one_label_per_position(text, pretrained, objective):
    from seqkit.core.registry import MODELS
    from seqkit.data.dictionary import Dictionary
    from seqkit.models.pretrained import PretrainedTaggerConfig

    src = Dictionary.from_state_dict(checkpoints.load(str(pretrained[objective]))["task_state"]["dict"])
    model = MODELS.build(PretrainedTaggerConfig(path=str(pretrained[objective])), src, 5).eval()
    tokens = torch.tensor([[1, 6, 7, 8, 2], [1, 9, 2, 0, 0]])
    out = model(tokens, torch.tensor([5, 3]))
    assert out.shape == (2, 5, 5)
    # right padding changes nothing for the real positions
    alone = model(tokens[1:, :3], torch.tensor([3]))
    assert torch.allclose(out[1, :3], alone[0], atol=1e-5)


def test_data_binarized_with_another_dictionary_is_one_error(text, pretrained, tmp_path):
    preprocess(PreprocessConfig(task="classification", trainpref=str(text / "train.tsv"), destdir=str(tmp_path / "own"),
                                tokenizer=SpaceConfig()))
    with pytest.raises(SeqkitError, match="vocab_from="):
        trainer_for(["task=classification", f"task.data={tmp_path / 'own'}", "model=pretrained_classifier",
                     f"model.path={pretrained['gpt']}", f"checkpoint.save_dir={tmp_path / 'x'}"])


def test_missing_model_path_is_one_error(text, pretrained, tmp_path):
    data = binarize(text, tmp_path / "bin", pretrained["gpt"])
    with pytest.raises(SeqkitError, match="needs model.path="):
        trainer_for(["task=classification", f"task.data={data}", "model=pretrained_classifier",
                     f"checkpoint.save_dir={tmp_path / 'x'}"])


def test_vocab_from_names_what_is_wrong(text, tmp_path):
    with pytest.raises(SeqkitError, match="no such checkpoint"):
        binarize(text, tmp_path / "bin", tmp_path / "missing.pt")


def test_pooling_reads_first_last_mean_and_max_over_real_positions():
    x = torch.arange(2 * 4 * 1, dtype=torch.float).view(2, 4, 1)  # rows [0 1 2 3], [4 5 6 7]
    tokens = torch.tensor([[1, 5, 6, 2], [1, 5, 2, 0]])  # second row: 3 real positions
    lengths = torch.tensor([4, 3])
    assert pool(x, tokens, lengths, "first", 0).view(-1).tolist() == [0, 4]
    assert pool(x, tokens, lengths, "last", 0).view(-1).tolist() == [3, 6]
    assert pool(x, tokens, lengths, "mean", 0).view(-1).tolist() == [1.5, 5.0]
    assert pool(x, tokens, lengths, "max", 0).view(-1).tolist() == [3, 6]


@pytest.mark.parametrize("objective", ["bert", "spanbert", "electra", "bart", "t5"])
def test_eval_lm_scores_noised_objectives_as_validation_does(text, runs, objective):
    """seqkit-eval-lm's masked/denoising path and the trainer's validation are two codes over the
    same fixed masks: they agree on loss and accuracy."""
    from seqkit.analysis.eval_lm import EvalLMConfig, evaluate
    from seqkit.tasks.language_modeling import LanguageModelingConfig

    ck, valid = runs[objective]
    r = evaluate(EvalLMConfig(task=LanguageModelingConfig(data=str(text / "lm")), path=str(ck), gen_subset="valid"))
    assert r["accuracy"] == pytest.approx(valid["accuracy"], abs=0.01)
    assert r["loss"] == pytest.approx(valid["nll_loss"], abs=2e-3)
    assert r["accuracy"] <= r["top5_accuracy"] and 0 < r["unigram_accuracy"] < 100
    assert 0 < r["unigram_loss"] <= math.log2(len(WORDS) + 20)
    if objective in ("bert", "spanbert", "electra"):  # the training split's unigram cannot beat the targets' own
        assert r["unigram_train_loss"] >= r["unigram_loss"]
    if objective == "electra":  # the discriminator beside its base rate, on the generator's samples
        assert r["disc_loss"] > 0 and 0 < r["disc_base_rate_loss"] <= 1 and 0 <= r["disc_auc"] <= 1
        assert r["disc_base_rate_accuracy"] == pytest.approx(100 - r["replaced"], abs=0.01)
        assert r["disc_token_only_loss"] <= r["disc_base_rate_loss"]  # the token alone can only help


SCRIPT = Path(__file__).parent / "e2e" / "transfer.sh"
ENV = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
           OMP_NUM_THREADS="1")


ALL_MODES = ["full", "frozen", "adapter", "lora", "bitfit", "prompt", "ulmfit"]


E2E_CASES = [  # (task, model, extra, family, modes, head)
    ("language_modeling", "gpt_tiny", ["criterion=cross_entropy"], "transformer_lm", ALL_MODES, "default"),
    ("masked_lm", "roberta_mini", ["criterion=masked_lm", "model.encoder_layers=1", "model.embed_dim=32",
                                   "model.ffn_dim=64", "model.attention_heads=2"], "bert", ["full", "lora"], "default"),
    # Peters et al.'s use of ELMo: the frozen body's mixed layers beside a task BiLSTM's own embeddings
    ("language_modeling", "elmo_tiny", ["criterion=cross_entropy"], "elmo", ["frozen"], "bilstm"),
]


@pytest.fixture(scope="module", autouse=True)
def shell_runs(request, tmp_path_factory):
    """The selected cases' shell tests, side by side and beside this module's other tests (each is one
    thread): (model -> work folder, the runs)."""
    models = selected(request, "test_end_to_end_shell", "model")
    works = {model: tmp_path_factory.mktemp(f"transfer_{model}") for model in models}
    jobs = {model: (["bash", SCRIPT, works[model], task, model, *extra], works[model],
                    dict(ENV, MODES=" ".join(modes), HEAD=head))
            for task, model, extra, _, modes, head in E2E_CASES if model in models}
    runs = SideBySide(jobs, timeout=600)
    yield works, runs
    runs.close()


@pytest.mark.parametrize("task, model, extra, family, modes, head", E2E_CASES)
def test_end_to_end_shell(shell_runs, task, model, extra, family, modes, head):
    works, runs = shell_runs
    work, proc = works[model], runs.result(model)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    # the base path typed relative is recorded absolute: the checkpoint works from any folder
    assert re.search(rf"pretrained_classifier: body {family} from /\S*/pretrain/checkpoint_last\.pt\b", proc.stderr)
    assert checkpoints.load(str(work / "finetune" / "checkpoint_last.pt"))["cfg"]["model"]["head"] == head
    meta = json.loads((work / "cls-bin" / "preprocess.json").read_text())
    assert meta["vocab_from"] == "pretrain/checkpoint_last.pt"
    assert (work / "cls-bin" / "dict.input.txt").read_text() == (work / "lm-bin" / "dict.text.txt").read_text()
    r = json.loads((work / "eval.json").read_text())
    assert r["split"] == "test" and ("ppl" in r)
    lines = (work / "stdin.txt").read_text(encoding="utf-8").splitlines()
    assert [line[:2] for line in lines] == ["S-", "L-", "S-", "L-"]
    for mode in modes:
        # every mode learns the polarity word (chance: 50%; a model that learns nothing stays under 62)
        score = (work / f"score-{mode}.txt").read_text()
        accuracy = float(re.search(r"^accuracy = ([\d.]+)", score, re.M).group(1))
        assert accuracy >= 70, f"{mode}: {score}"
        gen = (work / f"gen-{mode}.txt").read_text(encoding="utf-8")
        if mode in ("full", "ulmfit"):  # stands alone
            assert (work / f"alone-{mode}.txt").read_text(encoding="utf-8") == gen
            continue
        # needs its base, in one line; exported whole it stands alone and predicts the same labels
        err = (work / f"needs-base-{mode}.txt").read_text().strip()
        assert re.match(r"seqkit-generate: error: the base checkpoint /\S*/pretrain/checkpoint_last\.pt is not there", err)
        assert "\n" not in err
        alone = (work / f"standalone-{mode}.txt").read_text(encoding="utf-8").splitlines()
        for a, b in zip(alone, gen.splitlines()):
            if a.startswith("L-"):
                (la, pa), (lb, pb) = a.split("\t")[1:3], b.split("\t")[1:3]
                assert la == lb and abs(float(pa) - float(pb)) <= 2e-4, (a, b)
            else:
                assert a == b
        assert len(alone) == len(gen.splitlines())
