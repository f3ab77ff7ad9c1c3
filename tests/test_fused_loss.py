"""The fused projection + label-smoothed loss over the scored rows only (``target_index``) or over
all rows weighted 0 at padding (``fixed_shape``, packed batches): the same losses and gradients as
the logits path, no (N, V) tensor kept for backward, and the Transformer's maskless attention when
collation says no source is padded."""

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from seqkit.criteria import cross_entropy
from seqkit.criteria.cross_entropy import (CrossEntropyConfig, CrossEntropyCriterion, FusedLinearSmoothedNLL,
                                           LabelSmoothedCrossEntropyConfig, LabelSmoothedCrossEntropyCriterion)
from seqkit.data.dictionary import Dictionary
from seqkit.models.modules import kernels
from seqkit.models.transformer import TransformerModel, transformer_tiny

PAD = 1


def tiny_model(seed=0, **changes):
    torch.manual_seed(seed)
    d = Dictionary([f"w{i}" for i in range(23)])  # V = 27 with the 4 specials
    cfg = dataclasses.replace(transformer_tiny(), embed_dim=16, ffn_dim=32, encoder_layers=1, decoder_layers=1,
                              dropout=0.0, **changes)
    model = TransformerModel(cfg, d, d)
    if model.output_bias is not None:
        model.output_bias.normal_()
    return model


def tiny_sample(seed=1, B=3, S=6, T=5, padded=True):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 27, (B, S), generator=g)
    tgt = torch.randint(4, 27, (B, T), generator=g)
    src_len = torch.tensor([S, S - 2, S - 3])[:B] if padded else torch.full((B,), S)
    tgt_len = torch.tensor([T, T - 1, 2])[:B]
    src[torch.arange(S)[None, :] >= src_len[:, None]] = PAD
    tgt[torch.arange(T)[None, :] >= tgt_len[:, None]] = PAD
    prev = torch.cat([torch.zeros(B, 1, dtype=torch.long), tgt[:, :-1]], dim=1)  # bos = 0
    prev[prev.eq(2)] = PAD
    sample = {"net_input": {"src_tokens": src, "src_lengths": src_len, "prev_output_tokens": prev}, "target": tgt,
              "ntokens": int(tgt_len.sum()), "nsentences": B, "src_padded": padded,
              "target_index": torch.nonzero(tgt.reshape(-1).ne(PAD)).squeeze(1)}
    return sample


def logits_path(sample):
    return {k: v for k, v in sample.items() if k != "target_index"}


def all_rows_path(sample):
    """As packed collation gives it: no index, all B*T rows weighted by target != pad."""
    return {**logits_path(sample), "fixed_shape": True}


def run(criterion, model, sample):
    model.zero_grad(set_to_none=True)
    loss, n, log = criterion(model, sample)
    (loss * 0.7).backward()
    return loss.detach(), n, log, {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


TASK = SimpleNamespace(ignore_index=PAD)
CRITERIA = [CrossEntropyCriterion(CrossEntropyConfig(), TASK),
            LabelSmoothedCrossEntropyCriterion(LabelSmoothedCrossEntropyConfig(label_smoothing=0.1), TASK)]


@pytest.mark.parametrize("criterion", CRITERIA, ids=["ce", "ls"])
@pytest.mark.parametrize("changes", [{}, {"share_decoder_input_output_embed": False},
                                     {"output_bias": True, "scale_output": True}], ids=["tied", "untied", "bias_scale"])
def test_fused_equals_logits_path_fp32(criterion, changes):
    model = tiny_model(**changes)
    sample = tiny_sample()
    loss, n, log, grads = run(criterion, model, sample)
    ref_loss, ref_n, ref_log, ref_grads = run(criterion, model, logits_path(sample))
    assert n == int(ref_n) == 11 and log["sample_size"] == 11
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=0)
    torch.testing.assert_close(log["nll_loss"], ref_log["nll_loss"], rtol=1e-6, atol=0)
    assert set(grads) == set(ref_grads)
    for k in grads:
        torch.testing.assert_close(grads[k], ref_grads[k], rtol=1e-5, atol=2e-6, msg=k)


@pytest.mark.parametrize("path", [lambda s: s, all_rows_path], ids=["index", "all_rows"])
def test_frozen_values_fp32(path):
    model = tiny_model()
    loss, _, log, grads = run(CRITERIA[1], model, path(tiny_sample()))
    # frozen: a change here means the loss's numerics changed (both paths: the same rows count)
    assert loss.item() == pytest.approx(42.30556, abs=1e-4)
    assert log["nll_loss"].item() == pytest.approx(42.15664, abs=1e-4)
    assert grads["tgt_embed.weight"].norm().item() == pytest.approx(10.54634, abs=1e-4)


