"""Optimizers the model applies itself while it scores a batch (``optimizer=pair_sgd``: word2vec's
per-prediction SGD, as the C code and gensim train). Such an optimizer has ``in_forward = True``;
the trainer then hands the model each update's learning rate (``model.update_in_forward(lr)``),
runs the criterion without autograd and takes no backward pass, gradient norm or optimizer step.
The settings this cannot honour are refused before anything is written (:func:`check_in_forward`)."""

from __future__ import annotations

import math
from typing import Any, Dict, List

import torch

from seqkit.core.errors import SeqkitError
from seqkit.core.settings import was_given
from seqkit.data.prefetch import to_device


def check_in_forward(model: Any, cfg: Any, world_size: int) -> None:
    """An optimizer the model applies while it scores (``optimizer=pair_sgd``) runs one batch an
    update, in one process, in fp32, on a model that has such an update: one line otherwise."""
    name = cfg.optimizer.name
    if not hasattr(model, "update_in_forward"):
        raise SeqkitError(f"optimizer={name} is applied by the model as it scores (word2vec); model "
                          f"{cfg.model.name} has no such update: use optimizer=sgd or adam")
    for bad, why in ((cfg.optimization.update_freq != 1, f"optimization.update_freq={cfg.optimization.update_freq}"),
                     (world_size != 1, f"{world_size} processes"),
                     (cfg.common.precision != "fp32", f"common.precision={cfg.common.precision}"),
                     (cfg.common.compile, "common.compile=true")):
        if bad:
            raise SeqkitError(f"optimizer={name} updates the tables one prediction after another in one "
                              f"process, in fp32, one batch an update; this run asks for {why}: drop it, or use "
                              "optimizer=sparse_adam")
    if was_given("model.sparse"):
        raise SeqkitError(f"model.sparse: optimizer={name} takes no gradients, sparse or dense (the model "
                          "updates its tables as it scores); drop it")
    model.update_in_forward(cfg.optimizer.lr)  # refuses a model that cannot (its kernel setting, its device)
    model.update_in_forward(None)


def step_in_forward(trainer: Any, samples: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One update (``Trainer.train_step`` for such an optimizer): the model gets the update's
    learning rate and trains as the criterion scores ``samples`` (one batch); the logs as
    ``train_step``'s, with no gradient norm. A loss that is not finite stops the run in one line:
    the step cannot be skipped, it is taken as the batch is scored."""
    trainer.train_model.train()
    lr = trainer.scheduler.lr_at(trainer.num_updates)
    for group in trainer.optimizer.param_groups:
        group["lr"] = lr
    logs: Dict[str, Any] = {}
    trainer.model.update_in_forward(lr)
    try:
        with torch.no_grad():
            for sample in samples:
                _, _, logging_output = trainer.criterion(trainer.train_model, to_device(sample, trainer.device))
                for k, v in logging_output.items():
                    logs[k] = logs[k] + v if k in logs else v
    finally:
        trainer.model.update_in_forward(None)
    loss = float(logs["loss"])  # (a CPU value)
    if not math.isfinite(loss):  # the tables took the step already: stop
        raise SeqkitError(f"the loss is {loss} at update {trainer.num_updates + 1}: "
                          f"optimizer={trainer.cfg.optimizer.name} at lr {lr:.3g} diverged; lower optimizer.lr "
                          "(checkpoint_last.pt holds the last saved state)")
    stepped = torch.ones((), device=trainer.device)
    trainer.num_updates += 1  # read back by settle() as every update is
    trainer._outcomes.append(stepped)
    logs["gnorm"], logs["lr"], logs["stepped"] = None, lr, stepped
    return logs
