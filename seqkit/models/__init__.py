"""Models: one file per family, registered in ``seqkit.registry.MODELS`` with named presets.

Each model class has a ``kind`` (``seq2seq``, ``classifier``, ``tagger``, ``lm``, ``masked_lm``) that fixes how a task
builds and calls it; :mod:`seqkit.models.base` describes each interface.
"""

from seqkit.models import rnn, transformer  # noqa: F401
from seqkit.models import convs2s  # noqa: F401
from seqkit.models import bilstm, cbow, kim_cnn, transformer_encoder  # noqa: F401
from seqkit.models import elmo, lstm_lm, transformer_lm  # noqa: F401
from seqkit.models import bert, electra  # noqa: F401
from seqkit.models import pretrained  # noqa: F401
from seqkit.models.base import EncoderClassifierModel, EncoderDecoderModel, LanguageModel  # noqa: F401
