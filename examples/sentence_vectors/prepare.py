"""WikiText-2 as the sentence-vector tasks read it: one sentence per line, an empty line between articles.

    python examples/sentence_vectors/prepare.py SRC_DIR OUT_DIR

SRC_DIR holds WikiText's train.txt, valid.txt and test.txt (``python examples/corpus.py wikitext2``
prints it); OUT_DIR gets the three files in the new layout and prints one line per split (sentences,
articles). The rules (seqkit/data/sentence_order.py): an article starts at a `` = Title = `` line;
titles, section headings and blank lines are dropped; a line is cut into sentences after every
token ``.``, ``?`` or ``!``.
"""
from __future__ import annotations

import os
import sys

from seqkit.core.io import atomic_write_text, read_lines
from seqkit.data.sentence_order import wikitext_sentences


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        sys.exit("usage: python examples/sentence_vectors/prepare.py SRC_DIR OUT_DIR")
    src, out = argv
    os.makedirs(out, exist_ok=True)
    for split in ("train", "valid", "test"):
        lines = list(wikitext_sentences(read_lines(os.path.join(src, f"{split}.txt"))))
        atomic_write_text(os.path.join(out, f"{split}.txt"), "\n".join(lines) + "\n")
        sentences = sum(1 for line in lines if line)
        print(f"{split}: {sentences} sentences in {len(lines) - sentences + 1} articles -> {out}/{split}.txt")


if __name__ == "__main__":
    main(sys.argv[1:])
