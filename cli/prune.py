"""``seqkit-prune``: remove attention heads (by importance on a validation split) or zero the
smallest weights of a checkpoint, writing an ordinary checkpoint (``seqkit/analysis/prune.py``)."""

from __future__ import annotations

from typing import List, Optional

from seqkit.analysis.prune import PruneConfig
from seqkit.cli.common import ConfigBuilder, parse_argv, run_main, setup_logging

PROG = "seqkit-prune"


def prune(argv: Optional[List[str]] = None) -> None:
    import logging

    from omegaconf import OmegaConf

    import seqkit
    from seqkit.analysis.prune import run

    cfg = OmegaConf.to_object(parse_argv(ConfigBuilder("prune", PruneConfig), argv, PROG))
    setup_logging()
    seqkit.import_builtin_components()
    logging.getLogger("seqkit.prune").info(run(cfg))


def main(argv: Optional[List[str]] = None) -> None:
    run_main(PROG, lambda: prune(argv))


if __name__ == "__main__":
    main()
