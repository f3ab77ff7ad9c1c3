"""SmoothedNLL's lean half-precision path: bf16 logits keep no fp32 (N, V) tensor for backward,
and the hand-written backward equals autograd's gradient of the plain label-smoothed formula
(fp32 tightly, bf16 loosely), in blocks of rows or all at once, eager or compiled."""

import pytest
import torch

from seqkit.criteria import cross_entropy
from seqkit.criteria.cross_entropy import SmoothedNLL

N, V, EPS = 37, 50, 0.1


@pytest.fixture(autouse=True)
def lean_on_cpu(monkeypatch):
    """The lean path runs on GPUs only; these tests take it on the CPU."""
    monkeypatch.setattr(cross_entropy, "LEAN_DEVICES", ("cuda", "cpu"))


def formula(logits, target, keep, eps):
    """(1 - eps - eps_i) * nll + eps_i * sum_v(-log p_v) per row, by autograd's ops, in fp32."""
    lp = logits.float().log_softmax(-1)
    eps_i = eps / (logits.size(-1) - 1)
    return ((1 - eps - eps_i) * -lp.gather(1, target[:, None]).squeeze(1) + eps_i * -lp.sum(-1)) * keep


def inputs(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(N, V, generator=g)).to(dtype).requires_grad_()
    target = torch.randint(0, V, (N,), generator=g)
    keep = (torch.arange(N) < N - 5).float()  # the last 5 rows are padding
    return logits, target, keep


def ours(logits, target, keep, eps=EPS, weight=1.7):
    loss, nll = SmoothedNLL.apply(logits, target, keep, eps)
    (grad,) = torch.autograd.grad(loss.sum() * weight, logits)
    return loss.detach(), nll, grad


def reference(logits, target, keep, eps=EPS, weight=1.7):
    x = logits.detach().float().requires_grad_()  # the bf16 values, exactly, in fp32
    loss = formula(x, target, keep, eps)
    (grad,) = torch.autograd.grad(loss.sum() * weight, x)
    return loss.detach(), grad


@pytest.mark.parametrize("eps", [0.0, EPS])
def test_fp32_backward_is_autograds_gradient_of_the_formula(eps):
    logits, target, keep = inputs(torch.float32)
    loss, _, grad = ours(logits, target, keep, eps)
    ref_loss, ref_grad = reference(logits, target, keep, eps)
    assert grad.dtype == torch.float32
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("block_elements", [1 << 26, 4 * V, 7 * V + 3])  # one block; 10 of 4 rows; 6 of 7 rows
def test_bf16_backward_is_close_to_autograds_gradient(block_elements, monkeypatch):
    monkeypatch.setattr(SmoothedNLL, "block_elements", block_elements)
    logits, target, keep = inputs(torch.bfloat16)
    loss, nll, grad = ours(logits, target, keep)
    ref_loss, ref_grad = reference(logits, target, keep)
    assert grad.dtype == torch.bfloat16 and loss.dtype == nll.dtype == torch.float32
    # the loss is fp32 arithmetic on the bf16 values: as tight as fp32 allows
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-5)
    # the gradient is rounded once to bf16 (8 bits of mantissa)
    torch.testing.assert_close(grad.float(), ref_grad, rtol=1e-2, atol=4e-3)
    assert grad[N - 5:].abs().max() == 0  # padding gets no gradient


def test_bf16_blocks_change_nothing(monkeypatch):
    logits, target, keep = inputs(torch.bfloat16, seed=3)
    whole = ours(logits, target, keep)
    monkeypatch.setattr(SmoothedNLL, "block_elements", 5 * V)
    blocked = ours(logits, target, keep)
    for a, b in zip(whole, blocked):
        assert torch.equal(a, b)


def kept(run):
    """``run()``'s result and the (dtype, shape) of every tensor its forward keeps for backward."""
    saved = []

    def pack(t):
        saved.append((t.dtype, tuple(t.shape)))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()
    return out, saved


def fp32_logit_sized(saved):
    return [s for s in saved if s[0] == torch.float32 and torch.Size(s[1]).numel() == N * V]


