"""Hostile input: the text reader, the binarized dataset reader and the checkpoint loader either
work or raise one clean SeqkitError, whatever bytes they are given."""

import io
import os

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqkit.core import checkpoints
from seqkit.core.errors import SeqkitError
from seqkit.core.io import read_lines
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset, write_dataset

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(data=st.binary(max_size=300))
def test_text_reader(tmp_path, data):
    path = tmp_path / "t.txt"
    path.write_bytes(data)
    try:
        lines = list(read_lines(str(path)))
    except SeqkitError as e:
        assert "not valid UTF-8" in str(e) and "\n" not in str(e)
    else:
        assert all(isinstance(x, str) and "\n" not in x for x in lines)


@FUZZ
@given(data=st.text(max_size=200))
def test_dictionary_reader(tmp_path, data):
    path = tmp_path / "dict.txt"
    path.write_text(data, encoding="utf-8")
    try:
        d = Dictionary.load(str(path))
    except SeqkitError:
        return
    assert len(d) >= 4


def _valid_dataset(prefix):
    write_dataset(prefix, [[5, 6, 2], [7, 2], [], [9, 9, 9, 2]], vocab_size=20)
    return open(prefix + ".idx", "rb").read(), open(prefix + ".bin", "rb").read()


@FUZZ
@given(cut_idx=st.integers(0, 200), cut_bin=st.integers(0, 40), flip=st.integers(0, 199), junk=st.binary(max_size=64))
def test_indexed_dataset_reader(tmp_path, cut_idx, cut_bin, flip, junk):
    prefix = str(tmp_path / "d")
    idx, bin_ = _valid_dataset(prefix)
    idx = bytearray(idx[:cut_idx] + junk if junk else idx[:cut_idx] if cut_idx < len(idx) else idx)
    if flip < len(idx):
        idx[flip] ^= 0xFF
    open(prefix + ".idx", "wb").write(bytes(idx))
    open(prefix + ".bin", "wb").write(bin_[:cut_bin])
    try:
        ds = IndexedDataset(prefix)
    except SeqkitError as e:
        assert "\n" not in str(e)
        return
    for i in range(len(ds)):  # a dataset that loads is readable end to end
        assert ds[i].numel() == int(ds.sizes[i])


def _valid_checkpoint_bytes():
    state = {"format": 1, "cfg": {"model": {"name": "x"}}, "task_state": {}, "model": {"w": torch.ones(3)},
             "train_state": {"epoch": 1}}
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


VALID_CK = _valid_checkpoint_bytes()


@FUZZ
@given(cut=st.integers(0, len(VALID_CK)), flip=st.integers(0, len(VALID_CK) - 1), junk=st.binary(max_size=32))
def test_checkpoint_loader(tmp_path, cut, flip, junk):
    data = bytearray(VALID_CK[:cut] + junk)
    if flip < len(data):
        data[flip] ^= 0x5A
    path = str(tmp_path / "ck.pt")
    open(path, "wb").write(bytes(data))
    try:
        state = checkpoints.load(path)
    except SeqkitError as e:
        assert "\n" not in str(e)
        return
    assert set(state) >= {"format", "cfg", "model"}


def test_failed_save_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    """Disk full while saving: the error is one line, the older file is intact, no temp file is left."""
    import errno

    import seqkit.core.io

    path = str(tmp_path / "checkpoint_last.pt")
    checkpoints.write([path], {"format": 1, "v": torch.zeros(2)})
    before = open(path, "rb").read()

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(seqkit.core.io.os, "fsync", no_space)
    try:
        checkpoints.write([path], {"format": 1, "v": torch.ones(2)})
    except SeqkitError as e:
        assert "No space left on device" in str(e)
    else:
        raise AssertionError("the failed save did not raise")
    monkeypatch.undo()
    assert open(path, "rb").read() == before
    assert os.listdir(tmp_path) == ["checkpoint_last.pt"]
