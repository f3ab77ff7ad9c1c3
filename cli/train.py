"""``seqkit-train``: compose the config, build the trainer, run it (also under ``torchrun``)."""

from __future__ import annotations

import os
import signal
from typing import List, Optional

import seqkit
from seqkit.cli.common import ConfigBuilder, parse_argv, run_main, setup_logging
from seqkit.core.settings import given
from seqkit.training.config import TrainConfig

PROG = "seqkit-train"


def train(argv: Optional[List[str]] = None) -> dict:
    from omegaconf import OmegaConf

    from seqkit.generation import GenerationConfig, SequenceGenerator
    from seqkit.training import distributed
    from seqkit.training.trainer import Trainer

    seqkit.import_builtin_components()
    cfg = parse_argv(ConfigBuilder("train", TrainConfig), argv, PROG)
    info = distributed.init(cfg.common.device, cfg.distributed.timeout_minutes)
    setup_logging(info.rank)
    cfg = OmegaConf.to_object(cfg)
    if cfg.common.user_dir:  # saved absolute, so seqkit-generate can re-import it from anywhere
        cfg.common.user_dir = os.path.abspath(os.path.expanduser(cfg.common.user_dir))

    def make_generator(beam: int) -> SequenceGenerator:
        return SequenceGenerator(trainer.task.tgt_dict, GenerationConfig(beam=beam))

    try:
        trainer = Trainer(cfg, info, make_generator, given=given())
        result = trainer.run()
    finally:
        distributed.cleanup()
    if result.get("interrupted"):
        # the conventional 128 + signal number, so `train && generate` does not go on
        raise SystemExit(128 + int(getattr(signal, result["interrupted"])))
    return result


def main(argv: Optional[List[str]] = None) -> None:
    run_main(PROG, lambda: train(argv))


if __name__ == "__main__":
    main()
