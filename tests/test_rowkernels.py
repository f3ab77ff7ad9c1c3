"""The compiled row kernels (seqkit/core/rowkernels.c) against the torch path they replace: the
counting sort and the distinct ids, word2vec's scores and gradients (skip-gram with each distinct
context word read once, CBOW), the lazy Adam step, a run of training steps of both paths side by
side, and what happens without a compiler (auto falls back, native is one line)."""

import dataclasses
import shutil
import subprocess
import sys

import pytest
import torch

import seqkit
from seqkit.core import rowkernels
from seqkit.core.errors import SeqkitError
from seqkit.criteria.word2vec import negative_sampling_loss
from seqkit.data.dictionary import Dictionary
from seqkit.models.word2vec import Word2VecModel, word2vec_tiny
from seqkit.optim.optimizers import RowAdam, SparseAdamConfig, build_sparse_adam

seqkit.import_builtin_components()
native_only = pytest.mark.skipif(not rowkernels.available(), reason=rowkernels.why_unavailable())


def test_a_machine_with_a_c_compiler_builds_them():
    if shutil.which("cc") is None:
        pytest.skip("no cc on this machine: the torch path is what runs")
    assert rowkernels.available(), rowkernels.why_unavailable()


@native_only
def test_counting_sort_groups_reads_by_row_in_order():
    target = torch.tensor([[3, 1, 3], [0, 3, 1]])  # P 2, K 3
    reads = rowkernels.order_by_row(target, 5, hrow=torch.tensor([7, 9]))
    assert reads.order.tolist() == [3, 1, 5, 0, 2, 4]  # row 0: n 3; row 1: n 1, 5; row 3: n 0, 2, 4
    assert reads.starts.tolist() == [0, 1, 3, 3, 6, 6]
    assert reads.hidden.tolist() == [9, 7, 9, 7, 7, 9]  # hrow of n // 3
    with pytest.raises(IndexError, match="row 5 read from a table of 5 rows"):
        rowkernels.order_by_row(torch.tensor([[1, 5]]), 5)
    words, inverse = rowkernels.unique(torch.tensor([4, 2, 4, 9, 2]), 10)
    assert words.tolist() == [2, 4, 9] and inverse.tolist() == [1, 0, 1, 2, 0]


@native_only
@pytest.mark.parametrize("hrow", [None, [2, 0, 2, 1]])
def test_scores_and_their_gradients_match_plain_lookups(hrow):
    torch.manual_seed(0)
    h, weight = torch.randn(3 if hrow else 4, 5), torch.randn(11, 5)
    target = torch.randint(0, 11, (4, 3))
    rows = torch.tensor(hrow) if hrow else torch.arange(4)
    reads = rowkernels.order_by_row(target, 11, None if hrow is None else rows)
    scores = rowkernels.scores_by_row(h, weight, reads)
    hh, ww = h.clone().requires_grad_(), weight.clone().requires_grad_()
    ref = (ww[target] * hh[rows][:, None]).sum(-1)
    assert torch.allclose(scores, ref, atol=1e-6)
    grad = torch.randn(4, 3)
    ref.backward(grad)
    grad_h, ids, sums = rowkernels.scores_backward_by_row(grad, h, weight, reads)
    assert torch.allclose(grad_h, hh.grad, atol=1e-6)
    assert ids.tolist() == sorted(set(target.flatten().tolist()))
    assert torch.allclose(sums, ww.grad[ids], atol=1e-6)


@native_only
def test_cbow_hidden_vectors_and_their_table_gradient():
    weight, pad = torch.randn(11, 5), 1
    context = torch.tensor([[4, 1, 6], [1, 1, 1], [6, 6, 1]])  # a row of <pad> only: zeros
    h = rowkernels.mean_rows(context, weight, pad)
    assert torch.allclose(h, torch.stack([(weight[4] + weight[6]) / 2, torch.zeros(5), weight[6]]))
    src = torch.randn(3, 5)
    ids, sums = rowkernels.rows_grad(context, src, (11, 5), skip=pad)
    assert ids.tolist() == [4, 6]  # <pad> gets nothing
    assert torch.allclose(sums, torch.stack([src[0], src[0] + 2 * src[2]]))


