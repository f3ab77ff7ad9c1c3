"""optimizer=pair_sgd (issue 62): word2vec's own update, each prediction's SGD step applied before
the next prediction is scored, inside the forward pass (seqkit/core/rowkernels.c: rk_pair_sgd).
Against a step-by-step reference built on autograd; from the shell on the planted corpus of
tests/test_word2vec.py (neighbours stay in their cluster, a resumed run ends with the same
vectors); the settings it cannot honour refused in one line."""

import pytest
import torch
import torch.nn.functional as F

import seqkit
from seqkit.cli.train import main as train
from seqkit.core import rowkernels

from label_fixtures import one_line_error
from test_word2vec import assert_clusters_kept, planted_folder

seqkit.import_builtin_components()
native_only = pytest.mark.skipif(not rowkernels.available(), reason=rowkernels.why_unavailable())


def reference(context, target, inputs, outputs, lr, pad):
    """Prediction after prediction, scored word after scored word, as the C code: the loss of one
    scored word through autograd, its output row's SGD step taken at once (a row scored again later
    is read updated); the hidden vector's gradients summed over the prediction and given whole to
    each of its context rows (the C code's CBOW) before the next prediction."""
    inputs, outputs, scores = inputs.clone(), outputs.clone(), []
    for ctx, tgt in zip(context, target):
        rows = ctx[ctx != pad]
        h = inputs[rows].mean(0)
        grad_h, row_scores = torch.zeros_like(h), []
        for k, t in enumerate(tgt):
            hk, w = h.clone().requires_grad_(), outputs[t].clone().requires_grad_()
            s = w @ hk
            row_scores.append(s.detach())
            if k > 0 and t == tgt[0]:
                continue  # the loss leaves a noise word equal to the true word out
            (-F.logsigmoid(s if k == 0 else -s)).backward()
            grad_h += hk.grad
            with torch.no_grad():
                outputs[t] -= lr * w.grad
        with torch.no_grad():
            for r in rows:
                inputs[r] -= lr * grad_h
        scores.append(torch.stack(row_scores))
    return torch.stack(scores), inputs, outputs


@native_only
@pytest.mark.parametrize("cbow", [False, True])
def test_pair_sgd_is_sgd_one_prediction_at_a_time(cbow):
    g = torch.Generator().manual_seed(0)
    V, D, P, pad = 11, 5, 7, 1
    inputs, outputs = torch.randn(V, D, generator=g), torch.randn(V, D, generator=g) * 0.5
    inputs[pad] = 0
    context = torch.randint(2, V, (P, 4 if cbow else 1), generator=g)
    if cbow:
        context[0, 2:] = pad  # short windows: <pad> fills them
        context[3, 1:] = pad
    target = torch.randint(2, V, (P, 4), generator=g)
    target[2, 3] = target[2, 0]  # a noise word equal to the true word: scored, not trained
    target[5] = target[4]  # rows read again after their update
    want_s, want_in, want_out = reference(context, target, inputs, outputs, 0.3, pad)
    got_in, got_out = inputs.clone(), outputs.clone()
    got_s = rowkernels.pair_sgd(context, target, got_in, got_out, 0.3, pad)
    assert torch.allclose(got_s, want_s, atol=1e-5)
    assert torch.allclose(got_in, want_in, atol=1e-5) and torch.allclose(got_out, want_out, atol=1e-5)
    assert not torch.equal(got_out, outputs)


@native_only
def test_pair_sgd_frozen_values():
    inputs = torch.tensor([[0.0, 0.0], [0.5, -0.25], [0.25, 0.5]])
    outputs = torch.tensor([[0.0, 0.0], [0.1, 0.2], [-0.3, 0.4]])
    scores = rowkernels.pair_sgd(torch.tensor([[1]]), torch.tensor([[2, 1]]), inputs, outputs, 1.0, 0)
    assert scores.flatten().tolist() == pytest.approx([-0.25, 0.0], abs=1e-7)
    # true word 2: g = 1 - sigmoid(-0.25) = 0.5621765; noise word 1: g = -sigmoid(0) = -0.5; the
    # context row 1 gets 0.5621765 * out[2] - 0.5 * out[1], both read before their own steps
    assert outputs.flatten().tolist() == pytest.approx([0.0, 0.0, -0.15, 0.325, -0.0189118, 0.2594559], abs=1e-6)
    assert inputs.flatten().tolist() == pytest.approx([0.0, 0.0, 0.2813471, -0.1251294, 0.25, 0.5], abs=1e-6)


