"""One translation engine in a process of its own, timed on command (benchmarks/translation.py's
fair comparison: two engines in one process slow each other, CTranslate2's and torch's OpenMP
runtimes both ways).

    python benchmarks/engine_worker.py seqkit CHECKPOINT SOURCE [--quantize int8] [--threads N]
    python benchmarks/engine_worker.py ctranslate2 EXPORT_DIR SOURCE [--compute int8] [--inter I] [--intra J]

SOURCE: raw source text (.gz read too). The worker loads its engine, says ``{"ready": ...}`` on
stdout, then reads commands on stdin, one a line: ``BATCH N`` translates the first N sentences
in batches of BATCH (beam 5, at most 200 target tokens) and answers one JSON line: sentences/s of
that pass (the search alone, text already tokenized) and the pieces of each translation. The
CTranslate2 worker imports no torch and no seqkit: it is CTranslate2 as its users drive it
(``translate_batch`` on sentencepiece pieces; <pad> and <s> suppressed, as seqkit's search never
emits them).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time


def read(path: str) -> list:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


class Seqkit:
    def __init__(self, args: argparse.Namespace, lines: list):
        import torch

        from seqkit.core.allocator import keep_freed_memory
        from seqkit.generation.translator import Translator

        keep_freed_memory()  # as every seqkit command does
        if args.threads:
            torch.set_num_threads(args.threads)
        self.tr = Translator.from_checkpoint(args.path, beam=5, max_len_a=0, max_len_b=200, quantize=args.quantize)
        self.sources = [self.tr.task.encode_source(line) for line in lines]

    def run(self, batch: int, n: int) -> tuple:
        t0 = time.perf_counter()
        best = {r["id"]: r["hypos"][0]["tokens"] for r in self.tr.generate_batches(self.sources[:n], batch)}
        seconds = time.perf_counter() - t0
        return seconds, [" ".join(self.tr.task.pieces(best[i][:-1])) for i in range(n)]


class CTranslate2:
    def __init__(self, args: argparse.Namespace, lines: list):
        import os

        import ctranslate2
        import sentencepiece as spm

        self.translator = ctranslate2.Translator(args.path, compute_type=args.compute, inter_threads=args.inter,
                                                 intra_threads=args.intra)
        sp = spm.SentencePieceProcessor(model_file=os.path.join(args.path, "source.spm.model"))
        self.sources = [sp.encode(line, out_type=str) for line in lines]

    def run(self, batch: int, n: int) -> tuple:
        t0 = time.perf_counter()
        results = self.translator.translate_batch(self.sources[:n], max_batch_size=batch, beam_size=5,
                                                  max_decoding_length=201, suppress_sequences=[["<pad>"], ["<s>"]],
                                                  max_input_length=0)
        seconds = time.perf_counter() - t0
        return seconds, [" ".join(t for t in r.hypotheses[0] if t != "</s>") for r in results]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("engine", choices=("seqkit", "ctranslate2"))
    ap.add_argument("path", help="seqkit checkpoint, or CTranslate2 export folder")
    ap.add_argument("source", help="raw source text, one sentence a line")
    ap.add_argument("--quantize", default="none", help="seqkit: none or int8")
    ap.add_argument("--threads", type=int, default=0, help="seqkit: torch threads (0: default)")
    ap.add_argument("--compute", default="float32", help="CTranslate2 compute_type")
    ap.add_argument("--inter", type=int, default=1, help="CTranslate2 inter_threads")
    ap.add_argument("--intra", type=int, default=0, help="CTranslate2 intra_threads (0: its default)")
    args = ap.parse_args()
    engine = (Seqkit if args.engine == "seqkit" else CTranslate2)(args, read(args.source))
    print(json.dumps({"ready": args.engine, "torch_imported": "torch" in sys.modules}), flush=True)
    for command in sys.stdin:
        batch, n = (int(x) for x in command.split())
        seconds, pieces = engine.run(batch, n)
        print(json.dumps({"sent_per_s": round(n / seconds, 2), "pieces": pieces}), flush=True)


if __name__ == "__main__":
    main()
