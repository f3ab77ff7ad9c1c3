"""Registry, hydra composition, one-line config errors, experiment YAML files, LR schedules."""

import math
from dataclasses import dataclass

import pytest

import seqkit
from seqkit.cli.common import ConfigBuilder, overrides_from_file, parse_argv
from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import LR_SCHEDULERS, Registry
from seqkit.training.config import TrainConfig

seqkit.import_builtin_components()
BUILDER = ConfigBuilder("train", TrainConfig)


def test_registry_rejects_mismatched_names_and_duplicates():
    reg = Registry("thing")

    @dataclass
    class Cfg:
        name: str = arg("a", "registry name")

    reg.register("a", Cfg)(object)
    with pytest.raises(ValueError):
        reg.register("a", Cfg)(object)
    with pytest.raises(TypeError):
        reg.register("b", Cfg)
    with pytest.raises(SeqkitError, match="unknown thing 'zzz'; valid: a"):
        reg.make_config({"name": "zzz"})
    with pytest.raises(SeqkitError, match="unknown thing config key"):
        reg.make_config({"name": "a", "bogus": 1})


def test_compose_defaults_and_overrides():
    cfg = BUILDER.compose(["model=transformer_tiny", "optimizer.lr=7e-4", "lr_scheduler=cosine", "dataset.max_tokens=99"])
    assert cfg.model.embed_dim == 64 and cfg.model.name == "transformer"
    assert cfg.optimizer.lr == 7e-4 and cfg.lr_scheduler.name == "cosine" and cfg.dataset.max_tokens == 99
    default = BUILDER.compose([])
    assert default.model.embed_dim == 256 and default.criterion.name == "label_smoothed_cross_entropy"


@pytest.mark.parametrize("override, message", [
    ("model=nope", "transformer, transformer_base, transformer_big"),
    ("optimizer.foo=1", "unknown config key 'optimizer.foo'; valid keys of optimizer 'adam': name, lr, betas"),
    ("bogus=1", "unknown config key 'bogus'; valid keys of train: common, dataset"),
    ("dataset.nope=3", "valid keys of train.dataset: max_tokens"),
    ("optimizer.lr=abc", "could not be converted to Float"),
    ("common=3", "common is a group of settings, not one: set common.FIELD=value (seed, precision"),
])
def test_config_errors_are_one_line(override, message):
    with pytest.raises(SeqkitError) as err:
        BUILDER.compose([override])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_group_key_checked_against_the_chosen_option():
    BUILDER.compose(["optimizer=sgd", "optimizer.momentum=0.9"])
    with pytest.raises(SeqkitError, match="valid keys of optimizer 'adam'"):
        BUILDER.compose(["optimizer.momentum=0.9"])


def test_generate_takes_its_task_from_the_checkpoint():
    """seqkit-generate has no task group: the checkpoint names the task; task.data locates splits."""
    from seqkit.generation.config import GenerateConfig

    gen = ConfigBuilder("generate", GenerateConfig)
    assert gen.compose(["task.data=bin", "path=ck.pt"]).task.data == "bin"
    with pytest.raises(SeqkitError, match=r"^unknown config key 'task.eval_bleu'; valid keys of generate.task: data$"):
        gen.compose(["task.eval_bleu=true"])
    with pytest.raises(SeqkitError, match=r"^task is a group of settings, not one: set task.FIELD=value \(data\)$"):
        gen.compose(["task=classification"])


def test_experiment_yaml(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("model:\n  name: transformer_tiny\n  dropout: 0.25\noptimizer:\n  betas: [0.9, 0.99]\n"
                    "task:\n  data: 'my data'\n")
    overrides = overrides_from_file(str(path))
    assert overrides[0] == "model=transformer_tiny"
    cfg = parse_argv(BUILDER, ["--config", str(path), "model.dropout=0.5"], "seqkit-train")
    assert cfg.model.dropout == 0.5 and cfg.model.embed_dim == 64
    assert list(cfg.optimizer.betas) == [0.9, 0.99] and cfg.task.data == "my data"


def test_help_lists_choices(capsys):
    with pytest.raises(SystemExit) as e:
        parse_argv(BUILDER, ["--help"], "seqkit-train")
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "transformer_small" in out and "inverse_sqrt" in out and "optimization.update_freq" in out


def schedule(name, **kw):
    cfg = LR_SCHEDULERS.choices()[name]
    for k, v in kw.items():
        setattr(cfg, k, v)
    return LR_SCHEDULERS.build(cfg, 1e-3, 1000)


def test_lr_schedules():
    inv = schedule("inverse_sqrt", warmup_updates=100, warmup_init_lr=0.0)
    assert inv.lr_at(0) == 0.0 and inv.lr_at(50) == pytest.approx(5e-4) and inv.lr_at(100) == pytest.approx(1e-3)
    assert inv.lr_at(400) == pytest.approx(5e-4)
    cos = schedule("cosine", warmup_updates=0, min_lr=1e-5)
    assert cos.lr_at(0) == pytest.approx(1e-3) and cos.lr_at(500) == pytest.approx((1e-3 + 1e-5) / 2)
    assert cos.lr_at(1000) == pytest.approx(1e-5) and cos.lr_at(5000) == pytest.approx(1e-5)
    poly = schedule("polynomial_decay", warmup_updates=100)
    assert poly.lr_at(100) == pytest.approx(1e-3) and poly.lr_at(550) == pytest.approx(5e-4) and poly.lr_at(1000) == 0.0
    fixed = schedule("fixed", warmup_updates=10)
    assert fixed.lr_at(5) == pytest.approx(5e-4) and fixed.lr_at(10**6) == 1e-3
    assert all(math.isfinite(s.lr_at(n)) for s in (inv, cos, poly, fixed) for n in range(0, 2000, 37))


def test_decaying_schedules_need_a_known_length():
    """A run stopped by time has no max_update: the cosine would otherwise drop to min_lr at once."""
    for name, fix in (("cosine", "period_updates"), ("polynomial_decay", "total_num_update")):
        cfg = LR_SCHEDULERS.choices()[name]
        with pytest.raises(SeqkitError, match=fix):
            LR_SCHEDULERS.build(cfg, 1e-3, 0)
        setattr(cfg, fix, 500)
        assert LR_SCHEDULERS.build(cfg, 1e-3, 0).lr_at(250) < 1e-3
