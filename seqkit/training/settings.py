"""The settings ``seqkit-train`` reads for one run, so that one it would ignore is refused.

The sections every task shares (``common``, ``dataset``, ``optimization``, ``checkpoint``,
``distributed``, ``energy``) hold settings that only apply with others: loss scaling with fp16, a packed
row's length with packing, patience and the best checkpoint's metric with validation, epoch
checkpoints' pruning with epoch checkpoints, the collective timeout under torchrun, the watts of
an energy estimate where the machine's counters measure it. A component's
own fields (``model.*``, ``optimizer.*``...) are its config's and are read by it.
"""

from __future__ import annotations

from typing import Any, List, Tuple

from seqkit.core.errors import SeqkitError
from seqkit.core.registry import OPTIMIZERS
from seqkit.core.settings import Reads
from seqkit.training.energy import on_gpu
from seqkit.training.energy import unread as energy_unread


def train_reads(cfg: Any, world_size: int, attention: bool) -> Reads:
    """What a run of ``cfg`` reads, with ``world_size`` processes, for a model that does (not) run
    attention kernels (``attention``)."""
    c, d, ck = cfg.common, cfg.dataset, cfg.checkpoint
    unread: List[Tuple[str, str]] = []
    if c.precision != "fp16":
        unread += [(f"common.{k}", f"loss scaling is common.precision=fp16's (this run: {c.precision})")
                   for k in ("fp16_init_loss_scale", "fp16_scale_window", "fp16_min_loss_scale")]
    if not attention:
        unread.append(("common.attention_kernels", f"model {cfg.model.name} runs no attention kernel"))
    if not d.pack:
        unread.append(("dataset.pack_length", "it is the row length of dataset.pack=true"))
    if not d.valid_subset:
        why = "the run does not validate (dataset.valid_subset is empty)"
        unread += [("dataset.max_tokens_valid", why), ("optimization.patience", why),
                   ("checkpoint.best_checkpoint_metric", why), ("checkpoint.maximize_best_checkpoint_metric", why)]
    if ck.no_save:
        why = "checkpoint.no_save=true writes no checkpoint"
        unread += [(f"checkpoint.{k}", why) for k in ("save_interval_updates", "keep_last_epochs", "no_epoch_checkpoints")]
        if not d.valid_subset:  # it still spaces the validations of a run that saves nothing
            unread.append(("checkpoint.save_interval", f"{why} and the run does not validate"))
    elif ck.no_epoch_checkpoints:
        unread.append(("checkpoint.keep_last_epochs", "checkpoint.no_epoch_checkpoints=true writes no checkpointN.pt"))
    if getattr(cfg.task, "stream_batches", 0):  # Transformer-XL's order: a batch is one block of each stream
        why = "task.stream_batches makes each batch one block of every stream"
        unread += [(f"dataset.{k}", why) for k in ("max_tokens", "max_sentences", "max_tokens_valid")]
    if getattr(OPTIMIZERS.builder(cfg.optimizer.name), "in_forward", False):  # the model applies it (pair_sgd)
        unread.append(("optimization.clip_norm", f"optimizer={cfg.optimizer.name} applies each prediction's "
                                                  "gradient as it is made: there is no update gradient to clip"))
    if world_size == 1:
        why = "the run is one process (start it with torchrun for several)"
        unread += [("distributed.strategy", why), ("distributed.timeout_minutes", why)]
    unread += energy_unread(on_gpu(c.device))  # the estimates' watts where a counter measures instead
    skip = {k for k, _ in unread}
    keys = [f"{s}.{f}" for s, fields in _SECTIONS.items() for f in fields if f"{s}.{f}" not in skip]
    keys += ["task", "model", "criterion", "optimizer", "lr_scheduler"]
    return Reads(f"seqkit-train ({cfg.task.name}, {cfg.model.name})", tuple(keys), tuple(unread))


def check_length_multiple(multiple: int, positions: Tuple[int, ...]) -> None:
    """``dataset.required_seq_len_multiple`` above the model's positions would pad every batch past them."""
    if multiple > min(positions):
        raise SeqkitError(f"dataset.required_seq_len_multiple={multiple} is above the model's {min(positions)} "
                          "positions: every batch would be padded past them; use a divisor of them (8 or 64)")


def _section_fields() -> dict:
    import dataclasses

    from seqkit.training.config import TrainConfig

    out = {}
    for f in dataclasses.fields(TrainConfig):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(default):
            out[f.name] = [g.name for g in dataclasses.fields(default)]
    return out


_SECTIONS = _section_fields()