@native_only
@pytest.mark.parametrize("cbow", [False, True])
@pytest.mark.parametrize("sparse", [True, False])
def test_native_and_torch_models_give_the_same_loss_and_gradients(cbow, sparse):
    d = Dictionary([f"w{i}" for i in range(12)], [1] * 12)
    models = {}
    for kernel in ("torch", "native"):
        torch.manual_seed(0)
        model = Word2VecModel(dataclasses.replace(word2vec_tiny(), sparse=sparse, kernel=kernel), d)
        with torch.no_grad():
            model.out_embed.weight.normal_()
        models[kernel] = model
    torch.manual_seed(1)
    context = torch.randint(4, 16, (30, 4 if cbow else 1))
    if cbow:
        context[:, 3] = d.pad()
    target = torch.randint(4, 16, (30, 3))
    target[0, 1] = target[0, 0]  # a noise word equal to the true word: not scored, its row still read
    losses = {}
    for kernel, model in models.items():
        losses[kernel] = negative_sampling_loss(model(context, target), target)
        losses[kernel].backward()
    assert float(losses["native"].detach()) == pytest.approx(float(losses["torch"].detach()), rel=1e-6)
    for name in ("embed", "out_embed"):
        a, b = (getattr(models[k], name).weight.grad for k in ("torch", "native"))
        assert a.is_sparse == b.is_sparse == sparse
        if sparse:
            assert b.is_coalesced() and torch.equal(a._indices(), b._indices())
        assert torch.allclose(a.to_dense(), b.to_dense(), atol=1e-6)


@native_only
def test_native_adam_step_is_the_torch_step():
    torch.manual_seed(0)
    start = torch.randn(10, 3)
    params = {impl: torch.nn.Parameter(start.clone()) for impl in ("torch", "native")}
    optims = {impl: RowAdam([p], 0.1, (0.9, 0.999), 1e-8, impl=impl) for impl, p in params.items()}
    for _ in range(4):  # rows skipped across steps: lazy moments
        rows = torch.tensor(sorted(torch.randperm(10)[:5].tolist()))
        values = torch.randn(5, 3)
        for impl, p in params.items():
            p.grad = torch.sparse_coo_tensor(rows[None], values, (10, 3), is_coalesced=True, check_invariants=True)
            optims[impl].step()
    assert torch.allclose(params["torch"], params["native"], atol=1e-6)
    assert not torch.equal(params["native"].detach(), start)


@native_only
def test_steps_of_both_paths_stay_together():
    """Ten sparse_adam updates of a skip-gram model, torch path against compiled path."""
    d = Dictionary([f"w{i}" for i in range(40)], [1] * 40)
    gen = torch.Generator().manual_seed(3)
    batches = [(torch.randint(4, 44, (64, 1), generator=gen), torch.randint(4, 44, (64, 6), generator=gen))
               for _ in range(10)]
    tables = {}
    for kernel in ("torch", "native"):
        torch.manual_seed(0)
        model = Word2VecModel(dataclasses.replace(word2vec_tiny(), kernel=kernel), d)
        optim = build_sparse_adam(SparseAdamConfig(lr=0.01, impl=kernel), model.parameters())
        for context, target in batches:
            optim.zero_grad(set_to_none=True)
            negative_sampling_loss(model(context, target), target).backward()
            optim.step()
        tables[kernel] = model.embed.weight.detach()
    assert torch.allclose(tables["torch"], tables["native"], atol=1e-5)


def test_without_a_compiler_auto_falls_back_and_native_is_one_line(tmp_path):
    script = """
import dataclasses, torch, seqkit
from seqkit.core import rowkernels
from seqkit.core.errors import SeqkitError
from seqkit.data.dictionary import Dictionary
from seqkit.models.word2vec import Word2VecModel, word2vec_tiny
from seqkit.optim.optimizers import SparseAdamConfig, build_sparse_adam
seqkit.import_builtin_components()
assert not rowkernels.available()
print(rowkernels.why_unavailable())
d = Dictionary([f"w{i}" for i in range(12)], [1] * 12)
model = Word2VecModel(word2vec_tiny(), d)  # kernel auto
assert model(torch.tensor([[5]]), torch.tensor([[6, 7]])).shape == (1, 2)
for build in (lambda: Word2VecModel(dataclasses.replace(word2vec_tiny(), kernel="native"), d),
              lambda: build_sparse_adam(SparseAdamConfig(impl="native"), model.parameters())):
    try:
        build()
    except SeqkitError as e:
        print("REFUSED", e)
"""
    env = {"CC": str(tmp_path / "no-such-compiler"), "SEQKIT_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "the row kernels could not be built" in lines[0] and "no-such-compiler" in lines[0]
    refused = [ln for ln in lines if ln.startswith("REFUSED")]
    assert len(refused) == 2
    assert "model.kernel=native but the row kernels could not be built" in refused[0]
    assert "optimizer.impl=native but the row kernels could not be built" in refused[1]


@native_only
def test_native_refuses_tables_it_cannot_run():
    d = Dictionary([f"w{i}" for i in range(12)], [1] * 12)
    model = Word2VecModel(dataclasses.replace(word2vec_tiny(), kernel="native"), d).to(torch.float64)
    with pytest.raises(SeqkitError, match="model.kernel=native runs on a CPU in float32; .*torch.float64"):
        model(torch.tensor([[5]]), torch.tensor([[6, 7]]))
