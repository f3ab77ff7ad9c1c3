"""Padding of one training epoch, packed rows (``dataset.pack=true``) against token-budget batches, as
the train log counts it (``seqkit.data.prefetch.padding_counts`` over every collated batch), on the CPU.

    python benchmarks/packing.py --data DATA_BIN --max-tokens 16384 65536 --pack-length 256 512
    python benchmarks/packing.py --task language_modeling --sample-break-mode eos --data LM_BIN --max-tokens 16384

``DATA_BIN`` is a ``seqkit-preprocess`` folder (``benchmarks/gpu.py`` makes Tatoeba de-en's in its
work folder); with ``--task language_modeling`` or ``masked_lm`` a language-modeling one (e.g.
WikiText-2 by ``examples/language_model/wikitext2/prepare.sh``), whose blocks of
``--sample-break-mode`` are packed.
Rows are sized for ``--model`` (its positions give the default row length); the
unpacked batches are padded to multiples of 8 as on a GPU. Prints one JSON line per setting.
"""

from __future__ import annotations

import argparse
import json
import time

import seqkit
from seqkit.core.registry import MODELS, TASKS
from seqkit.data.packing import pack_training_set
from seqkit.data.prefetch import padding_counts
from seqkit.tasks.language_modeling import LanguageModelingConfig
from seqkit.tasks.masked_lm import MaskedLMConfig
from seqkit.tasks.translation import TranslationConfig


DEFAULT_MODEL = {"translation": "transformer_base", "language_modeling": "gpt2_small", "masked_lm": "roberta_base"}


def epoch_padding(dataset, batches) -> dict:
    padded = total = pairs = 0
    for b in batches:
        sample = dataset.collate(b)
        p, t = padding_counts(sample)
        padded, total, pairs = padded + p, total + t, pairs + sample["nsentences"]
    return {"padding": round(padded / max(total, 1), 4), "batches": len(batches), "pairs": pairs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="seqkit-preprocess folder of a translation (or --task) corpus")
    ap.add_argument("--task", default="translation", choices=tuple(DEFAULT_MODEL))
    ap.add_argument("--sample-break-mode", default="eos", help="(masked) language modeling: task.sample_break_mode")
    ap.add_argument("--tokens-per-sample", type=int, default=512,
                    help="(masked) language modeling: task.tokens_per_sample")
    ap.add_argument("--max-tokens", type=int, nargs="+", default=[16384, 65536])
    ap.add_argument("--pack-length", type=int, nargs="+", default=[0], help="dataset.pack_length values (0: default)")
    ap.add_argument("--model", default=None, help="default: transformer_base, gpt2_small, roberta_base by --task")
    ap.add_argument("--epoch", type=int, default=1)
    args = ap.parse_args()
    seqkit.import_builtin_components()
    if args.task == "translation":
        task = TASKS.build(TranslationConfig(data=args.data))
    else:
        config = LanguageModelingConfig if args.task == "language_modeling" else MaskedLMConfig
        task = TASKS.build(config(data=args.data, tokens_per_sample=args.tokens_per_sample,
                                  sample_break_mode=args.sample_break_mode))
    model = task.build_model(MODELS.choices()[args.model or DEFAULT_MODEL[args.task]])
    for max_tokens in args.max_tokens:
        ds = task.load_dataset("train")
        ds.length_multiple, ds.length_cap = 8, min(model.max_positions())
        too_long = ds.too_long(*model.max_positions())
        row = {"max_tokens": max_tokens, "pack": False, "required_seq_len_multiple": 8}
        print(json.dumps({**row, **epoch_padding(ds, ds.batches(max_tokens, 0, 1, args.epoch, exclude=too_long))}))
        for length in args.pack_length:
            packed = pack_training_set(task.load_dataset("train"), model, max_tokens, 0, length)
            t0 = time.perf_counter()
            batches = packed.batches(max_tokens, 0, 1, args.epoch, exclude=packed.too_long(*model.max_positions()))
            seconds = time.perf_counter() - t0
            print(json.dumps({"max_tokens": max_tokens, "pack": True, "pack_length": length,
                              "rows": (f"{packed.rows} x {packed.length}" if hasattr(packed, "length")
                                       else f"{packed.rows} x {packed.src_len}/{packed.tgt_len}"),
                              **epoch_padding(packed, batches), "left_out": packed.left_out,
                              "packing_seconds": round(seconds, 3)}))


if __name__ == "__main__":
    main()
