"""Word-level distillation: the soft term's hand-written backward, alpha = 0 equal to plain
training bit for bit, the loss at T = 1 and alpha = 1 equal to the teacher's cross-entropy by hand,
teacher outputs kept per example for classifiers and taggers, and the teacher checks."""

import json
from pathlib import Path

import pytest
import torch

import seqkit
from seqkit.criteria.distillation import SoftCrossEntropy
from seqkit.data.toy_corpus import make_corpus
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers.space import SpaceConfig
from seqkit.training.trainer import Trainer
from tests.test_trainer import data_dir  # noqa: F401  (a fixture)
from tests.test_trainer import make_cfg as mt_cfg
from tests.test_trainer import params
from label_fixtures import one_line_error, single, tagged, train_cfg  # noqa: F401  (fixtures are used by name)

seqkit.import_builtin_components()


@pytest.mark.parametrize("temperature", [1.0, 2.5])
def test_soft_cross_entropy_matches_autograd(temperature):
    torch.manual_seed(0)
    logits = torch.randn(7, 11, dtype=torch.double, requires_grad=True)
    q = torch.randn(7, 11, dtype=torch.double).softmax(-1)
    keep = (torch.arange(7) < 5).double()
    ce = SoftCrossEntropy.apply(logits, q, keep, temperature)
    (grad,) = torch.autograd.grad(ce.sum() * 1.3, logits)
    ref_logits = logits.detach().clone().requires_grad_()
    ref = -(q * (ref_logits / temperature).log_softmax(-1)).sum(-1) * keep
    (ref_grad,) = torch.autograd.grad(ref.sum() * 1.3, ref_logits)
    torch.testing.assert_close(ce, ref.detach())
    torch.testing.assert_close(grad, ref_grad)
    assert grad[5:].abs().max() == 0  # padding gets no gradient


@pytest.fixture(scope="module")
def mt(data_dir, tmp_path_factory):  # noqa: F811
    """The trainer tests' toy de-en corpus (space-tokenized) and a teacher trained 8 updates on it."""
    save = tmp_path_factory.mktemp("kd") / "teacher"
    Trainer(mt_cfg(data_dir, save, "optimization.max_update=8", "criterion=cross_entropy")).run()
    return Path(data_dir), save / "checkpoint_last.pt"


def distilling(data, teacher, save_dir, alpha, temperature):
    """A trainer distilling from ``teacher`` (dropout off), one training batch of its data, the
    student in train mode and the teacher."""
    trainer = Trainer(mt_cfg(data, save_dir, "criterion=distillation", f"criterion.teacher={teacher}",
                             f"criterion.alpha={alpha}", f"criterion.temperature={temperature}", "model.dropout=0"))
    ds = trainer.task.load_dataset("train")
    sample = ds.collate(ds.batches(200, 0, shuffle=False)[0])
    return trainer, sample, trainer.model.train(), trainer.criterion.teacher


def test_alpha_zero_is_plain_training_bit_for_bit(mt, tmp_path, monkeypatch):
    data, teacher = mt
    plain = Trainer(mt_cfg(data, tmp_path / "a", "optimization.max_update=6", "criterion=cross_entropy"))
    # the gold term is the logits path's (the student's logits serve the soft term): compare with it,
    # not with the fused path plain training takes (equal to fp32 rounding, tests/test_fused_loss.py)
    monkeypatch.setattr("seqkit.criteria.cross_entropy.fused_smoothed_nll", lambda *a: None)
    plain.run()
    monkeypatch.undo()
    kd = Trainer(mt_cfg(data, tmp_path / "b", "optimization.max_update=6", "criterion=distillation",
                        f"criterion.teacher={teacher}", "criterion.alpha=0", "criterion.temperature=2"))
    kd.run()
    a, b = params(plain), params(kd)
    assert all(torch.equal(a[k], b[k]) for k in a)  # dropout on: the teacher drew no random numbers


def test_alpha_one_at_t1_is_the_teachers_cross_entropy(mt, tmp_path):
    trainer, sample, model, teacher = distilling(*mt, tmp_path / "c", alpha=1, temperature=1)
    loss, n, logs = trainer.criterion(model, sample)
    with torch.no_grad():
        s = model(**sample["net_input"]).log_softmax(-1)  # (B, T, V)
        q = teacher(**sample["net_input"]).softmax(-1)
        keep = sample["target"].ne(trainer.task.ignore_index)
        by_hand = -(q * s).sum(-1)[keep].sum()
        kl = (q * (q.log() - s)).sum(-1)[keep].sum()
    assert n == int(keep.sum())
    assert loss.item() == pytest.approx(by_hand.item(), rel=1e-5)
    assert float(logs["kd_loss"]) == pytest.approx(kl.item(), rel=1e-4, abs=1e-4)
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    model.eval()  # validation: the gold targets only
    gold, _, logs = trainer.criterion(model, sample)
    assert "kd_loss" not in logs and gold.item() == pytest.approx(float(logs["nll_loss"]), rel=1e-6)


