"""The streamed ``seqkit-preprocess task=tagging`` (issue 63): the folder the in-memory reader writes
(``preprocess_in_memory``, called here as the reference), also in workers whose ranges start where
a CoNLL sentence starts; the same carved sentences; each sentence encoded once; the in-memory
reader's one-line errors."""

import gzip
import logging
import os
import random

import numpy as np
import pytest
import torch

import seqkit
from seqkit.cli.preprocess import main
from seqkit.core.registry import TOKENIZERS
from seqkit.preprocess import encode, stream
from seqkit.preprocess.labelled import preprocess_in_memory
from seqkit.preprocess.tagging_stream import check_conll, plan, read_sentences
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers import load_tokenizer
from seqkit.tokenizers.wordpiece import WordPieceTokenizer

from label_fixtures import DOCSTART, one_line_error, tagged_sentences
from stream_fixtures import assert_same_refusal, digest

seqkit.import_builtin_components()

RARE = ["Ωmega", "çà", "<unk>", "ẞ"]


def conll_bytes(sents, seed, crlf=False, last_newline=True, columns=4):
    """CoNLL-2003 lines with what a reader must take in its stride: -DOCSTART- lines, runs of blank
    and whitespace-only lines, tabs and spaces between columns, CRLF ends, rare words, a word
    sentencepiece gives no piece (U+200B), no newline at the end; the words alone when ``columns``
    is 1."""
    rng = random.Random(seed)
    lines = [DOCSTART, ""]
    for i, (words, tags) in enumerate(sents):
        if i == 2:
            words, tags = words + ["\u200b"], tags + ["O"]
        if i % 5 == 4:
            lines += ["", " \t", DOCSTART, ""]
        for j, (w, t) in enumerate(zip(words, tags)):
            w = rng.choice(RARE) if rng.random() < 0.05 else w
            sep = "\t" if j % 3 == 0 else " "
            lines.append(f"{w}{sep}NN{sep}I-NP {t}" if columns == 4 else f" {w}")
        lines.append("")
    ends = ["\r\n" if crlf and i % 7 == 3 else "\n" for i in range(len(lines))]
    data = "".join(line + end for line, end in zip(lines, ends))
    return (data.rstrip("\n") if not last_newline else data).encode("utf-8")


def make_raw(root):
    os.makedirs(root, exist_ok=True)
    files = {"train.conll": conll_bytes(tagged_sentences(40, 0), 0, crlf=True, last_newline=False),
             "dev.conll": conll_bytes(tagged_sentences(9, 1), 1),
             "test.conll": conll_bytes(tagged_sentences(6, 2), 2, columns=1)}
    for name, data in files.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
    with open(os.path.join(root, "train.conll.gz"), "wb") as f:
        f.write(gzip.compress(files["train.conll"], mtime=0))
    return root


SPM = dict(name="sentencepiece_bpe", vocab_size=45, num_threads=1)
NFKC = dict(SPM, normalization_rule_name="nmt_nfkc")  # gives U+200B no piece


def configs(raw):
    """name -> (PreprocessConfig fields, tokenizer fields)."""
    base = dict(task="tagging", trainpref=f"{raw}/train", validpref=f"{raw}/dev", testpref=f"{raw}/test.conll")
    return {
        "spm": (base, SPM),
        "carve": (dict(base, carve_valid=0.25, carve_seed=3), NFKC),
        "wordpiece_threshold": (dict(base, thresholdsrc=2), dict(name="wordpiece", vocab_size=60)),
        "space_nwords_gz": (dict(base, trainpref=f"{raw}/train.conll.gz", nwordssrc=20), dict(name="space")),
    }


def cfg_of(raw, dest, name, **over):
    fields, tok = configs(raw)[name]
    return PreprocessConfig(destdir=str(dest), tokenizer=TOKENIZERS.make_config(over.pop("tokenizer", tok)),
                            **{**fields, **over})


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    return make_raw(str(tmp_path_factory.mktemp("conll")))


