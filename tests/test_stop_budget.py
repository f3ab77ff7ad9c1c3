"""A clock budget (``optimization.stop_time_hours``) that ends a run inside its first epoch says so
in one warning, with the updates reached and the share of train seen; and the trainer's
"attention kernels" line appears only for a model that runs scaled_dot_product_attention."""

import logging

from label_fixtures import tagged, train_cfg  # noqa: F401  (fixtures are used by name)
from seqkit.training.trainer import Trainer

TAGGER = ("dataset.max_tokens=128", "checkpoint.best_checkpoint_metric=f1",
          "checkpoint.maximize_best_checkpoint_metric=true")


def _train(caplog, root, save_dir, model, *extra):
    """Train on the tagged fixture; returns the run's result and the trainer's log messages."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="seqkit.train"):
        result = Trainer(train_cfg(root / "bin", save_dir, "tagging", model, *TAGGER, *extra)).run()
    return result, [r.getMessage() for r in caplog.records if r.name == "seqkit.train"]


def test_a_budget_that_ends_the_first_epoch_early_warns_with_the_updates_and_the_share_seen(tagged, tmp_path, caplog):  # noqa: F811
    root, _ = tagged
    # 1e-9 hours (3.6 us): the first update already spends it
    result, messages = _train(caplog, root, tmp_path / "ck", "bilstm_tagger_tiny", "optimization.stop_time_hours=1e-9")
    assert result["num_updates"] == 1 and result["epoch"] == 1
    assert "done: reached stop_time_hours 1e-09; 1 updates, best f1 " in "\n".join(messages)
    warned = [m for m in messages if "before the first epoch ended" in m]
    assert len(warned) == 1, messages
    # 60 sentences in batches of <= 128 tokens: several batches, one of them seen
    share = float(warned[0].split("the model has seen ")[1].split("%")[0])
    assert 0 < share < 50, warned[0]
    assert warned[0] == (f"stop_time_hours 1e-09 reached after 1 updates, before the first epoch ended: the model "
                         f"has seen {share:.1f}% of train; set optimization.max_update for a figure that does not "
                         "depend on the machine's load")


def test_no_budget_warning_for_a_stop_by_update_count_or_after_the_first_epoch(tagged, tmp_path, caplog):  # noqa: F811
    root, _ = tagged
    _, messages = _train(caplog, root, tmp_path / "a", "bilstm_tagger_tiny", "optimization.max_update=1")
    assert any("done: reached max_update 1; 1 updates" in m for m in messages)
    assert not any("before the first epoch ended" in m for m in messages), messages
    # the same budget spent in the second epoch (its first ended and was validated): no warning
    trainer = Trainer(train_cfg(root / "bin", tmp_path / "b", "tagging", "bilstm_tagger_tiny", *TAGGER,
                                "optimization.stop_time_hours=0.5"))
    trainer.epoch, trainer.num_updates, trainer.batch_offset, trainer.epoch_batches = 2, 30, 5, 20
    assert trainer._budget_warning("reached stop_time_hours 0.5") is None
    trainer.epoch = 1
    assert trainer._budget_warning("reached stop_time_hours 0.5").startswith(
        "stop_time_hours 0.5 reached after 30 updates, before the first epoch ended: the model has seen 25.0% of train")


def test_the_attention_kernels_line_only_for_a_model_with_attention(tagged, tmp_path, caplog):  # noqa: F811
    root, _ = tagged
    _, lstm = _train(caplog, root, tmp_path / "lstm", "bilstm_tagger_tiny", "optimization.max_update=1")
    _, transformer = _train(caplog, root, tmp_path / "tr", "transformer_tagger_tiny", "optimization.max_update=1")
    assert any(m.startswith("model bilstm_tagger") for m in lstm)  # the log was read
    assert not any(m.startswith("attention kernels:") for m in lstm), lstm
    assert [m for m in transformer if m.startswith("attention kernels:")] == [
        "attention kernels: torch's cpu kernels (common.attention_kernels applies to CUDA)"]