def test_temperature_and_alpha_mix(mt, tmp_path):
    trainer, sample, model, teacher = distilling(*mt, tmp_path / "d", alpha=0.25, temperature=3)
    loss, _, logs = trainer.criterion(model, sample)
    with torch.no_grad():
        z = model(**sample["net_input"])
        keep = sample["target"].ne(trainer.task.ignore_index)
        gold = -z.log_softmax(-1).gather(-1, sample["target"][..., None]).squeeze(-1)[keep].sum()
        soft = -(teacher(**sample["net_input"]).div(3).softmax(-1) * z.div(3).log_softmax(-1)).sum(-1)[keep].sum()
    assert loss.item() == pytest.approx(0.75 * gold.item() + 0.25 * 9 * soft.item(), rel=1e-5)


class Counting(torch.nn.Module):
    """Wraps a teacher and counts the examples it is run on."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.examples = inner, 0

    def forward(self, **net_input):
        self.examples += next(iter(net_input.values())).size(0)
        return self.inner(**net_input)


@pytest.mark.parametrize("task,model,fixture", [("classification", "cbow_tiny", "single"),
                                                ("tagging", "bilstm_tagger_tiny", "tagged")])
def test_label_teachers_run_once_per_example(task, model, fixture, request, tmp_path):
    root, _ = request.getfixturevalue(fixture)
    Trainer(train_cfg(root / "bin", tmp_path / "t", task, model, "optimization.max_epoch=2")).run()
    teacher = tmp_path / "t" / "checkpoint_last.pt"
    student = Trainer(train_cfg(root / "bin", tmp_path / "s", task, model, "optimization.max_epoch=3",
                                "criterion=distillation", f"criterion.teacher={teacher}", "criterion.alpha=0.7",
                                "criterion.temperature=2", "dataset.max_tokens=64"))
    counting = student.criterion.teacher = Counting(student.criterion.teacher)
    student.run()
    n_train = len(student.task.load_dataset("train"))
    assert len(student.criterion._outputs) == n_train
    assert counting.examples < 2 * n_train  # 3 epochs, each example's teacher output computed once
    # a kept output is what the teacher says of the example now, in any batch
    ds = student.task.load_dataset("train")
    sample = ds.collate(ds.batches(64, 0, shuffle=False)[0])
    with torch.no_grad():
        fresh = counting.inner(**sample["net_input"])
    q, _ = student.criterion._teacher_probs(sample, fresh)
    keep = sample["target"].reshape(-1).ne(student.task.ignore_index)
    want = fresh.div(2).softmax(-1).reshape(-1, fresh.size(-1))
    torch.testing.assert_close(q[keep], want[keep], rtol=1e-5, atol=1e-6)


def test_top_k_keeps_the_teachers_best_tokens_once_per_sentence(mt, tmp_path):
    data, teacher_path = mt
    student = Trainer(mt_cfg(data, tmp_path / "k", "criterion=distillation", f"criterion.teacher={teacher_path}",
                             "criterion.top_k=3", "criterion.temperature=2", "optimization.max_epoch=3"))
    counting = student.criterion.teacher = Counting(student.criterion.teacher)
    student.run()
    n_train = len(student.task.load_dataset("train"))
    assert len(student.criterion._outputs) == n_train and counting.examples < 2 * n_train
    ds = student.task.load_dataset("train")
    sample = ds.collate(ds.batches(200, 0, shuffle=False)[0])
    with torch.no_grad():
        z = counting.inner(**sample["net_input"])
    q, _ = student.criterion._teacher_probs(sample, z)
    keep = sample["target"].reshape(-1).ne(student.task.ignore_index)
    v, i = z.reshape(-1, z.size(-1))[keep].topk(3, dim=-1)
    want = torch.zeros_like(q[keep]).scatter_(1, i, v.div(2).softmax(-1))
    torch.testing.assert_close(q[keep], want, rtol=1e-5, atol=1e-6)
    assert torch.equal(q[keep].count_nonzero(dim=-1), torch.full((int(keep.sum()),), 3))


def test_bad_teachers_are_one_line_errors(mt, single, run_cli, tmp_path):  # noqa: F811
    from seqkit.cli.train import main

    data, teacher = mt
    common = [f"task.data={data}", "model=transformer_tiny", "common.threads=1", "criterion=distillation"]
    r = run_cli(main, common + [f"checkpoint.save_dir={tmp_path / 'x'}"])
    one_line_error(r, "seqkit-train", "criterion.teacher=CHECKPOINT")
    r = run_cli(main, common + [f"criterion.teacher={tmp_path / 'none.pt'}", f"checkpoint.save_dir={tmp_path / 'x'}"])
    one_line_error(r, "seqkit-train", "no such checkpoint")
    r = run_cli(main, common + [f"criterion.teacher={teacher}", "criterion.alpha=1.5"])
    one_line_error(r, "seqkit-train", "criterion.alpha")
    # a teacher of another task
    root, _ = single
    Trainer(train_cfg(root / "bin", tmp_path / "cls", "classification", "cbow_tiny", "optimization.max_update=1",
                      "dataset.valid_subset=")).run()
    r = run_cli(main, common + [f"criterion.teacher={tmp_path / 'cls' / 'checkpoint_last.pt'}",
                                f"checkpoint.save_dir={tmp_path / 'x'}"])
    one_line_error(r, "seqkit-train", "classifier checkpoint", log_lines_allowed=True)
    # a teacher of the same task with another dictionary
    make_corpus(str(tmp_path / "raw2"), n_train=60, n_valid=10, n_test=5, seed=7)
    preprocess(PreprocessConfig(source_lang="de", target_lang="en", trainpref=f"{tmp_path}/raw2/train",
                                destdir=str(tmp_path / "bin2"), tokenizer=SpaceConfig(), nwordssrc=30))
    Trainer(mt_cfg(tmp_path / "bin2", tmp_path / "t2", "optimization.max_update=1", "dataset.valid_subset=",
                   "criterion=cross_entropy")).run()
    r = run_cli(main, common + [f"criterion.teacher={tmp_path / 't2' / 'checkpoint_last.pt'}",
                                f"checkpoint.save_dir={tmp_path / 'x'}"])
    one_line_error(r, "seqkit-train", "dictionary differs", log_lines_allowed=True)
    assert not (tmp_path / "x").exists()  # nothing written


def test_distill_to_writes_the_teachers_best_hypotheses(mt, run_cli, tmp_path):
    from seqkit.cli.generate import main as generate
    from seqkit.data.dictionary import Dictionary
    from seqkit.data.indexed_dataset import IndexedDataset

    data, teacher = mt
    args = [f"path={teacher}", f"task.data={data}", "gen_subset=train", "common.threads=1", "generation.beam=2",
            "generation.max_len_b=20"]
    r = run_cli(generate, args + [f"distill_to={tmp_path / 'kd'}"])
    assert r.code == 0 and r.out == "", r.err
    printed = run_cli(generate, args).out  # the same search, printed
    hyps = {int(line.split("\t")[0][2:]): line.split("\t")[2] for line in printed.splitlines() if line.startswith("H-")}
    d = Dictionary.load(str(data / "dict.en.txt"))
    kd = IndexedDataset(str(tmp_path / "kd" / "train.de-en.en"))
    assert len(kd) == len(hyps) == len(IndexedDataset(str(data / "train.de-en.en")))
    for sid in (0, 1, len(kd) - 1):
        assert " ".join(d.string(kd[sid])) == hyps[sid] and int(kd[sid][-1]) == d.eos_index
    for kept in ("train.de-en.de", "valid.de-en.en", "valid.de-en.de"):  # everything else as it was
        assert (tmp_path / "kd" / f"{kept}.bin").read_bytes() == (data / f"{kept}.bin").read_bytes()
    meta = json.loads((tmp_path / "kd" / "preprocess.json").read_text())
    assert meta["distilled"]["split"] == "train" and meta["distilled"]["beam"] == 2
    # a student trains on it as on any data folder
    Trainer(mt_cfg(tmp_path / "kd", tmp_path / "student", "optimization.max_update=2", "criterion=cross_entropy")).run()
    # the folder exists now: refused before translating; input=- has no split to replace
    r = run_cli(generate, args + [f"distill_to={tmp_path / 'kd'}"])
    one_line_error(r, "seqkit-generate", "exists")
    r = run_cli(generate, [f"path={teacher}", "input=-", f"distill_to={tmp_path / 'kd2'}"], stdin="ein Hund\n")
    one_line_error(r, "seqkit-generate", "input=-")
    assert not (tmp_path / "kd2").exists()
