"""The training set and epoch 1's batches made in a thread while the trainer builds the rest
(seqkit/training/ahead.py): the same batches as the dataset's own call, handed over only when they
are the ones asked for, the load's error raised in the trainer's thread, GIL switching restored."""

import sys
import threading

import numpy as np
import pytest

from seqkit.core.errors import SeqkitError
from seqkit.training import ahead
from seqkit.training.ahead import Ahead
from seqkit.training.trainer import Trainer

from test_trainer import data_dir, make_cfg  # noqa: F401 - the fixture and config of the trainer's tests


class Sizes:
    """A dataset of given lengths with the batches of seqkit.data.batching."""

    def __init__(self, n: int):
        self.sizes = np.random.default_rng(n).integers(1, 40, n)

    def batches(self, max_tokens, max_sentences=0, seed=1, epoch=0, shuffle=True, exclude=None):
        from seqkit.data.batching import token_budget_batches

        return token_budget_batches(self.sizes, max_tokens, max_sentences, seed, epoch, shuffle, exclude)


def same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def test_batches_are_the_datasets_and_given_once():
    data = Sizes(3000)
    made = Ahead(lambda: data, (256, 0, 7, 1))
    assert made.dataset() is data
    assert made.batches((256, 0, 7, 2), None) is None  # another epoch: computed by the caller
    assert made.batches((256, 0, 7, 1), np.array([4])) is None  # examples left out: likewise
    got = made.batches((256, 0, 7, 1), np.zeros(0, dtype=np.int64))
    assert same(got, data.batches(256, 0, 7, 1))
    assert made.batches((256, 0, 7, 1), None) is None  # given once


def test_load_error_is_raised_by_dataset():
    def load():
        raise SeqkitError("binarized data not found: x.idx")

    made = Ahead(load, (256, 0, 1, 1))
    with pytest.raises(SeqkitError, match="binarized data not found"):
        made.dataset()


def test_switch_interval_is_restored_after_overlapping_threads():
    before = sys.getswitchinterval()
    gate = threading.Event()

    def slow():
        gate.wait(5)
        return Sizes(10)

    first, second = Ahead(slow, (64, 0, 1, 1)), Ahead(slow, (64, 0, 1, 1))
    assert sys.getswitchinterval() == pytest.approx(ahead.SWITCH_S)
    gate.set()
    first.batches((64, 0, 1, 1), None), second.batches((64, 0, 1, 1), None)
    assert sys.getswitchinterval() == pytest.approx(before)


def test_trainer_trains_on_the_batches_made_ahead(data_dir, tmp_path):  # noqa: F811
    """The trainer's epoch 1 takes the thread's batches, which are the dataset's own."""
    trainer = Trainer(make_cfg(data_dir, tmp_path / "a", "optimization.max_update=2"))
    cfg = trainer.cfg.dataset
    args = (cfg.max_tokens, cfg.max_sentences, trainer.cfg.common.seed, 1)
    dataset = trainer._ahead.dataset()
    expected = dataset.batches(*args, shuffle=True, exclude=None)
    assert same(trainer._ahead.batches(args, None), expected)
    # a trainer that starts at epoch 1 hands them to its first epoch
    other = Trainer(make_cfg(data_dir, tmp_path / "b", "optimization.max_update=2"))
    taken = []
    give = other._ahead.batches
    other._ahead.batches = lambda a, e: taken.append(a) or give(a, e)
    other.run()
    assert taken == [args] and other.num_updates == 2