@pytest.mark.parametrize("name", ["spm", "carve", "wordpiece_threshold", "space_nwords_gz"])
def test_folder_is_the_in_memory_readers(raw, tmp_path, monkeypatch, name):
    """Byte for byte the in-memory reader's folder (sub-word pieces, carve_valid, a word with no
    piece, a gzipped train, an untagged test split); also in 3 workers with blocks of 64 bytes
    (sentences across blocks), at most 8 marks (every 2nd, 4th, ... sentence a place to start) and
    batches of 5 words."""
    ref = cfg_of(raw, tmp_path / "ref", name)
    preprocess_in_memory(ref, ref.tokenizer, str(tmp_path / "ref"))
    expected = digest(str(tmp_path / "ref"))
    if name == "carve":  # nmt_nfkc gives U+200B no piece: that word keeps its position as <unk>
        state = torch.load(tmp_path / "ref" / "tokenizer.input.pt", weights_only=True)
        assert load_tokenizer(state).encode("\u200b") == []
    assert {"test.label.bin", "valid.label.idx"} <= set(expected)
    preprocess(cfg_of(raw, tmp_path / "a", name))
    assert digest(str(tmp_path / "a")) == expected
    monkeypatch.setattr(stream, "BLOCK_BYTES", 64)
    monkeypatch.setattr(stream, "OFFSET_SLOTS", 4)
    monkeypatch.setattr(encode, "BATCH_LINES", 5)
    preprocess(cfg_of(raw, tmp_path / "b", name, workers=3))
    assert digest(str(tmp_path / "b")) == expected


def test_vocab_from_a_language_model_folder(raw, tmp_path):
    """vocab_from= (a language_modeling folder's sentencepiece model and dictionary, which lack some
    training words): the in-memory reader's folder, in 2 workers."""
    (tmp_path / "lm.txt").write_text("".join(" ".join(w) + "\n" for w, _ in tagged_sentences(30, 5)))
    lm_tok = TOKENIZERS.make_config(dict(SPM, vocab_size=35))
    preprocess(PreprocessConfig(task="language_modeling", trainpref=str(tmp_path / "lm.txt"),
                                destdir=str(tmp_path / "lm"), tokenizer=lm_tok))
    ref = cfg_of(raw, tmp_path / "ref", "spm", vocab_from=str(tmp_path / "lm"))
    preprocess_in_memory(ref, ref.tokenizer, str(tmp_path / "ref"))
    preprocess(cfg_of(raw, tmp_path / "new", "spm", vocab_from=str(tmp_path / "lm"), workers=2))
    assert digest(str(tmp_path / "new")) == digest(str(tmp_path / "ref"))


def test_worker_ranges_start_where_sentences_start(raw, tmp_path, monkeypatch):
    """Ranges cut at check-pass marks (sentence starts) hold every sentence once, in order, however
    many ranges; the check pass keeps at most 2 * OFFSET_SLOTS + 1 marks."""
    monkeypatch.setattr(stream, "BLOCK_BYTES", 64)
    monkeypatch.setattr(stream, "OFFSET_SLOTS", 2)
    src = check_conll("train", f"{raw}/train", 0, -1, str(tmp_path))
    assert src.sentences == 40 and len(src.marks) <= 5 and src.every > 1
    none = np.zeros(0, dtype=np.int64)
    whole = list(read_sentences(plan({"train": src}, none, {}, 1, str(tmp_path), False)[0].span))
    assert len(whole) == 40
    for workers in (2, 3, 7):
        tasks = plan({"train": src}, none, {}, workers, str(tmp_path), False)
        assert len(tasks) > 1
        got = []
        for t in tasks:
            part = list(read_sentences(t.span))
            assert t.first == len(got) and (t.span.line == 0 or part[0][0] == t.span.line + 1)
            got += part
        assert got == whole


