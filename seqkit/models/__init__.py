"""Models: one file per family, registered in ``seqkit.core.registry.MODELS`` with named presets.

Each model class has a ``kind`` (``seq2seq``, ``classifier``, ``tagger``, ``lm``, ``masked_lm``,
``permutation_lm``) that fixes how a task
builds and calls it; :mod:`seqkit.models.base` describes each interface.

Importing this package registers nothing (so importing a shared layer from ``seqkit.models.modules``
does not import every model); ``seqkit.import_builtin_components()`` imports the modules below.
"""

BUILTIN = ("rnn", "transformer", "convs2s", "bilstm", "cbow", "kim_cnn", "transformer_encoder", "elmo", "lstm_lm",
           "transformer_lm", "transformer_xl", "bert", "electra", "pretrained", "skip_thought", "word2vec", "xlnet")