def test_bf16_forward_keeps_no_fp32_logit_sized_tensor():
    torch.manual_seed(0)
    proj = torch.nn.Linear(16, V)
    x, target, keep = torch.randn(N, 16), torch.randint(0, V, (N,)), torch.ones(N)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # as the trainer runs a bf16 step
        logits = proj(x)  # (N, V) bf16
        (loss, _), saved = kept(lambda: SmoothedNLL.apply(logits, target, keep, EPS))
    loss.sum().backward()  # what was kept gives the gradient
    assert logits.dtype == torch.bfloat16
    assert saved.count((torch.bfloat16, (N, V))) == 1 and (torch.float32, (N,)) in saved  # logits, log-sum-exp
    assert not fp32_logit_sized(saved), saved
    # fp32 logits keep their fp32 log-probs (the hook sees what the function keeps)
    logits = proj(x)
    _, saved = kept(lambda: SmoothedNLL.apply(logits, target, keep, EPS))
    assert fp32_logit_sized(saved) == [(torch.float32, (N, V))]


def test_bf16_frozen_values():
    logits, target, keep = inputs(torch.bfloat16, seed=1)
    loss, nll, grad = ours(logits[:4], target[:4], keep[:4], weight=1.0)
    # frozen; a change here means the half-precision numerics changed
    torch.testing.assert_close(loss, torch.tensor([6.8912, 4.6110, 3.7278, 5.8223]), rtol=0, atol=1e-4)
    torch.testing.assert_close(nll, torch.tensor([6.7668, 4.2937, 3.2250, 5.6271]), rtol=0, atol=1e-4)
    # p - q at the targets, and at each row's most probable token (bf16 values, exact)
    torch.testing.assert_close(grad[torch.arange(4), target[:4]].float(),
                               torch.tensor([-0.89844, -0.88672, -0.85938, -0.89453]), rtol=0, atol=1e-5)
    torch.testing.assert_close(grad.float().amax(-1), torch.tensor([0.64453, 0.33984, 0.51172, 0.60156]),
                               rtol=0, atol=1e-5)


def test_compiled_keeps_no_fp32_logit_sized_tensor_and_matches_eager():
    """Under torch.compile the rows go in one block and AOTAutograd's partitioner picks what is kept
    (aot_eager_decomp_partition: Inductor's decompositions and partitioner, no code generation)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    proj = torch.nn.Linear(16, V)
    x, target, keep = torch.randn(N, 16), torch.randint(0, V, (N,)), (torch.arange(N) < N - 5).float()

    def step(x, target, keep):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return SmoothedNLL.apply(proj(x), target, keep, EPS)[0].sum()

    compiled = torch.compile(step, dynamic=True, fullgraph=True, backend="aot_eager_decomp_partition")
    loss, saved = kept(lambda: compiled(x, target, keep))
    grads = torch.autograd.grad(loss, list(proj.parameters()))
    assert (torch.bfloat16, (N, V)) in saved
    assert not fp32_logit_sized(saved), saved
    eager_grads = torch.autograd.grad(step(x, target, keep), list(proj.parameters()))
    torch.testing.assert_close(loss, step(x, target, keep).detach(), rtol=1e-5, atol=0)
    for g, e in zip(grads, eager_grads):
        torch.testing.assert_close(g, e, rtol=2e-2, atol=2e-2)
    torch._dynamo.reset()


def test_cpu_keeps_fp32_log_probs_and_the_same_gradient(monkeypatch):
    """Off LEAN_DEVICES (the CPU by default: measured faster so) bf16 logits keep fp32 log-probs;
    loss and gradient agree with the lean path's to bf16 rounding."""
    logits, target, keep = inputs(torch.bfloat16, seed=2)
    lean_loss, _, lean_grad = ours(logits, target, keep)
    monkeypatch.setattr(cross_entropy, "LEAN_DEVICES", ("cuda",))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append((t.dtype, tuple(t.shape))) or t, lambda t: t):
        loss, _, grad = ours(logits, target, keep)
    assert (torch.float32, (N, V)) in saved and grad.dtype == torch.bfloat16
    assert torch.allclose(loss, lean_loss, atol=1e-5) and torch.allclose(grad.float(), lean_grad.float(), atol=1e-2)
