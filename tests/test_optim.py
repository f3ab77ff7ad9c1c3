"""Optimizer implementation choice: apex when importable (faked here), torch otherwise."""

import sys
import types

import pytest
import torch

import seqkit
from seqkit.core.errors import SeqkitError
from seqkit.optim.optimizers import AdamConfig, AdamWConfig, build_adam, build_adamw, choose_impl
from seqkit.training.precision import Precision

seqkit.import_builtin_components()


class FakeFusedAdam(torch.optim.Adam):
    made = []

    def __init__(self, params, adam_w_mode=True, **kw):
        FakeFusedAdam.made.append(adam_w_mode)
        super().__init__(params, **kw)


@pytest.fixture
def fake_apex(monkeypatch):
    apex, optimizers = types.ModuleType("apex"), types.ModuleType("apex.optimizers")
    optimizers.FusedAdam = FakeFusedAdam
    apex.optimizers = optimizers
    monkeypatch.setitem(sys.modules, "apex", apex)
    monkeypatch.setitem(sys.modules, "apex.optimizers", optimizers)
    FakeFusedAdam.made.clear()


def params():
    return [torch.nn.Parameter(torch.randn(3))]


def test_without_apex(monkeypatch):
    monkeypatch.setitem(sys.modules, "apex", None)  # import apex -> ImportError
    assert choose_impl("auto", params()) == "foreach"
    with pytest.raises(SeqkitError, match="apex is not importable"):
        build_adam(AdamConfig(impl="apex"), params())
    with pytest.raises(SeqkitError, match="unknown optimizer.impl 'nope'"):
        choose_impl("nope", params())


def test_apex_is_used_when_importable(fake_apex, caplog):
    caplog.set_level("INFO")
    opt = build_adamw(AdamWConfig(impl="apex"), params())
    assert isinstance(opt, FakeFusedAdam) and FakeFusedAdam.made == [True]
    build_adam(AdamConfig(impl="apex"), params())
    assert FakeFusedAdam.made == [True, False]  # Adam: coupled L2, AdamW: decoupled decay
    assert "NVIDIA apex FusedAdam" in caplog.text
    # auto picks apex only for GPU parameters; CPU parameters keep torch's foreach
    assert choose_impl("auto", params()) == "foreach"


def test_fp16_overflow_halves_the_scale_and_the_floor_stops(caplog):
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.1)
    prec = Precision("fp16", torch.device("cpu"), init_scale=4.0, growth_interval=2, min_scale=1.0)
    for scale in (2.0, 1.0):
        opt.zero_grad()
        prec.backward((p * float("inf")).sum())
        gnorm = prec.unscale_and_clip(opt, [p], 0.0)
        assert float(prec.step(opt, gnorm)) == 0.0 and prec.scaler.get_scale() == scale
    assert prec.count_skipped(2) == "fp16 overflow: 2 step(s) skipped, loss scale now 1 (2 overflows so far)"
    assert torch.equal(p.detach(), torch.ones(2))  # skipped steps leave the weights alone
    for _ in range(2):  # a window of good steps doubles the scale again
        opt.zero_grad()
        prec.backward(p.sum())
        assert float(prec.step(opt, prec.unscale_and_clip(opt, [p], 0.0))) == 1.0
    assert prec.scaler.get_scale() == 2.0 and prec.overflows == 2
    for _ in range(3):
        opt.zero_grad()
        prec.backward((p * float("nan")).sum())
        prec.step(opt, prec.unscale_and_clip(opt, [p], 0.0))
    with pytest.raises(SeqkitError, match="fp16 loss scale fell below"):  # read once the outcomes are
        prec.count_skipped(3)


@pytest.mark.parametrize("impl", ["fused", "foreach"])
def test_non_finite_step_is_skipped_on_the_device(impl):
    """bf16/fp32: a fused optimizer skips a non-finite step itself (found_inf, no host read),
    Adam's step count included; the foreach one after reading the norm. Same weights either way."""
    from seqkit.optim.optimizers import AdamConfig, build_adam

    p = torch.nn.Parameter(torch.ones(3))
    opt = build_adam(AdamConfig(impl=impl, lr=0.1), [p])
    prec = Precision("fp32", torch.device("cpu"))
    outcomes = []
    for grad in ([1.0, 2.0, 3.0], [float("nan"), 0.0, 0.0], [1.0, 1.0, 1.0]):
        opt.zero_grad()
        p.grad = torch.tensor(grad)
        outcomes.append(float(prec.step(opt, prec.unscale_and_clip(opt, [p], 0.0))))
    assert outcomes == [1.0, 0.0, 1.0]
    assert float(opt.state[p]["step"]) == 2.0  # the skipped step did not count
    q = torch.nn.Parameter(torch.ones(3))  # the same two good steps, never a bad one
    ref = torch.optim.Adam([q], lr=0.1, betas=(0.9, 0.98), eps=1e-8, foreach=False)
    for grad in ([1.0, 2.0, 3.0], [1.0, 1.0, 1.0]):
        q.grad = torch.tensor(grad)
        ref.step()
    assert torch.allclose(p.detach(), q.detach(), atol=1e-6) and not torch.equal(q.detach(), torch.ones(3))
    assert prec.count_skipped(1) == "non-finite gradient norm: 1 step(s) skipped (1 so far)"


def test_apex_fused_layer_norm_is_used_when_importable(monkeypatch):
    import dataclasses

    from seqkit.data.dictionary import Dictionary
    from seqkit.models.transformer import TransformerModel, transformer_tiny

    class FakeFusedLayerNorm(torch.nn.LayerNorm):
        pass

    apex, normalization = types.ModuleType("apex"), types.ModuleType("apex.normalization")
    normalization.FusedLayerNorm = FakeFusedLayerNorm
    apex.normalization = normalization
    d = Dictionary(["a", "b"])
    cfg = dataclasses.replace(transformer_tiny(), normalize_before=True)
    monkeypatch.setitem(sys.modules, "apex", None)
    plain = TransformerModel(cfg, d, d)
    assert not any(isinstance(m, FakeFusedLayerNorm) for m in plain.modules())
    monkeypatch.setitem(sys.modules, "apex", apex)
    monkeypatch.setitem(sys.modules, "apex.normalization", normalization)
    fused = TransformerModel(cfg, d, d)
    norms = [m for m in fused.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert norms and all(isinstance(m, FakeFusedLayerNorm) for m in norms)
    fused.load_state_dict(plain.state_dict())  # same parameter names: checkpoints move freely
    monkeypatch.setitem(sys.modules, "apex", None)
    monkeypatch.setitem(sys.modules, "apex.normalization", None)
    with pytest.raises(SeqkitError, match="layer_norm_impl=apex but NVIDIA apex is not importable"):
        TransformerModel(dataclasses.replace(cfg, layer_norm_impl="apex"), d, d)
