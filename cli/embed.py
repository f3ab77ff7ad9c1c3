"""``seqkit-embed``: sentence vectors of a checkpoint (``seqkit/analysis/sentence_vectors.py``):
``input=FILE output=FILE.npy`` writes one vector per line; ``query=TEXT`` (or ``queries=FILE``)
with ``corpus=FILE k=5`` prints each query's nearest corpus sentences with their cosines. Word
vectors (``seqkit/analysis/word_vectors.py``): ``words="a b" k=10`` prints each word's nearest
words, ``analogy=a:b::c`` the answers to a:b::c:?, ``analogies=FILE`` the accuracy per section of
a questions-words.txt file, ``export=FILE`` writes word2vec's text format."""

from __future__ import annotations

from typing import List, Optional

from seqkit.analysis.sentence_vectors import EmbedConfig
from seqkit.cli.common import ConfigBuilder, parse_argv, run_main, setup_logging

PROG = "seqkit-embed"


def embed(argv: Optional[List[str]] = None) -> None:
    from omegaconf import OmegaConf

    import seqkit
    from seqkit.analysis.sentence_vectors import run
    from seqkit.core.settings import given

    cfg = OmegaConf.to_object(parse_argv(ConfigBuilder("embed", EmbedConfig), argv, PROG))
    setup_logging()
    seqkit.import_builtin_components()
    run(cfg, given())


def main(argv: Optional[List[str]] = None) -> None:
    run_main(PROG, lambda: embed(argv))


if __name__ == "__main__":
    main()
