"""``seqkit-score hyp=FILE ref=FILE [metrics=[bleu,chrf,ter]] ...``: sacreBLEU scores with signatures.

``hyp`` may be ``seqkit-generate`` output; then the D- lines are scored and, without ``ref=``,
the T- lines are the references. Classification output (L- lines) and CoNLL tagging columns
are scored with accuracy/macro-F1/MCC and conlleval's entity F1. See :mod:`seqkit.scoring`.
"""

from __future__ import annotations

from typing import List, Optional

from seqkit.cli.common import ConfigBuilder, parse_argv, run_main, setup_logging
from seqkit.scoring.text import ScoreConfig, format_results, score_files

PROG = "seqkit-score"


def _score(argv: Optional[List[str]]) -> None:
    from omegaconf import OmegaConf

    cfg = parse_argv(ConfigBuilder("score", ScoreConfig), argv, PROG)
    setup_logging()
    cfg = OmegaConf.to_object(cfg)
    results = score_files(cfg)
    print(format_results(results, cfg.output_format), flush=True)


def main(argv: Optional[List[str]] = None) -> None:
    run_main(PROG, lambda: _score(argv))


if __name__ == "__main__":
    main()