def test_a_row_outside_the_tables_is_refused():
    if not rowkernels.available():
        pytest.skip(rowkernels.why_unavailable())
    with pytest.raises(ValueError, match="prediction 0 reads a row outside the 3-row tables"):
        rowkernels.pair_sgd(torch.tensor([[1]]), torch.tensor([[5, 1]]), torch.zeros(3, 2), torch.zeros(3, 2), 0.1)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return planted_folder(tmp_path_factory.mktemp("pair_sgd"))


def base(data, save):
    return ["task=word2vec", f"task.data={data}", "task.sample=0", "model=word2vec_tiny", "criterion=word2vec",
            "optimizer=pair_sgd", "optimizer.lr=0.25", "dataset.max_tokens=256", "common.threads=1",
            f"checkpoint.save_dir={save}"]


@native_only
@pytest.mark.parametrize("mode", ["skipgram", "cbow"])
def test_from_the_shell_neighbours_stay_in_their_cluster(mode, corpus, tmp_path, run_cli):
    save = tmp_path / mode
    r = run_cli(train, [*base(corpus, save), f"task.mode={mode}", "optimization.max_update=120"])
    assert r.code == 0, r.err
    assert_clusters_kept(save / "checkpoint_last.pt", run_cli)


@pytest.mark.parametrize("optimizer", ["pair_sgd", "sgd"])
def test_a_resumed_run_ends_with_the_same_vectors(optimizer, corpus, tmp_path, run_cli):
    """20 updates, then on to 40 from checkpoint_last, against 40 in one go: the same weights, bit for
    bit. Both optimizers keep no state (torch's optimizer loader failed on that: a traceback)."""
    if optimizer == "pair_sgd" and not rowkernels.available():
        pytest.skip(rowkernels.why_unavailable())
    for n, save in ((20, "resumed"), (40, "resumed"), (40, "straight")):
        r = run_cli(train, [*base(corpus, tmp_path / save), f"optimizer={optimizer}", f"optimization.max_update={n}",
                            "dataset.valid_subset="])
        assert r.code == 0, r.err
    a, b = (torch.load(tmp_path / s / "checkpoint_last.pt", weights_only=True) for s in ("resumed", "straight"))
    assert a["train_state"]["num_updates"] == b["train_state"]["num_updates"] == 40
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in b["model"])


@pytest.mark.parametrize("settings, fragments", [
    (["optimization.clip_norm=1"], ["optimization.clip_norm: seqkit-train", "no update gradient to clip"]),
    (["optimization.update_freq=2"], ["optimizer=pair_sgd updates the tables one prediction after another",
                                      "optimization.update_freq=2"]),
    (["common.precision=bf16"], ["this run asks for common.precision=bf16"]),
    (["model.kernel=torch"], ["optimizer=pair_sgd runs the compiled loops", "model.kernel=torch"]),
    (["model.sparse=false"], ["model.sparse: optimizer=pair_sgd takes no gradients, sparse or dense"]),
])
def test_refusals(settings, fragments, corpus, tmp_path, run_cli):
    if not rowkernels.available():
        pytest.skip(rowkernels.why_unavailable())
    r = run_cli(train, [*base(corpus, tmp_path / "ck"), "optimization.max_update=1", *settings])
    one_line_error(r, "seqkit-train", *fragments, log_lines_allowed=True)
    assert not (tmp_path / "ck").exists()


@native_only
def test_a_diverged_run_stops_in_one_line(corpus, tmp_path, run_cli):
    r = run_cli(train, [*base(corpus, tmp_path / "ck"), "optimizer.lr=1e30", "optimization.max_update=5"])
    one_line_error(r, "seqkit-train", "the loss is nan at update", "optimizer=pair_sgd at lr", "diverged; lower optimizer.lr",
                   log_lines_allowed=True)


def test_another_model_is_refused(corpus, tmp_path, run_cli):
    if not rowkernels.available():
        pytest.skip(rowkernels.why_unavailable())
    r = run_cli(train, ["task=language_modeling", f"task.data={corpus}", "model=gpt_tiny", "criterion=cross_entropy",
                        "optimizer=pair_sgd", "optimization.max_update=1", "common.threads=1",
                        f"checkpoint.save_dir={tmp_path / 'ck'}"])
    one_line_error(r, "seqkit-train", "optimizer=pair_sgd is applied by the model as it scores",
                   "has no such update", log_lines_allowed=True)
    assert not (tmp_path / "ck").exists()
