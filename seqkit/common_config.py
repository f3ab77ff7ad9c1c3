"""Settings every subcommand that runs a model shares (seqkit-train, seqkit-generate)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from seqkit.dataclass_utils import arg


@dataclass
class CommonConfig:
    seed: int = arg(1, "seed for parameters init, dropout and the batch order")
    precision: str = arg("fp32", "fp32, bf16 (autocast) or fp16 (autocast + dynamic loss scaling, GPU)",
                          choices=("fp32", "bf16", "fp16"))
    fp16_init_loss_scale: float = arg(2.0**15, "fp16: initial loss scale", gt=0)
    fp16_scale_window: int = arg(2000, "fp16: good updates before the loss scale doubles", ge=1)
    fp16_min_loss_scale: float = arg(1e-4, "fp16: stop training when the loss scale falls below this", ge=0)
    device: str = arg("auto", "auto (cuda when available), cpu or cuda", choices=("auto", "cpu", "cuda"))
    threads: int = arg(0, "CPU threads for torch (0: torch's default)", ge=0)
    log_format: str = arg("auto", "auto (progress bar on a TTY, else simple), tqdm, simple or json",
                           choices=("auto", "tqdm", "simple", "json"))
    log_interval: int = arg(50, "updates between training log lines", ge=1)
    user_dir: Optional[str] = arg(None, "folder of plugin modules to import (they register components)")
    attention_kernels: str = arg("auto", "CUDA attention (scaled_dot_product_attention) backends, tried in this order: "
                                         "auto (flash, efficient, math; cuDNN off: it builds a plan for every new batch "
                                         "shape), torch (torch's own choice), or a comma list of flash, efficient, cudnn, "
                                         "math; the CPU's kernels are torch's whatever this says")
    compile: bool = arg(False, "seqkit-train: torch.compile the model and the loss together (fewer kernel launches "
                               "on a GPU); shapes are dynamic: the first update compiles, batches of other shapes "
                               "reuse its graphs (a criterion with state of its own: the model only)")
    compile_mode: str = arg("default", "seqkit-train with common.compile: torch.compile's mode; reduce-overhead adds CUDA "
                                       "graphs (one recorded per batch shape: for static shapes, e.g. a language model's "
                                       "fixed blocks with dataset.max_sentences), max-autotune also tunes its kernels",
                            choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"))
    tensorboard_logdir: Optional[str] = arg(None, "seqkit-train: also write logged train/valid scalars for "
                                                  "TensorBoard into DIR/train and DIR/valid (needs seqkit[tensorboard])")
