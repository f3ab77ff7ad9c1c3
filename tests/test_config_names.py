"""What a command line's keys meet before any work: "did you mean" for a misspelt or fairseq key,
booleans read strictly, the cached composition equal to hydra's own, and settings a model cannot
honour (a length multiple above its positions) refused."""

import pytest
from omegaconf import OmegaConf

import seqkit
from label_fixtures import one_line_error
from seqkit.cli.common import ConfigBuilder, _composed
from seqkit.cli.names import suggest
from seqkit.cli.train import main as train
from seqkit.core.settings import Reads, given, refuse_unread, set_given, user_set
from seqkit.core.errors import SeqkitError
from seqkit.training.config import TrainConfig

seqkit.import_builtin_components()


@pytest.mark.parametrize("arg, hint", [
    ("optimization.lr=0.1", "did you mean optimizer.lr? (fairseq's optimization.lr)"),
    ("optimisation.lr=0.1", "did you mean optimizer.lr? (fairseq's optimization.lr)"),
    ("optimisation.max_update=3", "did you mean optimization.max_update?"),
    ("comon.seed=3", "did you mean common.seed?"),
    ("optimizer.lrr=0.1", "did you mean optimizer.lr or"),
    ("dataset.batch_size=8", "did you mean dataset.max_sentences? (fairseq's dataset.batch_size)"),
    ("common.fp16=true", "fairseq's common.fp16 is common.precision=fp16 in seqkit"),
    ("distributed_training.ddp_backend=x", "did you mean distributed.strategy?"),
    ("--lr", "(fairseq's --lr is optimizer.lr=VALUE)"),
    ("--max-tokens=4096", "(fairseq's --max-tokens is dataset.max_tokens=VALUE)"),
    ("--fp16", "(fairseq's --fp16 is common.precision=fp16)"),
])
def test_an_unknown_key_gets_a_did_you_mean(arg, hint, run_cli):
    r = run_cli(train, ["task=language_modeling", arg])
    one_line_error(r, "seqkit-train", hint)


def test_no_suggestion_for_a_key_like_nothing():
    assert suggest("zzz.qqq", ["common.seed", "optimizer.lr"]) == ""


@pytest.mark.parametrize("value", ["2", "yes", "1", "on", "'true'x"])
def test_booleans_are_true_or_false(value, run_cli):
    r = run_cli(train, ["task=language_modeling", f"task.eos_prefix={value}"])
    one_line_error(r, "seqkit-train", f"task.eos_prefix={value}: not a boolean; write task.eos_prefix=true or "
                                      "task.eos_prefix=false")


def test_the_cached_composition_is_hydras_and_keeps_nothing_between_command_lines():
    b = ConfigBuilder("train", TrainConfig)
    args = ["task=classification", "model=cbow_tiny", "optimizer.lr=0.5", "dataset.max_tokens=77",
            "common.user_dir=null", "optimizer.betas=[0.8,0.9]", "checkpoint.save_dir='a b'"]
    fast = b.compose(args)
    slow = b._hydra_compose(args)
    assert OmegaConf.to_container(fast) == OmegaConf.to_container(slow)
    again = b.compose(["task=classification", "model=cbow_tiny"])  # the same cached base, no leftovers
    assert again.optimizer.lr != 0.5 and again.dataset.max_tokens != 77
    assert any(key[2] == ("task=classification", "model=cbow_tiny") for key in _composed)
    with pytest.raises(SeqkitError, match="could not be converted to Float"):
        b.compose(["optimizer.lr=abc"])


def test_given_keys_are_the_command_lines_and_cleared_after_it(run_cli):
    run_cli(train, ["task=language_modeling", "optimization.lr=1"])
    assert given() == frozenset()  # a Python caller after a CLI run starts with none
    set_given(["common.seed"])
    try:
        cfg = TrainConfig.__dataclass_fields__["common"].default_factory()
        assert user_set(cfg, ["seed", "threads"], "common.") == ["seed=1"]  # given, though at its default
    finally:
        set_given(())
    assert user_set(cfg, ["seed"], "common.") == []


def test_refuse_unread_names_the_key_the_reader_and_the_reason():
    reads = Reads("seqkit-x on a thing", ("a", "b.c"), (("b", "b is for others"),))
    refuse_unread(["a", "a.z", "b.c"], reads)  # all read: no error
    with pytest.raises(SeqkitError) as e:
        refuse_unread(["b.d", "e"], reads)
    assert str(e.value) == "b.d (and e): seqkit-x on a thing does not read it; b is for others; drop it"


def test_a_length_multiple_above_the_models_positions_is_refused(toy_data, tiny_train_args, run_cli, tmp_path):
    _, data = toy_data
    r = run_cli(train, [f"task.data={data}", f"checkpoint.save_dir={tmp_path / 'ck'}", *tiny_train_args,
                        "model.max_source_positions=64", "model.max_target_positions=64",
                        "dataset.required_seq_len_multiple=300"])
    one_line_error(r, "seqkit-train", "dataset.required_seq_len_multiple=300 is above the model's 64 positions",
                   log_lines_allowed=True)
    assert not (tmp_path / "ck").exists()
