"""Label-smoothed NLL: the hand-written backward against autograd, padding ignored."""

from types import SimpleNamespace

import pytest
import torch

from seqkit.criteria.cross_entropy import (CrossEntropyConfig, CrossEntropyCriterion, LabelSmoothedCrossEntropyConfig,
                                           LabelSmoothedCrossEntropyCriterion, SmoothedNLL)


def reference(logits, target, keep, eps):
    lp = logits.log_softmax(-1)
    eps_i = eps / (logits.size(-1) - 1)
    nll = -lp.gather(1, target[:, None]).squeeze(1)
    return ((1 - eps - eps_i) * nll + eps_i * -lp.sum(-1)) * keep


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_value_and_gradient_match_autograd(eps):
    torch.manual_seed(0)
    logits = torch.randn(9, 13, dtype=torch.double, requires_grad=True)
    target = torch.randint(0, 13, (9,))
    keep = (torch.arange(9) < 7).double()
    loss, nll = SmoothedNLL.apply(logits, target, keep, eps)
    (grad,) = torch.autograd.grad(loss.sum() * 1.7, logits)
    ref_logits = logits.detach().clone().requires_grad_()
    ref = reference(ref_logits, target, keep, eps)
    (ref_grad,) = torch.autograd.grad(ref.sum() * 1.7, ref_logits)
    torch.testing.assert_close(loss, ref.detach())
    torch.testing.assert_close(grad, ref_grad)
    assert grad[7:].abs().max() == 0  # padding gets no gradient


def test_second_backward_is_refused_loudly():
    logits = torch.randn(3, 5, requires_grad=True)
    loss, _ = SmoothedNLL.apply(logits, torch.tensor([0, 1, 2]), torch.ones(3), 0.1)
    loss.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError):
        loss.sum().backward()


class Constant(torch.nn.Module):
    """A 'model' returning fixed logits, to test the criteria's bookkeeping."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.nn.Parameter(logits)

    def forward(self, src_tokens, src_lengths, prev_output_tokens):
        return self.logits


def test_criteria_sum_over_real_tokens():
    torch.manual_seed(1)
    logits = torch.randn(2, 3, 6)
    target = torch.tensor([[4, 5, 2], [4, 2, 0]])  # pad = 0 in the last position
    sample = {"net_input": {"src_tokens": None, "src_lengths": None, "prev_output_tokens": None}, "target": target}
    ce_loss, n, log = CrossEntropyCriterion(CrossEntropyConfig(), SimpleNamespace(ignore_index=0))(Constant(logits), sample)
    assert n == 5 and log["ntokens"] == 5 and log["nsentences"] == 2
    expected = -logits.log_softmax(-1).gather(2, target[..., None]).squeeze(-1)[target.ne(0)].sum()
    assert ce_loss.item() == pytest.approx(expected.item(), rel=1e-6)
    ls_loss, _, log = LabelSmoothedCrossEntropyCriterion(LabelSmoothedCrossEntropyConfig(label_smoothing=0.1),
                                                                 SimpleNamespace(ignore_index=0))(
        Constant(logits), sample)
    assert float(log["nll_loss"]) == pytest.approx(expected.item(), rel=1e-6)
    assert ls_loss.item() > ce_loss.item()
