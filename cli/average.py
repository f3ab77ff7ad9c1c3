"""``seqkit average``: average the weights of a run's last checkpoints into one file."""

from __future__ import annotations

from typing import List, Optional

from seqkit.cli.common import ConfigBuilder, parse_argv, run_main, setup_logging
from seqkit.training.average import AverageConfig

PROG = "seqkit-average"


def average(argv: Optional[List[str]] = None) -> None:
    import logging

    from omegaconf import OmegaConf

    from seqkit.training.average import run

    cfg = OmegaConf.to_object(parse_argv(ConfigBuilder("average", AverageConfig), argv, PROG))
    setup_logging()
    logging.getLogger("seqkit.average").info(run(cfg))


def main(argv: Optional[List[str]] = None) -> None:
    run_main(PROG, lambda: average(argv))


if __name__ == "__main__":
    main()
