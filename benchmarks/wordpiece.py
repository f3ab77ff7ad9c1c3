"""seqkit's own pure-Python WordPiece learner against the HuggingFace ``tokenizers`` library's trainer
(issue 28, part 3: ours goes unless it is measured better). One JSON line.

    python benchmarks/wordpiece.py [--data WIKITEXT2_DIR] [--vocab-size 8000]

Each learns ``--vocab-size`` pieces from WikiText-2's training text ``--runs`` times, on this
machine, one after the other: seqkit's learner (whitespace words) with likelihood-score merges and
with frequency merges, the ``tokenizers`` WordPiece trainer with the same whitespace pre-split, and
``tokenizers``' BERT setting (BERT's normalizer and punctuation pre-split, what
``BertTokenizerFast`` does). Reported per learner: the fastest run's seconds, whether every run
learned the same vocabulary, and on the validation text the pieces per word and the share of words
that become the unknown piece (WikiText writes ``<unk>`` for rare words: seqkit reads it as its
unknown symbol, a ``tokenizers`` model as pieces); with the CPU model, its bf16/AMX flags and an
fp32 matmul peak.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def figures(encode, lines, unk: str) -> dict:
    words = pieces = unknown = 0
    for line in lines:
        for word in line.split():
            out = encode(word)
            words += 1
            pieces += len(out)
            unknown += out == [unk]
    return {"pieces_per_word": round(pieces / max(words, 1), 4), "unk_word_share": round(unknown / max(words, 1), 6)}


def seqkit_learner(train: str, valid_lines, vocab_size: int, score: str, runs: int) -> dict:
    from seqkit.tokenizers.wordpiece import WordPieceConfig, WordPieceTokenizer

    times, vocabs = [], []
    for _ in range(runs):
        tok = WordPieceTokenizer(WordPieceConfig(vocab_size=vocab_size, score=score))
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as work:
            tok.train([train], work)
        times.append(time.perf_counter() - start)
        vocabs.append(frozenset(tok.vocab))
    return {"learn_s": round(min(times), 2), "same_vocabulary_every_run": len(set(vocabs)) == 1,
            **figures(tok.encode, valid_lines, "<unk>")}


def hf_learner(train: str, valid_lines, vocab_size: int, bert: bool, runs: int) -> dict:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    if bert:
        tok.normalizer = normalizers.BertNormalizer(lowercase=False)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    else:
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    times, vocabs = [], []
    for _ in range(runs):
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=["[UNK]"],
                                            show_progress=False)
        start = time.perf_counter()
        tok.train([train], trainer)
        times.append(time.perf_counter() - start)
        vocabs.append(frozenset(tok.get_vocab()))
    return {"learn_s": round(min(times), 2), "same_vocabulary_every_run": len(set(vocabs)) == 1,
            **figures(lambda w: tok.encode(w, add_special_tokens=False).tokens, valid_lines, "[UNK]")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--runs", type=int, default=5, help="learning runs per learner (fastest reported; vocabularies compared)")
    args = p.parse_args()
    sys.path.insert(0, HERE)
    from translation import find_data, matmul_peak

    from seqkit.core.cpu import cpu_info

    data = find_data(args.data, "wikitext2", "train.txt", "examples/language_model/wikitext2/prepare.sh")

    with open(os.path.join(data, "valid.txt"), encoding="utf-8") as f:
        valid = [line for line in f if line.strip()]
    train = os.path.join(data, "train.txt")
    out = {"benchmark": "wordpiece", "data": "wikitext2", "vocab_size": args.vocab_size, **cpu_info(),
           "matmul_peak_fp32_gflops": round(matmul_peak(torch.float32) / 1e9, 1), "threads": torch.get_num_threads()}
    out["seqkit_likelihood"] = seqkit_learner(train, valid, args.vocab_size, "likelihood", args.runs)
    out["seqkit_frequency"] = seqkit_learner(train, valid, args.vocab_size, "frequency", args.runs)
    out["tokenizers_whitespace"] = hf_learner(train, valid, args.vocab_size, False, args.runs)
    out["tokenizers_bert"] = hf_learner(train, valid, args.vocab_size, True, args.runs)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
