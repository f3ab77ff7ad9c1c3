"""Training objectives, registered in ``seqkit.core.registry.CRITERIA``.

A criterion is called as ``criterion(model, sample) -> (loss, sample_size, logging_output)``:
``loss`` is a *sum* over the batch; the trainer divides gradients by the total ``sample_size``
of an update (all accumulated batches and ranks), so results do not depend on how an update is split.
"""

from seqkit.criteria import cross_entropy, distillation, masked_lm, sentence_vectors, word2vec  # noqa: F401
