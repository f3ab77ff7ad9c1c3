"""The in-memory classification path (HEAD's preprocess_labelled, kept as preprocess_in_memory)."""
import logging, sys
import seqkit
from seqkit.core.registry import TOKENIZERS
from seqkit.preprocess.common import PreprocessConfig
from seqkit.preprocess.labelled import preprocess_in_memory
seqkit.import_builtin_components()
logging.basicConfig(level=logging.INFO, format="%(asctime)s | %(message)s")
tok = TOKENIZERS.make_config({"name": "sentencepiece_bpe", "vocab_size": 8000})
cfg = PreprocessConfig(task="classification", trainpref=sys.argv[1], validpref="/work/shared/data/sst2/dev.tsv",
                       destdir=sys.argv[2], overwrite=True, tokenizer=tok)
preprocess_in_memory(cfg, tok, sys.argv[2])
