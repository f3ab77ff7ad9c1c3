"""Models: one file per family, registered in ``seqkit.registry.MODELS`` with named presets.

Every model is built as ``MODELS.build(cfg, src_dict, tgt_dict)``; encoder-decoder models follow
:class:`seqkit.models.base.EncoderDecoderModel`.
"""

from seqkit.models import rnn, transformer  # noqa: F401
from seqkit.models import convs2s  # noqa: F401
from seqkit.models.base import EncoderDecoderModel  # noqa: F401
