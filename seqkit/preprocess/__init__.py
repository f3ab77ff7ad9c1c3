"""``seqkit-preprocess``: raw text -> tokenizer, dictionaries and memory-mapped splits in a data folder.

- :mod:`~seqkit.preprocess.text`: parallel and monolingual text (translation, language
  modelling), and ``preprocess(cfg)``, the entry point for every task;
- :mod:`~seqkit.preprocess.labelled`: classification (single sentences, pairs) and tagging (CoNLL);
- :mod:`~seqkit.preprocess.common`: what both share: ``PreprocessConfig``, split names, tokenizer
  training, the staged output folder.

The folder layouts they write are read by :mod:`seqkit.tasks` and described in :mod:`seqkit.data`.
"""
