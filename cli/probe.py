"""``seqkit-probe``: linear probes on every layer of a pretraining checkpoint, with control tasks
(``seqkit/analysis/probe.py``); prints the table, writes JSON, a markdown table and a PNG with ``output=``."""

from __future__ import annotations

from typing import List, Optional

from seqkit.analysis.probe import ProbeConfig
from seqkit.cli.common import ConfigBuilder, parse_argv, run_main, setup_logging

PROG = "seqkit-probe"


def probe(argv: Optional[List[str]] = None) -> None:
    import importlib.util
    import logging
    import os

    from omegaconf import OmegaConf

    import seqkit
    from seqkit.analysis.probe import run, table_markdown

    cfg = OmegaConf.to_object(parse_argv(ConfigBuilder("probe", ProbeConfig), argv, PROG))
    setup_logging()
    seqkit.import_builtin_components()
    result = run(cfg)
    print(table_markdown(result), end="")
    if cfg.output:
        if importlib.util.find_spec("matplotlib") is None:
            logging.getLogger("seqkit.probe").info("no PNG: matplotlib is not installed (pip install 'seqkit[plot]')")
            return
        from seqkit.analysis.plot import write_probe

        write_probe(os.path.splitext(cfg.output)[0] + ".png", result)


def main(argv: Optional[List[str]] = None) -> None:
    run_main(PROG, lambda: probe(argv))


if __name__ == "__main__":
    main()