def test_each_sentence_is_encoded_once_word_by_word(raw, tmp_path, monkeypatch, caplog):
    calls = []
    encode_text = WordPieceTokenizer.encode
    monkeypatch.setattr(WordPieceTokenizer, "encode", lambda self, text: calls.append(text) or encode_text(self, text))
    with caplog.at_level(logging.INFO, logger="seqkit.preprocess"):
        preprocess(cfg_of(raw, tmp_path / "wp", "wordpiece_threshold", carve_valid=0.25,
                          tokenizer=dict(name="wordpiece", vocab_size=60, input_sentence_size=20, seed=7)))
    words = sum(len(line.split(" ")) for split in ("train", "valid", "valid1", "test")
                for line in (tmp_path / "wp" / f"{split}.text.txt").read_text(encoding="utf-8").splitlines())
    assert words == 3 + sum(len(w) for n, seed in ((40, 0), (9, 1), (6, 2)) for w, _ in tagged_sentences(n, seed))
    assert len(calls) == words and all(" " not in c for c in calls)  # every word once, on its own
    assert "trained wordpiece on input: 20 of 30 lines (seed 7)" in caplog.text  # the sentences train keeps
    assert "10 of 40 training examples held out as split valid" in caplog.text


# bad inputs: (files to write under raw/, settings); the in-memory reader's error is the one expected
TRAIN = "-DOCSTART- -X- O\n\nEU B-ORG\nrejects O\n\nPeter B-PER\nsaid O\n"
BAD = {
    "columns": ({"train.conll": TRAIN + "\nthe O x\n"}, {}),
    "word_column": ({"train.conll": TRAIN}, {"word_column": 3}),
    "tag_column": ({"train.conll": "\n \n" + TRAIN}, {"tag_column": -3}),
    "not_utf8": ({"train.conll": TRAIN.encode() + b"\ncaf\xe9 O\n"}, {}),
    "columns_before_bad_utf8": ({"train.conll": (TRAIN + "a O b\n\n\xff O\n").encode("latin-1")}, {}),
    "no_sentences": ({"train.conll": "-DOCSTART- -X- O\n\n \n"}, {}),
    "no_tags": ({"train.conll": "EU\nrejects\n\nPeter\n"}, {}),
    "same_word_and_tag_column": ({"train.conll": TRAIN}, {"tag_column": 0}),
    "unknown_dev_tag": ({"train.conll": TRAIN, "dev.conll": "a O\n\nb O\nc B-LOC\n\nd I-LOC\n",
                         "test.conll": "x B-MISC\n"}, {"validpref": "dev", "testpref": "test"}),
    "bad_test_after_good_dev": ({"train.conll": TRAIN, "dev.conll": "a O\n", "test.conll": "a O\nb O x\n"},
                                {"validpref": "dev", "testpref": "test"}),
    "carved_tag_not_in_train": ({"train.conll": "".join(f"w{i} {'B-X' if i in (2, 7) else 'O'}\nz O\n\n"
                                                        for i in range(10))},
                                {"carve_valid": 0.5, "carve_seed": 3}),
    "carve_too_small": ({"train.conll": TRAIN}, {"carve_valid": 0.1}),
    "no_file": ({"other.conll": TRAIN}, {}),
}


@pytest.mark.parametrize("block", [stream.BLOCK_BYTES, 16])
@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_the_in_memory_readers_one_line(tmp_path, monkeypatch, case, block):
    """The same message as the in-memory reader (the first problem in file order, also when a block
    holds a line error before a bad byte); nothing written."""
    monkeypatch.setattr(stream, "BLOCK_BYTES", block)
    assert_same_refusal(tmp_path, "tagging", *BAD[case])


def test_workers_are_read_by_tagging(raw, tmp_path, run_cli):
    """task=tagging workers=2 runs (it was refused as a setting tagging does not read); with
    carve_unit=sentence the refusal names its cause: tagged sentences, not the workers."""
    r = run_cli(main, ["task=tagging", f"trainpref={raw}/train", "workers=2", f"destdir={tmp_path / 'bin'}",
                       "tokenizer=space"])
    assert r.code == 0, r.err
    assert (tmp_path / "bin" / "train.label.idx").is_file()
    r = run_cli(main, ["task=tagging", f"trainpref={raw}/train", "carve_valid=0.2", "carve_unit=sentence", "workers=2",
                       f"destdir={tmp_path / 'bin2'}", "tokenizer=space"])
    one_line_error(r, "seqkit-preprocess", "carve_unit=sentence is for single-sentence", "use carve_unit=example")
    assert not (tmp_path / "bin2").exists()