@pytest.mark.parametrize("criterion", CRITERIA, ids=["ce", "ls"])
@pytest.mark.parametrize("changes", [{}, {"output_bias": True, "scale_output": True}], ids=["tied", "bias_scale"])
def test_all_rows_weighted_equal_the_index_path(criterion, changes, monkeypatch):
    """Packed batches (``fixed_shape``): all 15 rows with weight 0 at the 4 padded ones give the
    index path's loss, NLL and gradients, with the count of real targets as sample_size."""
    model = tiny_model(**changes)
    sample = tiny_sample()
    loss, n, log, grads = run(criterion, model, sample)
    rows = []
    real_apply = FusedLinearSmoothedNLL.apply
    monkeypatch.setattr(FusedLinearSmoothedNLL, "apply", lambda x, *a: rows.append(x.size(0)) or real_apply(x, *a))
    all_loss, all_n, all_log, all_grads = run(criterion, model, all_rows_path(sample))
    assert rows == [15]  # B * T, whatever the sample's real targets
    assert isinstance(all_n, torch.Tensor) and int(all_n) == n == 11 and int(all_log["sample_size"]) == 11
    # the same count logged from the device: a host int read in a compiled graph would be one of its inputs
    assert isinstance(all_log["ntokens"], torch.Tensor) and int(all_log["ntokens"]) == log["ntokens"] == 11
    torch.testing.assert_close(all_loss, loss, rtol=1e-6, atol=0)
    torch.testing.assert_close(all_log["nll_loss"], log["nll_loss"], rtol=1e-6, atol=0)
    assert set(all_grads) == set(grads)
    for k in grads:
        torch.testing.assert_close(all_grads[k], grads[k], rtol=1e-5, atol=2e-6, msg=k)


def test_weight_zero_rows_add_no_loss_and_no_gradient(monkeypatch):
    """The function itself: a 0/1 ``keep`` over all rows is the selection of the kept rows, a block
    of rows at a time too, and the rows weighted 0 get a zero gradient."""
    torch.manual_seed(0)
    x = torch.randn(9, 8, requires_grad=True)
    w = torch.randn(11, 8, requires_grad=True)
    target = torch.randint(0, 11, (9,))
    keep = torch.tensor([1, 1, 0, 1, 0, 0, 1, 1, 0], dtype=torch.float32)
    kept = keep.bool()

    def grads(*args):
        x.grad = w.grad = None
        loss, nll = FusedLinearSmoothedNLL.apply(*args)
        (loss * 0.7).backward()
        return loss.detach(), nll, x.grad.clone(), w.grad.clone()

    loss, nll, gx, gw = grads(x, w, None, target, keep, 0.1, torch.float32)
    ref_loss, ref_nll, ref_gx, ref_gw = grads(x[kept], w, None, target[kept], None, 0.1, torch.float32)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=0)
    torch.testing.assert_close(nll, ref_nll, rtol=1e-6, atol=0)
    torch.testing.assert_close(gw, ref_gw, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gx[kept], ref_gx[kept], rtol=1e-5, atol=1e-6)  # (ref_gx: x[kept]'s rows, scattered back)
    assert gx[~kept].abs().max().item() == 0.0
    monkeypatch.setattr(FusedLinearSmoothedNLL, "block_elements", 11 * 4)  # 4 rows a block, the last shorter
    blocked = grads(x, w, None, target, keep, 0.1, torch.float32)
    for a, b in zip(blocked, (loss, nll, gx, gw)):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    # frozen: a change here means the weighted numerics changed
    assert loss.item() == pytest.approx(21.41619, abs=1e-4)


def test_blocks_of_rows_give_the_same_result(monkeypatch):
    model = tiny_model()
    sample = tiny_sample()
    loss, _, _, grads = run(CRITERIA[1], model, sample)
    monkeypatch.setattr(FusedLinearSmoothedNLL, "block_elements", 27 * 3)  # 3 rows a block, the last shorter
    blocked, _, _, blocked_grads = run(CRITERIA[1], model, sample)
    torch.testing.assert_close(blocked, loss, rtol=1e-6, atol=0)
    for k in grads:
        torch.testing.assert_close(blocked_grads[k], grads[k], rtol=1e-5, atol=2e-6)


