"""The schema of ``seqkit-train`` (hydra ``train_schema``): shared sections + component groups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from omegaconf import MISSING

from seqkit.core.config import CommonConfig
from seqkit.core.config import arg


@dataclass
class DatasetConfig:
    max_tokens: int = arg(4096, "token budget of a batch (sentences x longest, padding included)", gt=0)
    max_sentences: int = arg(0, "most sentences in a batch (0: no limit)", ge=0)
    train_subset: str = arg("train", "split to train on")
    valid_subset: str = arg("valid", "split to validate on (skipped if the data has none)")
    max_tokens_valid: int = arg(0, "token budget for validation batches (0: max_tokens)", ge=0)
    required_seq_len_multiple: int = arg(0, "pad every batch's lengths up to a multiple of this, so batches come in "
                                            "few shapes (fairseq's --required-seq-len-multiple; 0: 8 on a GPU, 1 on a CPU)",
                                         ge=0)
    prefetch: int = arg(-1, "batches collated ahead in a background thread (pinned memory, non-blocking copies on a "
                            "GPU); -1: 4 on a GPU, 0 on a CPU; 0: collate each batch when it is needed", ge=-1)
    skip_invalid_size_inputs: bool = arg(True, "skip (and count) training pairs longer than the model's positions; false: error")
    pack: bool = arg(False, "train on rows of one fixed length, each holding several sentence pairs with document masks "
                            "(translation with the Transformer; pairs longer than a row are skipped as by "
                            "skip_invalid_size_inputs); language-model and masked-LM blocks of "
                            "task.sample_break_mode eos or complete are packed alike (transformer_lm; BERT-family "
                            "models without sentence or span heads), each block attending to itself only; with "
                            "sample_break_mode=none they are such rows already; off until measured faster on a GPU, "
                            "then meant to become the GPU default")
    pack_length: int = arg(0, "dataset.pack: tokens in a row of the side with more tokens (the other side's rows in "
                              "proportion to the training set's totals); a batch holds max_tokens // pack_length rows "
                              "(0: the model's positions, at most 512)", ge=0)


@dataclass
class OptimizationConfig:
    max_epoch: int = arg(0, "stop after this many epochs (0: no limit)", ge=0)
    max_update: int = arg(0, "stop after this many updates (0: no limit)", ge=0)
    stop_time_hours: float = arg(0.0, "stop after this much training time, in hours (0: no limit)", ge=0)
    update_freq: int = arg(1, "batches accumulated into one update (gradient accumulation)", ge=1)
    clip_norm: float = arg(0.0, "clip the global gradient norm to this (0: no clipping)", ge=0)
    patience: int = arg(-1, "early stopping: stop after this many validations without a new best (-1: off)", ge=-1)
    max_bad_updates: int = arg(10, "stop when this many updates in a row had a non-finite loss or gradient (each is skipped)",
                               ge=1)


@dataclass
class CheckpointConfig:
    save_dir: str = arg("checkpoints", "folder for checkpoint_last.pt, checkpoint_best.pt, checkpointN.pt and logs")
    save_interval: int = arg(1, "validate and save (checkpoint_last, checkpoint_best, checkpointN) at the end of every "
                                "N-th epoch and of the run; between them nothing is validated or written", ge=1)
    save_interval_updates: int = arg(0, "also save checkpoint_last every N updates (0: only at epoch ends)", ge=0)
    keep_last_epochs: int = arg(-1, "keep only the last N checkpointN.pt files (-1: keep all)", ge=-1)
    no_epoch_checkpoints: bool = arg(False, "only write checkpoint_last and checkpoint_best")
    no_save: bool = arg(False, "write no checkpoints at all")
    best_checkpoint_metric: str = arg("loss", "validation metric that picks checkpoint_best: loss, nll_loss, ppl; "
                                         "translation: bleu (task.eval_bleu); classification: accuracy, macro_f1, mcc, f1; "
                                         "tagging: f1, precision, recall, accuracy")
    maximize_best_checkpoint_metric: bool = arg(False, "higher is better for best_checkpoint_metric (true for bleu, accuracy, f1, ...)")
    reset: bool = arg(False, "ignore an existing checkpoint_last and start from scratch")
    restore_file: Optional[str] = arg(None, "initialize the model from this checkpoint's weights (fine-tuning; optimizer state not loaded)")


@dataclass
class DistributedConfig:
    strategy: str = arg("ddp", "ddp (DistributedDataParallel) or fsdp (fully sharded, for models that do not fit one device)",
                         choices=("ddp", "fsdp"))
    timeout_minutes: float = arg(10.0, "collective timeout: a rank waiting longer than this on a failed peer fails", gt=0)


@dataclass
class EnergyConfig:
    """What the run's energy costs in CO2e, and the watts of the estimates where nothing measures it
    (seqkit/training/energy.py; docs/scale.md#energy)."""

    grid_intensity: float = arg(432.7, "g CO2e per kWh of the grid the run draws from; default: Strubell et al. "
                                       "2019's U.S. average, 0.954 lb/kWh (EPA)", ge=0)
    pue: float = arg(1.0, "power usage effectiveness: the building's draw per watt the machine draws (1.0: the "
                          "machine alone; Strubell et al. 2019 took 1.58)", ge=1.0)
    cpu_watts_per_core: float = arg(5.0, "watts per torch thread of the CPU estimate where RAPL is unreadable "
                                         "(a server core's share of its package TDP: 360 W / 96 cores is 3.75, "
                                         "350 W / 56 is 6.25)", gt=0)
    gpu_watts: float = arg(300.0, "watts of the GPU estimate where NVML is unreadable (pip install nvidia-ml-py "
                                  "to measure it)", gt=0)


@dataclass
class TrainConfig:
    common: CommonConfig = arg(help="seeds, precision, device, logging", factory=CommonConfig)
    dataset: DatasetConfig = arg(help="batching", factory=DatasetConfig)
    optimization: OptimizationConfig = arg(help="stopping, accumulation, clipping", factory=OptimizationConfig)
    checkpoint: CheckpointConfig = arg(help="saving and resuming", factory=CheckpointConfig)
    distributed: DistributedConfig = arg(help="multi-process training under torchrun", factory=DistributedConfig)
    energy: EnergyConfig = arg(help="the run's energy and CO2e", factory=EnergyConfig)
    task: Any = arg(MISSING, "the task (hydra group `task`)")
    model: Any = arg(MISSING, "the model and its preset (hydra group `model`)")
    criterion: Any = arg(MISSING, "the training objective (hydra group `criterion`)")
    optimizer: Any = arg(MISSING, "the optimizer (hydra group `optimizer`)")
    lr_scheduler: Any = arg(MISSING, "the learning-rate schedule (hydra group `lr_scheduler`)")
