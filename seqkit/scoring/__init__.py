"""``seqkit-score``: hypotheses against references, and the metrics the tasks count while training.

- :mod:`~seqkit.scoring.text`: sacreBLEU's BLEU, chrF, chrF++ and TER with their signatures, the
  readers of plain text and ``seqkit-generate`` output, and ``score_files(cfg)``, the entry point;
- :mod:`~seqkit.scoring.labels`: classification (``L-`` lines) and CoNLL tagging output;
- :mod:`~seqkit.scoring.metrics`: accuracy, macro-F1, MCC from a confusion matrix and conlleval's
  entity scores; pure Python, used by ``tasks.classification`` during validation too.

No module here imports torch at import time (``seqkit score`` starts fast).
"""
