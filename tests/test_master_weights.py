"""bf16/fp16 weights with fp32 masters in the optimizer (``common.param_dtype``): few dtype casts an
update, the quality of fp32 on the toy corpus, bit-identical resume, fp16's skip and loss-scale
halving without a host read, gradual unfreezing and adaptation modes, DDP, and the settings refused."""

import contextlib
import io
import sys
from pathlib import Path

import pytest
import torch

from seqkit.core.errors import SeqkitError
from seqkit.optim.groups import param_groups
from seqkit.training.master_weights import MasterWeights, resolve_param_dtype
from seqkit.training.trainer import Trainer

from test_gpu_path import host_reads, make_cfg
from test_trainer import data_dir  # noqa: F401  (the toy corpus, binarized: a fixture)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import casts  # noqa: E402  (benchmarks/casts.py: the cast counter and the GPU paths forced on)
from casts import CastCounter  # noqa: E402

def as_on_a_gpu(monkeypatch):
    casts.as_on_a_gpu(monkeypatch.setattr)


def samples_of(trainer, n):
    ds = trainer._load("train")
    return [ds.collate(b) for b in ds.batches(200, seed=1, epoch=1)[:n]]


def test_masters_step_as_fp32_adamw_steps_each_parameter():
    """A Linear and a LayerNorm (2 groups: decay, no decay): the model's weights and gradients are
    views of one buffer per group, and with gradients exact in bf16 the flat fp32 masters step
    bit for bit as AdamW steps the fp32 parameters one by one; the saved state (by names) loads
    back into another run's flats."""
    torch.manual_seed(0)
    make = lambda: torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.LayerNorm(2))  # noqa: E731
    model, ref = make(), make()
    ref.load_state_dict(model.state_dict())
    masters = MasterWeights(model, param_groups(model, 0.01), torch.bfloat16)
    opt = torch.optim.AdamW(masters.groups, lr=0.1, foreach=True)
    ref_opt = torch.optim.AdamW(param_groups(ref, 0.01), lr=0.1, foreach=True)
    assert [m.numel() for m in masters.masters] == [6, 2 + 2 + 2]  # weight | bias, norm weight, norm bias
    for p in model.parameters():
        assert p.dtype == torch.bfloat16 and p.grad.dtype == torch.bfloat16
    assert model[0].weight.data_ptr() == masters.flats[0].data_ptr()
    assert model[0].bias.grad.data_ptr() == masters.grads[1].data_ptr()
    for step in range(3):
        grads = {n: torch.randn(p.shape).bfloat16() for n, p in ref.named_parameters()}
        masters.zero_grad()
        for n, p in model.named_parameters():
            p.grad += grads[n]  # as autograd accumulates: in place, into the views
            ref.get_parameter(n).grad = grads[n].float()
        masters.grads_to_masters()
        opt.step()
        masters.masters_to_model()
        ref_opt.step()
    state = masters.model_state(model)
    assert all(torch.equal(state[n], p) and state[n].dtype == torch.float32 for n, p in ref.named_parameters())
    assert all(torch.equal(p, ref.get_parameter(n).bfloat16()) for n, p in model.named_parameters())
    saved = masters.optimizer_state(opt)
    for n, p in ref.named_parameters():
        assert all(torch.equal(saved["state"][n][k], ref_opt.state[p][k]) for k in ("exp_avg", "exp_avg_sq", "step"))
    other = make()
    again = MasterWeights(other, param_groups(other, 0.01), torch.bfloat16)
    other_opt = torch.optim.AdamW(again.groups, lr=0.1, foreach=True)
    again.load_model_state(other, state)
    again.load_optimizer_state(other_opt, saved)
    assert all(torch.equal(a, b) for a, b in zip(again.masters, masters.masters))
    assert all(torch.equal(a, b) for a, b in zip(again.flats, masters.flats))
    assert all(torch.equal(other_opt.state[a][k], opt.state[b][k]) for a, b in zip(again.masters, masters.masters)
               for k in ("exp_avg", "exp_avg_sq", "step"))


