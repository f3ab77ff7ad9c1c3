"""A corpus in shards: ``task.data=dir1:dir2:...`` (fairseq's convention), each a complete folder
written by seqkit-preprocess in the same dictionaries. Epoch e (1-based) trains on shard
``(e - 1) % N``, round robin; validation reads the first. The task reads a shard's split when its
``load_dataset`` takes an ``epoch`` (translation, language_modeling); other tasks refuse shards."""

from __future__ import annotations

import inspect
from typing import Any

from seqkit.core.errors import SeqkitError
from seqkit.tasks.folders import epoch_dir, shard_dirs


def shard_count(task_cfg: Any, task_builder: Any) -> int:
    """How many shards ``task.data`` names (1: one folder); refused, before anything is read, for a
    task whose ``load_dataset`` cannot read one shard an epoch."""
    data = getattr(task_cfg, "data", None)
    if not isinstance(data, str):
        return 1
    n = len(shard_dirs(data))
    load = getattr(task_builder, "load_dataset", None)
    if n > 1 and (load is None or "epoch" not in inspect.signature(load).parameters):
        raise SeqkitError(f"task.data={data} names {n} shards, but task {task_cfg.name} reads one folder (translation "
                          "and language_modeling read shards, one an epoch): give it one folder")
    return n


def shard_of(epoch: int, shards: int) -> int:
    """The 0-based shard epoch ``epoch`` (1-based) trains on."""
    return (max(epoch, 1) - 1) % max(shards, 1)


def shard_line(data: str, epoch: int) -> str:
    """``epoch 3 trains on shard 1 of 2 (data-bin/shard0)``: the log line of a sharded epoch."""
    n = len(shard_dirs(data))
    return f"epoch {epoch} trains on shard {shard_of(epoch, n) + 1} of {n} ({epoch_dir(data, epoch)})"
