"""The in-memory tagging path (preprocess_in_memory, which task=tagging used before the stream)."""
import logging, sys
import seqkit
from seqkit.core.registry import TOKENIZERS
from seqkit.preprocess.common import PreprocessConfig
from seqkit.preprocess.labelled import preprocess_in_memory
seqkit.import_builtin_components()
logging.basicConfig(level=logging.INFO, format="%(asctime)s | %(message)s")
tok = TOKENIZERS.make_config({"name": "sentencepiece_bpe", "vocab_size": 8000, "input_sentence_size": 100000})
cfg = PreprocessConfig(task="tagging", trainpref=sys.argv[1], validpref="/work/shared/data/conll2003/eng.testa",
                       destdir=sys.argv[2], overwrite=True, tokenizer=tok)
preprocess_in_memory(cfg, tok, sys.argv[2])
