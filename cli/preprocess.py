"""``seqkit-preprocess``: raw parallel text -> tokenizer, dictionaries and binarized splits.

    seqkit-preprocess source_lang=de target_lang=en trainpref=raw/train validpref=raw/valid \\
        testpref=raw/test destdir=data-bin tokenizer=sentencepiece_bpe tokenizer.vocab_size=8000 workers=2
"""

from __future__ import annotations

import sys
from typing import List, Optional

from seqkit.cli.common import ConfigBuilder, parse_argv, run_main, setup_logging
from seqkit.preprocess.text import PreprocessConfig, preprocess

builder = ConfigBuilder("preprocess", PreprocessConfig)


def _quote_prefix_lists(argv: List[str]) -> List[str]:
    """``validpref=a,b`` as fairseq users write it; hydra would read an unquoted comma as a sweep."""
    out = []
    for a in argv:
        key, eq, value = a.partition("=")
        if eq and key in ("validpref", "testpref") and "," in value and not any(c in value for c in "'\"[]"):
            a = f"{key}='{value}'"
        out.append(a)
    return out


def _run(argv: Optional[List[str]]) -> None:
    from omegaconf import OmegaConf

    args = _quote_prefix_lists(list(sys.argv[1:] if argv is None else argv))
    cfg = parse_argv(builder, args, "seqkit-preprocess")
    setup_logging()
    preprocess(OmegaConf.to_object(cfg))


def main(argv: Optional[List[str]] = None) -> None:
    run_main("seqkit-preprocess", lambda: _run(argv))


if __name__ == "__main__":
    main()