def test_an_update_casts_a_few_times_not_every_weight(data_dir, tmp_path, monkeypatch, capsys):
    """Autocast casts every weight at every forward and every gradient back; bf16 weights cast
    each group's gradient to fp32 once and its masters back once (2 groups: 4), the rest is the
    loss's fp32 log-softmax and masks (11 in all for the tiny transformer with dropout)."""
    as_on_a_gpu(monkeypatch)
    counts = {}
    for param_dtype in ("fp32", "bf16"):
        t = Trainer(make_cfg(data_dir, tmp_path, "common.precision=bf16", f"common.param_dtype={param_dtype}",
                             "optimizer.impl=fused", "checkpoint.no_save=true"))
        samples = samples_of(t, 2)
        t.train_step([samples[0]])  # warm-up: the optimizer builds its state
        with CastCounter() as counter:
            t.train_step([samples[1]])
        counts[param_dtype] = counter
    with capsys.disabled():
        print(f"\ndtype casts per update, tiny transformer: autocast {counts['fp32'].total}, "
              f"bf16 weights {counts['bf16'].total} {dict(counts['bf16'].casts)}")
    assert counts["bf16"].total <= 20
    assert counts["fp32"].total > 100  # (143: two per Linear weight and its gradient, and more)
    masters = counts["bf16"].casts
    assert masters[("copy_", "bfloat16", "float32")] == 2 and masters[("copy_", "float32", "bfloat16")] >= 2


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_an_update_reads_nothing_from_the_device(data_dir, tmp_path, monkeypatch, precision):
    """As tests/test_gpu_path.py checks for autocast: with the masters no update reads a value."""
    t = Trainer(make_cfg(data_dir, tmp_path, "optimizer.impl=fused", f"common.precision={precision}",
                         f"common.param_dtype={precision}", "checkpoint.no_save=true"))
    assert next(t.model.parameters()).dtype == {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    samples = samples_of(t, 2)
    t.train_step([samples[0]])
    as_on_a_gpu(monkeypatch)
    with host_reads() as reads:
        logs = t.train_step([samples[1]])
    assert reads == []
    monkeypatch.undo()
    assert float(logs["stepped"]) == 1.0


def test_fp16_overflow_skips_the_step_and_halves_the_scale(data_dir, tmp_path, monkeypatch):
    """An inf gradient: the step is skipped on the device (masters, weights and moments as they
    were), the loss scale halves, no value is read; the next update steps at the halved scale."""
    t = Trainer(make_cfg(data_dir, tmp_path, "optimizer.impl=fused", "common.precision=fp16", "common.param_dtype=fp16",
                         "common.fp16_init_loss_scale=1024", "checkpoint.no_save=true"))
    samples = samples_of(t, 3)
    t.train_step([samples[0]])
    masters = [m.detach().clone() for m in t.master.masters]
    weights = {n: p.detach().clone() for n, p in t.model.named_parameters()}
    moments = [t.optimizer.state[m]["exp_avg"].clone() for m in t.master.masters]
    weight = t.model.tgt_embed.weight
    hook = weight.register_hook(lambda g: torch.full_like(g, float("inf")))
    as_on_a_gpu(monkeypatch)
    with host_reads() as reads:
        logs = t.train_step([samples[1]])
    monkeypatch.undo()
    hook.remove()
    assert reads == []
    assert float(logs["stepped"]) == 0.0 and not torch.isfinite(logs["gnorm"])
    assert t.precision.scaler.get_scale() == 512.0
    assert all(torch.equal(a, b) for a, b in zip(masters, t.master.masters))
    assert all(torch.equal(p, weights[n]) for n, p in t.model.named_parameters())
    assert all(torch.equal(a, t.optimizer.state[m]["exp_avg"]) for a, m in zip(moments, t.master.masters))
    t.settle()
    assert t.num_updates == 1 and t.precision.overflows == 1
    logs = t.train_step([samples[2]])
    assert float(logs["stepped"]) == 1.0 and t.precision.scaler.get_scale() == 512.0
    assert not torch.equal(masters[0], t.master.masters[0])
    assert torch.equal(t.master.flats[0], t.master.masters[0].detach().half())  # the weights are the masters, cast


def test_resume_is_bit_identical_and_checkpoints_are_fp32(data_dir, tmp_path):
    """Stopped mid-epoch and resumed: the same masters, moments and weights as a run that never
    stopped. The checkpoint holds fp32 weights and the optimizer state keyed by parameter names,
    as an fp32 run's does, so an fp32 run resumes from it, and a bf16-weights run from an fp32 run's."""
    bf16 = ("common.precision=bf16", "common.param_dtype=bf16")
    straight = Trainer(make_cfg(data_dir, tmp_path / "a", "optimization.max_update=20", *bf16))
    straight.run()
    first = Trainer(make_cfg(data_dir, tmp_path / "b", "optimization.max_update=11", *bf16))
    first.run()
    assert first.batch_offset > 0
    resumed = Trainer(make_cfg(data_dir, tmp_path / "b", "optimization.max_update=20", *bf16))
    resumed.run()
    assert resumed.num_updates == 20
    a, b = straight.state_dict(), resumed.state_dict()
    assert a["model"].keys() == b["model"].keys() and all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert all(v.dtype == torch.float32 for v in a["model"].values())
    assert a["optimizer"]["state"].keys() == dict(straight.model.named_parameters()).keys()
    for name, s in a["optimizer"]["state"].items():
        assert all(torch.equal(v, b["optimizer"]["state"][name][k]) for k, v in s.items())
    assert all(torch.equal(x, y) for x, y in zip(straight.model.parameters(), resumed.model.parameters()))
    # the low-precision weights are the masters rounded
    assert torch.equal(straight.model.tgt_embed.weight, a["model"]["tgt_embed.weight"].bfloat16())
    fp32 = Trainer(make_cfg(data_dir, tmp_path / "b", "optimization.max_update=20"))
    fp32.maybe_resume()
    assert fp32.num_updates == 20 and next(fp32.model.parameters()).dtype == torch.float32
    assert all(torch.equal(p, a["model"][n]) for n, p in fp32.model.named_parameters())
    back = Trainer(make_cfg(data_dir, tmp_path / "c", *bf16))  # and the other way: an fp32 run's state
    back.load_state_dict(fp32.state_dict())
    again = back.state_dict()
    assert all(torch.equal(again["model"][k], a["model"][k]) for k in a["model"])
    assert all(torch.equal(v, again["optimizer"]["state"][n][k]) for n, s in a["optimizer"]["state"].items()
               for k, v in s.items())


def test_gradual_unfreezing_and_group_rates_with_masters(data_dir, tmp_path):
    """A group not yet training (from_update) keeps its masters and gets no optimizer state; a
    group's lr_scale scales its rate."""
    t = Trainer(make_cfg(data_dir, tmp_path, "common.precision=bf16", "common.param_dtype=bf16",
                         "checkpoint.no_save=true"))
    late = t.optimizer.param_groups[1]
    late["from_update"], t.optimizer.param_groups[0]["lr_scale"] = 2, 0.5
    before = [m.detach().clone() for m in t.master.masters]
    samples = samples_of(t, 3)
    t.train_step([samples[0]])
    t.train_step([samples[1]])
    assert not torch.equal(before[0], t.master.masters[0]) and torch.equal(before[1], t.master.masters[1])
    assert t.master.masters[1] not in t.optimizer.state
    assert t.optimizer.param_groups[0]["lr"] == 0.5 * t.scheduler.lr_at(1) == 0.5 * t.optimizer.param_groups[1]["lr"]
    t.train_step([samples[2]])
    assert not torch.equal(before[1], t.master.masters[1])


def test_settings_refused_in_one_line(data_dir, tmp_path):
    cpu, lstm = torch.device("cpu"), torch.nn.LSTM(4, 4)
    model = torch.nn.Linear(2, 2)
    assert resolve_param_dtype("auto", "bf16", cpu, model, "adam") is None  # the CPU keeps autocast
    assert resolve_param_dtype("auto", "bf16", torch.device("cuda"), model, "adam") == torch.bfloat16
    assert resolve_param_dtype("auto", "fp16", torch.device("cuda"), lstm, "adam") is None
    assert resolve_param_dtype("bf16", "bf16", cpu, model, "adam") == torch.bfloat16
    for setting, precision, m, opt, strategy, message in [
        ("bf16", "fp32", model, "adam", "ddp", "common.param_dtype=bf16 needs common.precision=bf16 .* not fp32"),
        ("fp16", "bf16", model, "adam", "ddp", "common.param_dtype=fp16 needs common.precision=fp16"),
        ("bf16", "bf16", lstm, "adam", "ddp", "LSTM/GRU layers"),
        ("bf16", "bf16", model, "adafactor", "ddp", "optimizer adafactor may not update element by element"),
        ("bf16", "bf16", model, "adam", "fsdp", "distributed.strategy=fsdp shards"),
    ]:
        with pytest.raises(SeqkitError, match=message) as e:
            resolve_param_dtype(setting, precision, cpu, m, opt, strategy, world_size=2)
        assert "\n" not in str(e.value)
    with pytest.raises(SeqkitError, match="common.param_dtype=fp16 needs common.precision=fp16"):
        Trainer(make_cfg(data_dir, tmp_path, "common.precision=bf16", "common.param_dtype=fp16"))
    from seqkit.cli.generate import generate

    with pytest.raises(SeqkitError, match="common.param_dtype=bf16: seqkit-generate casts the weights itself"):
        generate([f"path={tmp_path / 'none.pt'}", "common.param_dtype=bf16"])


def test_bf16_weights_translate_as_well_as_fp32(toy_data_factory, tmp_path):
    """Train -> generate -> BLEU on 2,000 toy pairs: 150 updates of bf16 weights score 89 (fp32
    there: 80; a model that outputs garbage scores under 5); the checkpoint is read at fp32."""
    from seqkit.cli.generate import main as generate
    from seqkit.cli.train import main as train
    from seqkit.data.toy_corpus import make_corpus

    make_corpus(str(tmp_path / "raw"), 2000, 40, 40, seed=1)
    _, data = toy_data_factory(tmp_path, raw=tmp_path / "raw")
    save = tmp_path / "ck"
    train([f"task.data={data}", f"checkpoint.save_dir={save}", "model=transformer_tiny", "model.dropout=0",
           "common.threads=1", "optimizer.lr=3e-3", "lr_scheduler=fixed", "optimization.max_update=150",
           "dataset.max_tokens=2048", "dataset.valid_subset=", "common.precision=bf16", "common.param_dtype=bf16"])
    state = torch.load(save / "checkpoint_last.pt", weights_only=True)
    assert all(v.dtype == torch.float32 for v in state["model"].values() if v.is_floating_point())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        generate([f"path={save}/checkpoint_last.pt", f"task.data={data}", "common.threads=1", "generation.beam=2",
                  "generation.max_len_b=40"])
    hyps, refs = {}, {}
    for line in out.getvalue().splitlines():
        kind, rest = line.split("\t", 1)
        k, i = kind.split("-")
        if k == "D":
            hyps[int(i)] = rest.split("\t")[-1]
        elif k == "T":
            refs[int(i)] = rest
    import sacrebleu

    bleu = sacrebleu.corpus_bleu([hyps[i] for i in sorted(refs)], [[refs[i] for i in sorted(refs)]]).score
    assert bleu >= 70, bleu


@pytest.fixture(scope="module")
def gpt_body(tmp_path_factory):
    from transfer_fixtures import make_text, pretrained_bodies

    text = make_text(tmp_path_factory.mktemp("master_text"))
    return pretrained_bodies(text, ["gpt"], tmp_path_factory)["gpt"]


def classifier_args(body, save, *extra):
    ck, data = body
    return ["task=classification", f"task.data={data}", "model=pretrained_classifier", f"model.path={ck}",
            "criterion=cross_entropy", "model.dropout=0", f"checkpoint.save_dir={save}", "common.precision=bf16",
            "common.param_dtype=bf16", *extra]


def test_adaptation_modes_keep_frozen_weights_out_of_the_masters(gpt_body, tmp_path):
    """LoRA: only its matrices and the head are in the masters, the frozen body is cast once and
    never moves, the checkpoint holds the trained entries in fp32. ULMFiT: epoch 1 trains the head
    alone (its later groups wait for their epoch)."""
    from transfer_fixtures import trainer_for

    lora = trainer_for(classifier_args(gpt_body, tmp_path / "lora", "model.adapt=lora", "optimization.max_update=4"))
    trained = {n for n, p in lora.model.named_parameters() if p.requires_grad}
    assert sum(m.numel() for m in lora.master.masters) == sum(p.numel() for n, p in lora.model.named_parameters()
                                                              if n in trained)
    start = {n: p.detach().clone() for n, p in lora.model.named_parameters()}
    assert all(p.dtype == torch.bfloat16 for p in start.values())
    lora.run()
    changed = {n for n, p in lora.model.named_parameters() if not torch.equal(p, start[n])}
    assert changed and changed <= trained
    state = torch.load(tmp_path / "lora" / "checkpoint_last.pt", weights_only=True)
    assert set(state["model"]) == trained and all(v.dtype == torch.float32 for v in state["model"].values())
    ulmfit = trainer_for(classifier_args(gpt_body, tmp_path / "ulmfit", "model.adapt=ulmfit",
                                         "optimization.max_epoch=1", "optimization.max_update=10"))
    start = {n: p.detach().clone() for n, p in ulmfit.model.named_parameters()}
    ulmfit.run()
    changed = {n for n, p in ulmfit.model.named_parameters() if not torch.equal(p, start[n])}
    assert changed and all(n.startswith("head.") for n in changed)


def test_two_ranks_equal_one_rank_with_update_freq_2(data_dir, tmp_path):
    """Under torchrun (DDP, gloo) the flat gradient views take DDP's averaged gradients: 2 ranks
    give the weights of 1 rank accumulating 2 batches, bit for bit (the bf16 sums round alike)."""
    from test_distributed import run, torchrun, train_args, weights

    bf16 = ("common.precision=bf16", "common.param_dtype=bf16", "optimization.max_update=6")
    two = torchrun(*train_args(data_dir, tmp_path / "two", *bf16))
    one = run(*train_args(data_dir, tmp_path / "one", "optimization.update_freq=2", *bf16))
    assert two.returncode == 0 and one.returncode == 0, (two.stderr + one.stderr)[-3000:]
    assert "weights in bfloat16 with fp32 masters" in two.stderr and "world size 2" in two.stderr
    a, b = weights(tmp_path / "two"), weights(tmp_path / "one")
    assert a["train_state"]["num_updates"] == b["train_state"]["num_updates"] == 6
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
