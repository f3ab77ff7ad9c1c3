"""``seqkit-export``: write a checkpoint for another inference engine (``format=ctranslate2``) or as a
stand-alone seqkit checkpoint (``format=checkpoint``: LoRA updates merged, a parameter-efficient
run's base included)."""

from __future__ import annotations

from typing import List, Optional

from seqkit.cli.common import ConfigBuilder, parse_argv, run_main, setup_logging
from seqkit.export import ExportConfig

PROG = "seqkit-export"


def export(argv: Optional[List[str]] = None) -> None:
    from omegaconf import OmegaConf

    import seqkit
    from seqkit.export import run

    seqkit.import_builtin_components()
    cfg = OmegaConf.to_object(parse_argv(ConfigBuilder("export", ExportConfig), argv, PROG))
    setup_logging()
    run(cfg)


def main(argv: Optional[List[str]] = None) -> None:
    run_main(PROG, lambda: export(argv))


if __name__ == "__main__":
    main()
