"""Names a user may type for a seqkit setting: fairseq's keys and flags, and near misses.

:func:`suggest` gives the "did you mean" of an unknown key: fairseq's name mapped to seqkit's
(``optimization.lr`` -> ``optimizer.lr``), else the closest valid keys by spelling (difflib).
"""

from __future__ import annotations

import difflib
from typing import Iterable, Optional

# fairseq's dotted config keys (and their --flag forms, dashes for underscores) -> seqkit's
FAIRSEQ = {
    "optimization.lr": "optimizer.lr",
    "lr": "optimizer.lr",
    "optimizer.adam_betas": "optimizer.betas",
    "optimizer.adam_eps": "optimizer.eps",
    "adam_betas": "optimizer.betas",
    "weight_decay": "optimizer.weight_decay",
    "optimization.sentence_avg": "criterion",
    "max_tokens": "dataset.max_tokens",
    "batch_size": "dataset.max_sentences",
    "dataset.batch_size": "dataset.max_sentences",
    "max_sentences": "dataset.max_sentences",
    "dataset.batch_size_valid": "dataset.max_tokens_valid",
    "max_tokens_valid": "dataset.max_tokens_valid",
    "dataset.num_workers": "dataset.prefetch",
    "num_workers": "dataset.prefetch",
    "skip_invalid_size_inputs_valid_test": "dataset.skip_invalid_size_inputs",
    "max_epoch": "optimization.max_epoch",
    "max_update": "optimization.max_update",
    "stop_time_hours": "optimization.stop_time_hours",
    "update_freq": "optimization.update_freq",
    "clip_norm": "optimization.clip_norm",
    "patience": "optimization.patience",
    "checkpoint.patience": "optimization.patience",
    "save_dir": "checkpoint.save_dir",
    "restore_file": "checkpoint.restore_file",
    "keep_last_epochs": "checkpoint.keep_last_epochs",
    "no_epoch_checkpoints": "checkpoint.no_epoch_checkpoints",
    "best_checkpoint_metric": "checkpoint.best_checkpoint_metric",
    "maximize_best_checkpoint_metric": "checkpoint.maximize_best_checkpoint_metric",
    "checkpoint.reset_optimizer": "checkpoint.reset",
    "checkpoint.reset_dataloader": "checkpoint.reset",
    "checkpoint.reset_lr_scheduler": "checkpoint.reset",
    "checkpoint.reset_meters": "checkpoint.reset",
    "reset_optimizer": "checkpoint.reset",
    "common.fp16": "common.precision=fp16",
    "common.bf16": "common.precision=bf16",
    "fp16": "common.precision=fp16",
    "bf16": "common.precision=bf16",
    "common.memory_efficient_fp16": "common.precision=fp16 common.param_dtype=fp16",
    "common.memory_efficient_bf16": "common.precision=bf16 common.param_dtype=bf16",
    "common.cpu": "common.device=cpu",
    "cpu": "common.device=cpu",
    "common.no_progress_bar": "common.log_format=simple",
    "no_progress_bar": "common.log_format=simple",
    "seed": "common.seed",
    "log_interval": "common.log_interval",
    "log_format": "common.log_format",
    "user_dir": "common.user_dir",
    "tensorboard_logdir": "common.tensorboard_logdir",
    "distributed_training": "distributed",
    "distributed_training.ddp_backend": "distributed.strategy",
    "ddp_backend": "distributed.strategy",
    "warmup_updates": "lr_scheduler.warmup_updates",
    "warmup_init_lr": "lr_scheduler.warmup_init_lr",
    "label_smoothing": "criterion.label_smoothing",
    "arch": "model",
    "model._name": "model",
    "task._name": "task",
    "source_lang": "task.source_lang",
    "target_lang": "task.target_lang",
    "eval_bleu": "task.eval_bleu",
    "beam": "generation.beam",
    "nbest": "generation.nbest",
    "lenpen": "generation.lenpen",
    "sampling": "generation.sampling",
    "sampling_topk": "generation.sampling_topk",
    "sampling_topp": "generation.sampling_topp",
    "max_len_a": "generation.max_len_a",
    "max_len_b": "generation.max_len_b",
    "print_alignment": "generation.print_alignment",
    "no_repeat_ngram_size": "generation.no_repeat_ngram_size",
    "generation.batch_size": "batch_size",
    "dataset.gen_subset": "gen_subset",
    "common_eval.path": "path",
    "common_eval.results_path": "results_path",
}


def fairseq_name(key: str) -> Optional[str]:
    """seqkit's key (or ``key=value`` setting) for fairseq's ``key`` or ``--flag``, if there is one."""
    key = key.lstrip("-").replace("-", "_") if key.startswith("--") else key
    if key in FAIRSEQ:
        return FAIRSEQ[key]
    if key.startswith("distributed_training."):
        return "distributed." + key.split(".", 1)[1]
    return None


def suggest(key: str, valid: Iterable[str]) -> str:
    """``"; did you mean X?"`` for an unknown ``key`` (fairseq's name first), or ""."""
    valid = list(valid)
    mapped = fairseq_name(key)
    if mapped is None:  # a misspelt group first (optimisation.lr -> optimization.lr), then fairseq's name of that
        head, _, tail = key.partition(".")
        heads = difflib.get_close_matches(head, sorted({v.split(".")[0] for v in valid} | {k.split(".")[0] for k in FAIRSEQ}),
                                          n=1, cutoff=0.7)
        fixed = f"{heads[0]}.{tail}" if heads and tail else None
        if fixed in valid:
            return f"; did you mean {fixed}?"
        mapped = fairseq_name(fixed) if fixed else None
        key = fixed if mapped else key
    if mapped is not None and "=" in mapped:
        return f"; fairseq's {key} is {mapped} in seqkit"
    if mapped is not None:
        return f"; did you mean {mapped}? (fairseq's {key})"
    pool = [v for v in valid if ("." in v) == ("." in key)]  # a field for a field, a group for a group
    close = difflib.get_close_matches(key, pool, n=2, cutoff=0.75)
    return f"; did you mean {' or '.join(close)}?" if close else ""