def test_bf16_autocast_close_to_logits_path():
    model = tiny_model()
    sample = tiny_sample()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _, _, grads = run(CRITERIA[1], model, sample)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref_loss, _, _, ref_grads = run(CRITERIA[1], model, logits_path(sample))
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=0)  # the same bf16 logits, fp32 log-sum-exp
    for k in grads:  # bf16 rounding of p - q before (here) or after (logits path) the 0.7 scale
        assert grads[k].dtype == torch.float32
        assert (grads[k] - ref_grads[k]).norm() <= 2e-2 * ref_grads[k].norm(), k


def test_bf16_weights_without_autocast():
    """Weights stored in bf16 (no autocast): the loss is fp32 and the weight's gradient bf16."""
    torch.manual_seed(0)
    x = torch.randn(7, 8, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(11, 8, dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, 11, (7,))
    loss, nll = FusedLinearSmoothedNLL.apply(x, w, None, target, None, 0.1, torch.bfloat16)
    loss.backward()
    assert loss.dtype == torch.float32 and x.grad.dtype == w.grad.dtype == torch.bfloat16
    z = (x.float() @ w.float().t()).bfloat16().float()
    lp = z.log_softmax(-1)
    ref = (1 - 0.1 - 0.01) * -lp.gather(1, target[:, None]).sum() + 0.01 * -lp.sum()
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5)


def test_nothing_logit_sized_is_kept():
    model = tiny_model()
    sample = tiny_sample()
    saved = []

    def pack(t):
        saved.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss, _, _ = CRITERIA[1](model, sample)
    loss.backward()
    V = 27
    assert not [s for s in saved if len(s) and s[-1] == V], saved
    assert (11, 16) in saved and (V, 16) in saved  # d loss / d features of the scored rows, d loss / d weight


class Counting:
    """A task that counts metrics on logits: the criterion keeps the logits path for it."""

    ignore_index = PAD

    def __init__(self):
        self.seen = []

    def count_metrics(self, logits, sample):
        self.seen.append(tuple(logits.shape))
        return {}


def test_tasks_counting_metrics_and_other_models_take_the_logits_path(monkeypatch):
    task = Counting()
    CrossEntropyCriterion(CrossEntropyConfig(), task)(tiny_model(), tiny_sample())
    assert task.seen == [(3, 5, 27)]
    called = []
    monkeypatch.setattr(FusedLinearSmoothedNLL, "apply", lambda *a: called.append(1))
    model = tiny_model()
    model.untie_output()  # a module swap would replace this Linear: not plain any more
    model.output_proj = torch.nn.Linear(16, 27, bias=True)
    CRITERIA[0](model, tiny_sample())
    assert not called


def test_no_mask_when_collation_says_no_padding(monkeypatch):
    model = tiny_model()
    sample = tiny_sample(padded=False)
    asked = []
    real = kernels.padding_mask

    def spy(keep, padded=None):
        asked.append(padded)
        return real(keep, padded)

    monkeypatch.setattr("seqkit.models.transformer.padding_mask", spy)
    with_flag = model(**sample["net_input"], src_padded=False)
    assert asked == [False, False]  # encoder and cross-attention, both told
    without = model(**sample["net_input"])
    torch.testing.assert_close(with_flag, without, rtol=0, atol=0)
    assert kernels.padding_mask(torch.ones(2, 3, dtype=torch.bool), padded=False) is None
    # the criteria hand the flag only to models that list it
    assert cross_entropy.model_inputs(model, sample)["src_padded"] is False
    assert "src_padded" not in cross_entropy.model_inputs(torch.nn.Linear(2, 2), sample)


def test_no_gradient_work_without_grad(monkeypatch):
    """Validation (no_grad): the loss alone; needs_input_grad would still say True there."""
    model = tiny_model()
    sample = tiny_sample()
    with torch.no_grad():
        loss, _, log = CRITERIA[1](model, sample)
    ref_loss, _, _, _ = run(CRITERIA[1], model, sample)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=0)
    # the gradient matmuls are the only `@` of the path: none may run
    monkeypatch.setattr(torch.Tensor, "__matmul__", lambda *a: (_ for _ in ()).throw(AssertionError("grad matmul")))
    with torch.no_grad():
        CRITERIA[1](model, sample)
    with pytest.raises(AssertionError, match="grad matmul"):
        CRITERIA[1](model, sample)


def test_fp16_keeps_the_logits_path(monkeypatch):
    """GradScaler's scale stays outside the fused function: its unscaled fp16 sums could overflow."""
    called = []
    monkeypatch.setattr(FusedLinearSmoothedNLL, "apply", lambda *a: called.append(1))
    with torch.autocast("cpu", dtype=torch.float16):
        loss, _, _ = CRITERIA[1](tiny_model(), tiny_sample())
    assert not called and torch.isfinite(loss)
