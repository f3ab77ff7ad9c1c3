"""The one trainer for every task: explicit epoch / update loop, checkpoints, validation.

Follow a batch: ``Trainer.run`` -> ``_epoch`` takes ``update_freq`` batches from the task's
dataset -> ``train_step`` runs the criterion on each (under autocast), backward with the loss
divided by the update's total token count, clips, sets the LR from the schedule, steps.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

import numpy as np
import torch

from seqkit.adapt.modes import parameter_line
from seqkit.core import checkpoints
from seqkit.core.checkpoints import check_resumed_model, check_saved_keys, saved_keys
from seqkit.core.config import check_compile, to_plain, with_added_fields
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import LR_SCHEDULERS, OPTIMIZERS, TASKS
from seqkit.core.settings import refuse_unread
from seqkit.data.packing import pack_training_set
from seqkit.data.prefetch import Prefetcher, to_device
from seqkit.models.init_from import apply_init_from
from seqkit.models.modules.attention import uses_sdpa
from seqkit.models.modules.kernels import use_attention_kernels
from seqkit.models.modules.pretrained_embeddings import apply_word_vectors
from seqkit.optim.groups import param_groups
from seqkit.training.ahead import Ahead
from seqkit.training.compile import loss_function
from seqkit.training.config import TrainConfig
from seqkit.training import distributed
from seqkit.training.distributed import DistInfo, all_reduce_sum
from seqkit.training.energy import EnergyMeter, energy_line
from seqkit.training.master_weights import MasterWeights, resolve_param_dtype
from seqkit.training.precision import Precision
from seqkit.training.in_forward import check_in_forward, step_in_forward
from seqkit.training.settings import check_length_multiple, train_reads
from seqkit.training.shards import shard_count, shard_line, shard_of
from seqkit.training.progress import Meter, Progress, ShapeCounter, drop_records_after, read_floats

log = logging.getLogger("seqkit.train")
TIME_STOP = "reached stop_time_hours"  # the stop reason of the clock budget


def device_batching(prefetch: int, multiple: int, device: torch.device) -> Tuple[int, int]:
    """(batches collated ahead, the multiple batch lengths are padded to) from ``dataset.prefetch`` and
    ``dataset.required_seq_len_multiple``, their defaults (-1, 0) chosen for ``device``: on a GPU 4
    batches collated in a thread and lengths in multiples of 8 (few distinct shapes for its kernels
    and plans); on a CPU 0 and 1 (its cores are busy computing, and a shape costs it nothing)."""
    on_gpu = torch.device(device).type == "cuda"
    return (prefetch if prefetch >= 0 else (4 if on_gpu else 0)), (multiple or (8 if on_gpu else 1))


class Trainer:
    def __init__(self, cfg: TrainConfig, dist: Optional[DistInfo] = None, make_generator: Any = None,
                 given: Optional[FrozenSet[str]] = None):
        """``given``: the keys of seqkit-train's command line; one the run would not read is refused."""
        self.cfg, self.dist = cfg, dist or DistInfo()
        self.device = self.dist.device
        check_compile(cfg.common, "seqkit-train")  # a compile setting it would ignore: one line, before any loading
        if cfg.common.threads > 0:
            torch.set_num_threads(cfg.common.threads)
        torch.manual_seed(cfg.common.seed)
        self.shards = shard_count(cfg.task, TASKS.builder(cfg.task.name))  # task.data=dir1:dir2:...: one an epoch
        self.task = TASKS.build(cfg.task)
        self.model = self.task.build_model(cfg.model).to(self.device)
        self.criterion = self.task.build_criterion(cfg.criterion)
        d = cfg.dataset  # the training set and epoch 1's batches, made in a thread meanwhile (training/ahead.py)
        self._ahead = Ahead(lambda: self.task.load_dataset(d.train_subset), (d.max_tokens, d.max_sentences,
                            cfg.common.seed, 1)) if self.shards == 1 and not d.pack else None
        if given is not None:  # before anything is written
            refuse_unread(given, train_reads(cfg, self.dist.world_size, uses_sdpa(self.model)))
        if cfg.dataset.required_seq_len_multiple:
            check_length_multiple(cfg.dataset.required_seq_len_multiple, self.model.max_positions())
        metric, names = cfg.checkpoint.best_checkpoint_metric, getattr(self.task, "metric_names", None)
        if names is not None and metric not in names():  # fail now, not after the first epoch
            raise SeqkitError(f"checkpoint.best_checkpoint_metric={metric!r} is not computed by task "
                              f"{cfg.task.name}; valid: {', '.join(names())}")
        # pretrained word vectors (model.embed_path...): read on a fresh start only, frozen when asked
        apply_word_vectors(self.model, cfg.model, self.task, cfg.checkpoint, cfg.common.seed)
        apply_init_from(self.model, cfg.model, self.task, cfg.checkpoint)  # model.init_from: a pretraining checkpoint
        c = cfg.common
        self.precision = Precision(c.precision, self.device, c.fp16_init_loss_scale, c.fp16_scale_window,
                                   c.fp16_min_loss_scale)
        # bf16/fp16 weights with fp32 masters in the optimizer: made before DDP sees the parameters
        decay = getattr(cfg.optimizer, "weight_decay", 0.0)
        dtype = resolve_param_dtype(c.param_dtype, c.precision, self.device, self.model, cfg.optimizer.name,
                                    cfg.distributed.strategy, self.dist.world_size)
        self.master = MasterWeights(self.model, param_groups(self.model, decay), dtype) if dtype is not None else None
        self.precision.weights_cast = self.master is not None
        # wrap before building the optimizer: FSDP replaces the parameters with sharded ones
        self.train_model = distributed.wrap_model(self.model, cfg.distributed.strategy, self.dist)
        groups = self.master.groups if self.master is not None else param_groups(self.model, decay)
        self.optimizer = OPTIMIZERS.build(cfg.optimizer, groups)
        self.in_forward = getattr(self.optimizer, "in_forward", False)  # optimizer=pair_sgd: the model applies it
        if self.in_forward:
            check_in_forward(self.model, cfg, self.dist.world_size)
        self.scheduler = LR_SCHEDULERS.build(cfg.lr_scheduler, cfg.optimizer.lr, cfg.optimization.max_update)
        self.make_generator = make_generator
        self.prefetch, self.length_multiple = device_batching(cfg.dataset.prefetch,
                                                              cfg.dataset.required_seq_len_multiple, self.device)
        self.loss_fn = loss_function(self.criterion, self.train_model, True, mode=c.compile_mode) if c.compile else None
        self._compiling = c.compile  # the first update compiles: its time is logged once
        self._outcomes: List[torch.Tensor] = []  # `stepped` of the updates not yet read (see settle)
        self._last_gnorm: Optional[torch.Tensor] = None
        # position in training; all of it is saved and restored. batch_offset counts the epoch's
        # batches consumed by all ranks together, so a run can resume with another world size
        self.epoch, self.num_updates, self.batch_offset = 1, 0, 0
        self.best: Optional[float] = None
        self.bad_validations = 0
        self.train_seconds = 0.0
        self.energy: Optional[EnergyMeter] = None  # started by run(), from the checkpoint's totals
        self._energy_base: Optional[Dict[str, float]] = None
        self.bad_updates_in_row = 0
        self.oom_skipped = 0
        self.epoch_batches = 0  # the current epoch's batches over all ranks (the share seen at a stop)
        self.interrupted: Optional[str] = None  # name of the signal that asked us to stop
        n_params = sum(p.numel() for p in self.model.parameters())
        log.info("model %s: %s parameters; criterion %s; optimizer %s; precision %s; device %s; world size %d",
                 cfg.model.name, f"{n_params:,}", cfg.criterion.name, cfg.optimizer.name, self.precision.mode,
                 self.device, self.dist.world_size)
        log.info("%s", parameter_line(self.model))  # the same line for every model and adaptation mode
        kernels = use_attention_kernels(c.attention_kernels, self.device)  # the setting is checked for every model
        if uses_sdpa(self.model):  # a BiLSTM or CBOW runs no attention kernel: no line about them
            log.info("%s", kernels)
        groups = self.optimizer.param_groups
        if any(g["lr_scale"] != 1.0 or g["from_epoch"] > 1 or g["from_update"] > 0 for g in groups):
            log.info("parameter groups: %s", "; ".join(
                f"{g['name']} lr x{g['lr_scale']:.3g} from " + (f"update {g['from_update']}" if g["from_update"]
                                                                  else f"epoch {g['from_epoch']}") for g in groups))

    # -- checkpoints -----------------------------------------------------------------------------
    def state_dict(self, energy: Optional[Dict[str, float]] = None) -> Dict[str, Any]:
        """Everything a checkpoint holds (a collective under FSDP: every rank calls it); of a
        parameter-efficient model only the entries it trains (``saved_keys``); ``energy``: the
        run's energy totals (summed over ranks, see :meth:`save`), else this process's."""
        if self.master is not None:  # fp32 weights from the masters, optimizer state by parameter names
            model_state = self.master.model_state(self.model)
            optimizer_state = self.master.optimizer_state(self.optimizer)
        else:
            model_state, optimizer_state = distributed.full_state(self.model, self.optimizer)
        keep = saved_keys(self.model)
        if keep is not None:
            model_state = {k: v for k, v in model_state.items() if k in keep}
        return {
            "format": checkpoints.FORMAT_VERSION,
            "cfg": to_plain(self.cfg),
            "task_state": self.task.checkpoint_state(),
            "model": model_state,
            "optimizer": optimizer_state,
            "scaler": self.precision.state_dict(),
            "train_state": {
                "epoch": self.epoch,
                "num_updates": self.num_updates,
                "batch_offset": self.batch_offset,
                "best": self.best,
                "bad_validations": self.bad_validations,
                "train_seconds": self.train_seconds,
                "energy": energy if energy is not None else self._energy_totals(local=True),
            },
            "rng": checkpoints.rng_state(),
            # what a model carries from one batch to the next (Transformer-XL's memory): resumed as it was
            "carry": self.model.carry_state() if hasattr(self.model, "carry_state") else None,
        }

    def load_state_dict(self, state: Dict[str, Any], weights_only: bool = False) -> None:
        if not weights_only:
            check_resumed_model(with_added_fields(state["cfg"].get("model", {}), self.cfg.model),
                                to_plain(self.cfg.model), state.get("_path", "checkpoint"))
        keep = saved_keys(self.model)
        check_saved_keys(keep, state["model"], state.get("_path", "checkpoint"))
        try:
            if self.master is not None:
                self.master.load_model_state(self.model, state["model"], strict=keep is None)
                if not weights_only:
                    self.master.load_optimizer_state(self.optimizer, state["optimizer"])
            else:
                distributed.load_full_state(self.model, None if weights_only else self.optimizer, state["model"],
                                            None if weights_only else state["optimizer"], strict=keep is None)
        except (RuntimeError, KeyError, ValueError) as e:
            first = str(e).splitlines()[0]
            raise SeqkitError(f"checkpoint does not fit this model: {first}") from None
        if weights_only:
            return
        self.precision.load_state_dict(state.get("scaler"))
        ts = state["train_state"]
        self.epoch, self.num_updates, self.batch_offset = ts["epoch"], ts["num_updates"], ts["batch_offset"]
        self.best, self.bad_validations = ts["best"], ts["bad_validations"]
        self.train_seconds = ts.get("train_seconds", 0.0)
        self._energy_base = ts.get("energy")  # a resumed run adds its energy to these totals
        checkpoints.set_rng_state(state["rng"])
        if hasattr(self.model, "load_carry_state"):
            self.model.load_carry_state(state.get("carry"))

    def save(self, end_of_epoch: bool, valid: Optional[Dict[str, float]] = None, new_best: bool = False) -> None:
        ck = self.cfg.checkpoint
        self.settle()  # a checkpoint holds exact counters
        if ck.no_save:
            return
        sharded = self.cfg.distributed.strategy == "fsdp" and self.dist.world_size > 1
        energy = self._energy_totals()  # summed over ranks: every rank calls it
        state = self.state_dict(energy) if (sharded or self.dist.is_main) else None  # FSDP gathers on every rank
        if not self.dist.is_main:
            return
        os.makedirs(ck.save_dir, exist_ok=True)
        paths = [os.path.join(ck.save_dir, "checkpoint_last.pt")]
        done_epoch = self.epoch - 1 if end_of_epoch else None  # self.epoch already points at the next one
        if done_epoch is not None and not ck.no_epoch_checkpoints and done_epoch % ck.save_interval == 0:
            paths.append(os.path.join(ck.save_dir, f"checkpoint{done_epoch}.pt"))
        if new_best:
            paths.append(os.path.join(ck.save_dir, "checkpoint_best.pt"))
        t0 = time.perf_counter()
        checkpoints.write(paths, state)
        if done_epoch is not None:
            checkpoints.prune_epoch_checkpoints(ck.save_dir, ck.keep_last_epochs)
        log.info("saved %s (epoch %d, %d updates) in %.1fs", ", ".join(os.path.basename(p) for p in paths),
                 self.epoch if done_epoch is None else done_epoch, self.num_updates, time.perf_counter() - t0)

    def _energy_totals(self, local: bool = False) -> Optional[Dict[str, float]]:
        """The checkpoint's energy totals plus this run's (over all ranks: a collective unless ``local``)."""
        if self.energy is None:
            return self._energy_base
        return self.energy.totals(None if local else self.dist)

    def maybe_resume(self) -> None:
        ck = self.cfg.checkpoint
        state = None if ck.reset else checkpoints.load_latest(ck.save_dir)
        if state is not None:
            self.load_state_dict(state)
            log.info("resumed at epoch %d, update %d, batch %d of the epoch", self.epoch, self.num_updates, self.batch_offset)
            if self.dist.is_main:  # what a killed run logged after this checkpoint is logged again
                drop_records_after(os.path.join(ck.save_dir, "train_log.jsonl"), self.num_updates)
        elif ck.restore_file:
            state = checkpoints.load(ck.restore_file)
            self.load_state_dict(state, weights_only=True)
            log.info("initialized the model from %s", ck.restore_file)
            saved, now = state["cfg"].get("task", {}).get("eos_prefix"), getattr(self.cfg.task, "eos_prefix", None)
            if saved is not None and now is not None and saved != now:  # e.g. an imported GPT-2 trained on further
                log.warning("%s read its text with task.eos_prefix=%s and this run has task.eos_prefix=%s: set "
                            "task.eos_prefix=%s to go on reading the ids it was trained on", ck.restore_file,
                            str(saved).lower(), str(now).lower(), str(saved).lower())

    # -- one update -------------------------------------------------------------------------------
    def train_step(self, samples: List[Dict[str, Any]]) -> Dict[str, Any]:
        """One optimizer update over ``samples`` (the ``update_freq`` batches of this rank).

        Nothing here reads a device value on the host: losses, counts, the gradient norm and
        whether the step was taken stay on the device (a non-finite step is skipped there, see
        ``Precision.step``); ``num_updates`` counts the update as taken until :meth:`settle`
        reads the outcomes, once per log line and before every save or stop."""
        if self.in_forward:
            return step_in_forward(self, samples)
        started = time.perf_counter()
        self.train_model.train()
        self.optimizer.zero_grad(set_to_none=True)
        if self.master is not None:
            self.master.zero_grad()  # in place: the model's .grad are views of one buffer per group
        # dividing by the update's total sample size (all batches, all ranks) makes the gradient a
        # per-token mean however the update is split; DDP/FSDP average over ranks, hence * world_size
        # (sample_size: the scored targets where they differ from the tokens, e.g. one label a sentence)
        local = float(sum(s.get("sample_size", s["ntokens"]) for s in samples))
        scale = self._loss_scale(local)
        logs: Dict[str, Any] = {}
        for i, sample in enumerate(samples):
            sample = to_device(sample, self.device)
            sync = i == len(samples) - 1 or self.dist.world_size == 1
            try:
                with distributed.grad_sync(self.train_model, sync):
                    with self.precision.autocast():
                        if self.loss_fn is not None:
                            loss, _, logging_output = self.loss_fn(sample)
                        else:
                            loss, _, logging_output = self.criterion(self.train_model, sample)
                    self.precision.backward(loss * scale)
            except torch.OutOfMemoryError:
                if self.dist.world_size > 1:  # the other ranks are waiting in a collective: stop them all
                    raise SeqkitError(f"out of memory on a batch of shape {tuple(sample['target'].shape)}; "
                                      "lower dataset.max_tokens") from None
                return self._skip_oom(sample)
            for k, v in logging_output.items():
                logs[k] = logs[k] + v if k in logs else v
        if self.master is not None:
            self.master.grads_to_masters()  # one fp32 cast per group
        for group in self.optimizer.param_groups:  # gradual unfreezing: groups not yet in training
            if group.get("from_epoch", 1) > self.epoch or group.get("from_update", 0) > self.num_updates:
                for p in group["params"]:
                    p.grad = None  # (computed, and under DDP reduced, then dropped: every rank alike)
        params = self.master.masters if self.master is not None else self.model.parameters()
        gnorm = self.precision.unscale_and_clip(self.optimizer, params, self.cfg.optimization.clip_norm)
        lr = self.scheduler.lr_at(self.num_updates)
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)
        stepped = self.precision.step(self.optimizer, gnorm)
        if self.master is not None:
            self.master.masters_to_model()  # one cast per group (a skipped step copies back what was there)
        self.num_updates += 1  # counted as taken until settle() reads `stepped`
        self._outcomes.append(stepped)
        self._last_gnorm = gnorm
        logs["gnorm"], logs["lr"], logs["stepped"] = gnorm, lr, stepped
        if self._compiling:  # host time: the compiling is the host's; the GPU's work is still queued
            log.info("common.compile: first update compiled in %.1f s", time.perf_counter() - started)
            self._compiling = False
        return logs

    def _loss_scale(self, local: float) -> Any:
        """world_size / the update's sample size over all ranks: a float for one process; under
        DDP a device tensor (summed by a collective that the host does not wait for)."""
        if self.dist.world_size == 1:
            return 1.0 / max(local, 1.0)
        total = torch.tensor(local, dtype=torch.float32, device=self.device)
        torch.distributed.all_reduce(total)
        return self.dist.world_size / total.clamp(min=1.0)

    def settle(self) -> None:
        """Read the outcomes of the updates since the last call (one host read) and correct the
        counters: a skipped update did not count, ``max_bad_updates`` non-finite ones in a row
        stop training, fp16 overflows log a warning and stop at the loss-scale floor."""
        if not self._outcomes:
            return
        outcomes = [v > 0.5 for v in read_floats(self._outcomes)]
        self._outcomes = []
        skipped = outcomes.count(False)
        self.num_updates -= skipped
        warning = self.precision.count_skipped(skipped)
        if warning:
            log.warning(warning)
        if self.precision.mode == "fp16":  # overflows have their own limit: the loss-scale floor
            return
        for ok in outcomes:
            self.bad_updates_in_row = 0 if ok else self.bad_updates_in_row + 1
            if self.bad_updates_in_row >= self.cfg.optimization.max_bad_updates:
                raise SeqkitError(
                    f"{self.bad_updates_in_row} updates in a row had a non-finite loss or gradient (at update "
                    f"{self.num_updates}); try a lower optimizer.lr, optimization.clip_norm, or common.precision=fp32"
                )

    def _skip_oom(self, sample: Dict[str, Any]) -> Dict[str, float]:
        """Drop this update after an out-of-memory error, releasing what it held."""
        self.oom_skipped += 1
        log.warning("out of memory on a batch of shape %s: update skipped (%d so far); consider a lower "
                    "dataset.max_tokens", tuple(sample["target"].shape), self.oom_skipped)
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        zero = torch.zeros(())
        return {"gnorm": zero, "lr": self.scheduler.lr_at(self.num_updates), "stepped": zero}

    def _load(self, split: str, training: bool = False) -> Any:
        """The task's dataset of ``split``, padding its batches to ``length_multiple`` (not past the
        model's positions); for ``training`` in packed rows with ``dataset.pack`` (seqkit/data/packing.py),
        from the epoch's shard when task.data names shards (seqkit/training/shards.py)."""
        sharded = training and self.shards > 1
        if sharded:
            dataset = self.task.load_dataset(split, epoch=self.epoch)
        else:
            dataset = self._ahead.dataset() if training and self._ahead else self.task.load_dataset(split)
        if self.length_multiple > 1 and hasattr(dataset, "length_multiple"):
            dataset.length_multiple = self.length_multiple
            dataset.length_cap = min(p for p in self.model.max_positions() if p)
        d = self.cfg.dataset
        if training and d.pack:
            dataset = pack_training_set(dataset, self.model, d.max_tokens, d.max_sentences, d.pack_length,
                                        self.criterion)
        return dataset

    # -- validation -------------------------------------------------------------------------------
    @torch.no_grad()
    def validate(self) -> Optional[Dict[str, float]]:
        split = self.cfg.dataset.valid_subset
        if not split or not self.task.split_exists(split):
            return None
        dataset = self._load(split)
        self.model.eval()
        meter = Meter()
        max_tokens = self.cfg.dataset.max_tokens_valid or self.cfg.dataset.max_tokens
        too_long = dataset.too_long(*self.model.max_positions())
        if len(too_long):
            log.warning("validation skips %d pairs longer than the model's positions", len(too_long))
        batches = dataset.batches(max_tokens, self.cfg.dataset.max_sentences, shuffle=False, exclude=too_long)
        # one autocast region for the whole pass: the weights do not change, so each is cast to
        # bf16/fp16 once (autocast's cache), not again for every batch
        with self.precision.autocast():
            for batch in batches[self.dist.rank :: self.dist.world_size]:
                sample = to_device(dataset.collate(batch), self.device)
                _, _, logging_output = self.criterion(self.model, sample)
                meter.add(logging_output)
        # every logged count is summed over batches and ranks (a rank with no batch adds zeros)
        keys = distributed.union_keys(meter.sums, self.dist)
        meter.sums = dict(zip(keys, all_reduce_sum([meter.sums.get(k, 0.0) for k in keys], self.dist)))
        stats = {k: v for k, v in meter.summary().items() if k != "tokens_per_s"}
        stats.update(self._task_metrics(meter.sums))
        if self.dist.is_main and self.make_generator is not None:
            with self.precision.autocast():
                stats.update(self.task.valid_metrics(self.model, dataset, self.make_generator))
        return stats

    def _task_metrics(self, sums: Dict[str, float]) -> Dict[str, float]:
        """Metrics the task derives from summed counts (accuracy, F1, ...); none for translation."""
        reduce = getattr(self.task, "reduce_metrics", None)
        return reduce(sums) if reduce is not None else {}

    def _is_better(self, value: float) -> bool:
        if self.best is None:
            return True
        return value > self.best if self.cfg.checkpoint.maximize_best_checkpoint_metric else value < self.best

    # -- the loop -------------------------------------------------------------------------------------
    def _stop_reason(self) -> Optional[str]:
        if self.interrupted:
            return f"received {self.interrupted}"
        opt = self.cfg.optimization
        if opt.max_update and self.num_updates >= opt.max_update:
            return f"reached max_update {opt.max_update}"
        if opt.stop_time_hours and self.train_seconds >= opt.stop_time_hours * 3600:
            return f"{TIME_STOP} {opt.stop_time_hours}"
        return None

    def _budget_warning(self, stop: Optional[str]) -> Optional[str]:
        """One line when the clock budget stopped the run inside its first epoch, before the first
        end-of-epoch validation: how far it got then depends on the machine's load."""
        if not stop or not stop.startswith(TIME_STOP) or self.epoch > 1:
            return None
        seen = f"{100 * self.batch_offset / self.epoch_batches:.1f}%" if self.epoch_batches else "part"
        return (f"stop_time_hours {self.cfg.optimization.stop_time_hours} reached after {self.num_updates} updates, "
                f"before the first epoch ended: the model has seen {seen} of train; set optimization.max_update "
                "for a figure that does not depend on the machine's load")

    def _train_set(self, loaded: Optional[Tuple[Any, np.ndarray, int]] = None) -> Tuple[Any, np.ndarray, int]:
        """(training set, its examples too long for the model, its shard) of the current epoch:
        ``loaded`` again unless the epoch trains on another shard of a sharded task.data."""
        shard = shard_of(self.epoch, self.shards)
        if loaded is not None and loaded[2] == shard:
            return loaded
        if self.shards > 1:
            log.info("%s", shard_line(self.cfg.task.data, self.epoch))
        train = self._load(self.cfg.dataset.train_subset, training=True)
        max_src, max_tgt = self.model.max_positions()
        too_long = train.too_long(max_src, max_tgt)
        if len(too_long):  # packed rows (dataset.pack) may be shorter than the model's positions
            limit = getattr(train, "length_limit", lambda s, t: f"the model's positions ({s}/{t})")(max_src, max_tgt)
            if not self.cfg.dataset.skip_invalid_size_inputs:
                raise SeqkitError(f"{len(too_long)} training pairs exceed {limit}; "
                                  "set dataset.skip_invalid_size_inputs=true to skip them")
            log.warning("skipping %d training pairs longer than %s", len(too_long), limit)
        return train, too_long, shard

    def run(self) -> Dict[str, Any]:
        cfg = self.cfg
        self.maybe_resume()
        loaded = self._train_set()  # before anything is written: a refusal leaves no folder
        log_file = os.path.join(cfg.checkpoint.save_dir, "train_log.jsonl")
        if self.dist.is_main:
            os.makedirs(cfg.checkpoint.save_dir, exist_ok=True)
        progress = Progress(cfg.common.log_format, log_file, enabled=self.dist.is_main,
                            tensorboard_logdir=cfg.common.tensorboard_logdir)
        last_valid: Optional[Dict[str, float]] = None
        stop = self._stop_reason()
        self.energy = EnergyMeter(cfg.energy, self.device, self._energy_base, self.dist.local_rank)
        previous = self._catch_signals()
        try:
            while not stop and (not cfg.optimization.max_epoch or self.epoch <= cfg.optimization.max_epoch):
                loaded = self._train_set(loaded)
                stop, finished = self._epoch(loaded[0], loaded[1], progress)
                last = bool(stop) or bool(cfg.optimization.max_epoch and self.epoch >= cfg.optimization.max_epoch)
                last_valid = self._end_epoch(progress, finished, last) or last_valid
                if self.cfg.optimization.patience >= 0 and self.bad_validations > self.cfg.optimization.patience:
                    stop = f"no better {cfg.checkpoint.best_checkpoint_metric} for {self.bad_validations} validations (patience)"
                stop = stop or self._stop_reason()  # e.g. a signal that came during validation
            energy = self.energy.record(self._energy_totals())  # every run ends with its energy
            progress.record("energy", {"update": self.num_updates, **energy})
            if self.dist.is_main:
                log.info("%s", energy_line(energy))
        finally:
            self.energy.close()
            progress.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self.interrupted:
            where = os.path.join(cfg.checkpoint.save_dir, "checkpoint_last.pt")
            log.warning("stopped by %s after update %d; saved %s: run the same command again to resume",
                        self.interrupted, self.num_updates, where)
            return {"num_updates": self.num_updates, "epoch": self.epoch, "interrupted": self.interrupted,
                    "energy": energy}
        log.info("done: %s; %d updates, best %s %s", stop or "reached max_epoch", self.num_updates,
                 cfg.checkpoint.best_checkpoint_metric, self.best)
        warning = self._budget_warning(stop)
        if warning:
            log.warning("%s", warning)
        return {"num_updates": self.num_updates, "epoch": self.epoch, "best": self.best, "valid": last_valid,
                "energy": energy}

    def _catch_signals(self) -> Dict[int, Any]:
        """SIGTERM/SIGINT (pre-emption, Ctrl-C) finish the current update, then save and stop; a
        second signal acts at once (the default handlers are back after the first)."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

        def handler(signum: int, frame: Any) -> None:
            self.interrupted = signal.Signals(signum).name
            for sig, old in previous.items():
                signal.signal(sig, old)

        for sig in previous:
            signal.signal(sig, handler)
        return previous

    def _epoch(self, train: Any, exclude: np.ndarray, progress: Progress) -> Tuple[Optional[str], bool]:
        """Train until the epoch's batches run out or a stop condition; returns the stop reason and
        whether every batch of the epoch was used (a stop on its last batch still ends the epoch,
        so a resumed run does not validate the same update again)."""
        cfg = self.cfg
        from seqkit.data.batching import shard

        args = (cfg.dataset.max_tokens, cfg.dataset.max_sentences, cfg.common.seed, self.epoch)
        batches = self._ahead.batches(args, exclude) if self._ahead else None
        if batches is None:
            batches = train.batches(*args, shuffle=True, exclude=exclude)
        batches = shard(batches, self.dist.rank, self.dist.world_size)
        uf = cfg.optimization.update_freq
        total_updates = math.ceil(len(batches) / uf)
        world = self.dist.world_size
        self.epoch_batches = len(batches) * world
        local = self.batch_offset // world  # this rank's position in its shard
        if local * world != self.batch_offset:
            log.warning("resuming at global batch %d with world size %d: %d batches are seen again",
                        self.batch_offset, world, self.batch_offset - local * world)
        progress.start_epoch(self.epoch, total_updates, local // uf)
        groups = [batches[i : i + uf] for i in range(local, len(batches), uf)]
        prefetcher = Prefetcher(train.collate, groups, self.prefetch, pin_memory=self.device.type == "cuda")
        meter, shapes = Meter(), ShapeCounter()
        try:
            for samples, batch_stats in prefetcher:
                t0 = time.perf_counter()
                logs = self.train_step(samples)
                local += len(samples)
                self.batch_offset = local * world
                self.train_seconds += time.perf_counter() - t0
                shapes.add(batch_stats)
                meter.add({k: v for k, v in logs.items() if k not in ("gnorm", "lr", "stepped")})
                meter.updates += 1
                progress.step({"lr": f"{logs['lr']:.3g}"})
                if self.num_updates % cfg.common.log_interval == 0:
                    self.settle()
                    gnorm = read_floats([self._last_gnorm])[0] if self._last_gnorm is not None else 0.0
                    stats = {**meter.summary(), **self._task_metrics(meter.sums), "lr": f"{logs['lr']:.3g}"}
                    progress.step(stats, move=False)
                    progress.record("train", {"epoch": self.epoch, "update": self.num_updates, **stats,
                                              **({} if self.in_forward else {"gnorm": round(gnorm, 3)}),
                                              "train_wall": round(self.train_seconds),
                                              **shapes.summary()})
                    meter.reset()
                    shapes.reset_interval()
                stop = self._stop_reason()
                if stop and not self.interrupted:  # the count may include skipped updates: read them first
                    self.settle()
                    stop = self._stop_reason()
                if stop:
                    return stop, local >= len(batches)
                if cfg.checkpoint.save_interval_updates and self.num_updates % cfg.checkpoint.save_interval_updates == 0:
                    self.save(end_of_epoch=False)
        finally:
            prefetcher.close()
        log.info("epoch %d: %s", self.epoch, ", ".join(f"{k} {v}" for k, v in shapes.epoch_summary().items()))
        return None, True

    def _end_epoch(self, progress: Progress, epoch_done: bool, last: bool = True) -> Optional[Dict[str, float]]:
        """Validate and save, at the end of every ``checkpoint.save_interval``-th epoch and of the run
        (``last``; a stop inside an epoch included); between them only the epoch count moves on."""
        progress.end_epoch()
        if self.interrupted:  # leave fast: save where we are, validate after resuming
            self.save(end_of_epoch=False)
            return None
        between = epoch_done and not last and self.epoch % self.cfg.checkpoint.save_interval != 0
        valid = None if between else self.validate()
        new_best = False
        if valid is not None:
            metric = self.cfg.checkpoint.best_checkpoint_metric
            if metric not in valid:
                raise SeqkitError(f"checkpoint.best_checkpoint_metric={metric!r} is not computed; have: {', '.join(valid)}")
            new_best = self._is_better(valid[metric])
            if new_best:
                self.best, self.bad_validations = valid[metric], 0
            else:
                self.bad_validations += 1
            progress.record("valid", {"epoch": self.epoch, "update": self.num_updates, **valid, f"best_{metric}": self.best})
        if epoch_done:
            self.epoch += 1
            self.batch_offset = 0
        if not between:
            self.save(end_of_epoch=epoch_done, valid=valid, new_best=new_best or valid is None)
        return valid
