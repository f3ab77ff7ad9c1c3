"""The streamed ``seqkit-preprocess task=classification`` (issue 63): the same folder as the in-memory
reader wrote (frozen digests), the same carved rows, rows encoded once in worker ranges, and the
check pass's one-line errors."""

import gzip
import hashlib
import json
import logging
import os
import random

import pytest

import seqkit
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import TOKENIZERS
from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.data.labelled_text import read_classification
from seqkit.preprocess import encode, stream
from seqkit.preprocess.carve import carve, held_rows, pick
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers.wordpiece import WordPieceTokenizer

from stream_fixtures import _strip_new, assert_same_refusal, digest

seqkit.import_builtin_components()

WORDS = ["the", "film", "was", "a", "story", "with", "very", "plot", "actors", "and", "its", "good", "bad", "dull",
         "great", "okay", "lovely", "poor", "Straße", "Mädchen"]
RARE = ["ẞ", "Ω", "ø", "ç"]


def _text(rng):
    words = [rng.choice(WORDS) for _ in range(rng.randint(1, 7))]
    return " ".join(words) + (rng.choice(RARE) if rng.random() < 0.04 else "")


def _rows(n, seed, labels=("neg", "neu", "pos")):
    rng = random.Random(seed)
    return [(_text(rng), _text(rng), rng.choice(labels)) for _ in range(n)]


def _write(path, lines, bom=False, last_newline=True, crlf_at=()):
    data = "".join(line + ("\r\n" if i in crlf_at else "\n") for i, line in enumerate(lines))
    data = ("\ufeff" if bom else "") + (data if last_newline else data[:-1])
    with open(path, "wb") as f:
        f.write(data.encode("utf-8"))


def make_labelled_raw(root):
    """single/ (TSV: an extra column, blank and whitespace-only rows, CRLF, cells with spaces around,
    no newline at the end; test without labels), pairs/ (MRPC's header with a BOM), plain/ (GLUE's
    input0/input1/label files)."""
    for sub in ("single", "pairs", "plain"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    gz = os.path.join(root, "single", "train.tsv.gz")
    for split, n, seed in (("train", 140, 0), ("dev", 20, 1), ("test", 9, 2)):
        rows = _rows(n, seed)
        lines = [f"{i}\t {a} \t{y}" if split != "test" else f"{i}\t{a}" for i, (a, _, y) in enumerate(rows)]
        if split == "train":
            lines[30:30] = [""]
            lines[77:77] = [" \t "]
        header = "id\tsentence\tlabel" if split != "test" else "id\tsentence"
        _write(os.path.join(root, "single", f"{split}.tsv"), [header] + lines, last_newline=split != "train",
               crlf_at={5, 60})
        mrpc = [f"{y[-1:] == 's' and 1 or 0}\t{2 * i}\t{2 * i + 1}\t{a}\t{b}" for i, (a, b, y) in enumerate(rows)]
        head = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
        if split == "test":
            mrpc, head = [line.split("\t", 1)[1] for line in mrpc], head[1:]
        _write(os.path.join(root, "pairs", f"{split}.tsv"), ["\t".join(head)] + mrpc, bom=True)
        _write(os.path.join(root, "plain", f"{split}.input0"), [a for a, _, _ in rows])
        _write(os.path.join(root, "plain", f"{split}.input1"), [b for _, b, _ in rows])
        if split != "test":
            _write(os.path.join(root, "plain", f"{split}.label"), [y for _, _, y in rows])
    with open(gz[:-3], "rb") as f, open(gz, "wb") as out:
        out.write(gzip.compress(f.read(), mtime=0))
    return root


def labelled_configs(raw):
    """name -> (PreprocessConfig fields, tokenizer fields)."""
    one = dict(task="classification", trainpref=f"{raw}/single/train", validpref=f"{raw}/single/dev.tsv",
               testpref=f"{raw}/single/test")
    pairs = dict(task="classification", trainpref=f"{raw}/pairs/train", validpref=f"{raw}/pairs/dev",
                 testpref=f"{raw}/pairs/test", text_columns=["#1 String", "#2 String"], label_column="Quality")
    spm = dict(name="sentencepiece_bpe", vocab_size=60, num_threads=1)
    return {
        "single_spm": (one, spm),
        "pairs_spm": (pairs, dict(spm, vocab_size=70, character_coverage=0.995)),
        "carve_example": (dict(one, carve_valid=0.1, carve_seed=3), spm),
        "plain_wordpiece": (dict(task="classification", trainpref=f"{raw}/plain/train", validpref=f"{raw}/plain/dev",
                                 testpref=f"{raw}/plain/test", text_columns=["input0", "input1"], thresholdsrc=2),
                            dict(name="wordpiece", vocab_size=80)),
        "single_space_nwords": (dict(one, nwordssrc=12), dict(name="space")),
        "single_spm_gz": (dict(one, trainpref=f"{raw}/single/train.tsv.gz"), spm),
    }


# digests of the folders the in-memory reader (seqkit at df54718) wrote for labelled_configs: made
# by running this file as a script over that checkout
FROZEN = {
    "single_spm": {
        "dict.input.txt": "bb03512ca66d2afb", "dict.label.txt": "0c17295e915d19a5",
        "preprocess.json": "d41ce613f8faa82b", "test.input.bin": "ea6aa0b4c3b6104e",
        "test.input.idx": "9419fab1f31e080b", "test.text.txt": "90db2260271caefc",
        "tokenizer.input.pt": "af4a6125c26ca0b4", "train.input.bin": "6ea25c2149e7af4e",
        "train.input.idx": "f8e45935cc347336", "train.label.bin": "914d842b3a7ecf3d",
        "train.label.idx": "362f2ab880a0fa2d", "train.text.txt": "4893b8d5377361d6",
        "valid.input.bin": "2bfaf24a4b1c7c71", "valid.input.idx": "db78590b0c866259",
        "valid.label.bin": "1e531dfa8f0d647d", "valid.label.idx": "143ffad3ea9c4839",
        "valid.text.txt": "c4dc83326ebbad28",
    },
    "pairs_spm": {
        "dict.input.txt": "7f008c0d49a4dc4d", "dict.label.txt": "07ab9d0ec13b1a2b",
        "preprocess.json": "d58bbb7bcd0fc097", "test.input.bin": "35f032dae77863ef",
        "test.input.idx": "19d868406ae9487b", "test.text.txt": "37de0718dd2a50c3",
        "tokenizer.input.pt": "9043179741f7dd8d", "train.input.bin": "4da8db0aebbacda2",
        "train.input.idx": "aca5901f66ca819f", "train.label.bin": "b8c9ab265aaee888",
        "train.label.idx": "362f2ab880a0fa2d", "train.text.txt": "15714e24c382ef2f",
        "valid.input.bin": "e161946ecc207b43", "valid.input.idx": "7a83282ccada4464",
        "valid.label.bin": "dac9e8298a5076d4", "valid.label.idx": "143ffad3ea9c4839",
        "valid.text.txt": "022c335c0bc5cdbf",
    },
    "carve_example": {
        "dict.input.txt": "f6ded583d2ed4a98", "dict.label.txt": "36743140f6b4a8a6",
        "preprocess.json": "14e7c09f1d34c195", "test.input.bin": "df95d60bd4cf7b37",
        "test.input.idx": "b8bc18c3850cc0f4", "test.text.txt": "90db2260271caefc",
        "tokenizer.input.pt": "b595ea3586e98911", "train.input.bin": "7e615b87065b64e0",
        "train.input.idx": "4955082da162e2eb", "train.label.bin": "5c5cb2c57435587b",
        "train.label.idx": "fff7db93f1618e47", "train.text.txt": "b95eb861a87e9064",
        "valid.input.bin": "d1c869bca547ce5e", "valid.input.idx": "09e68c4e2f0111ec",
        "valid.label.bin": "eb392ab8e740aa02", "valid.label.idx": "cfd0617ef78c43ef",
        "valid.text.txt": "d2f8f1294d7eeacf", "valid1.input.bin": "944c1262fc330e97",
        "valid1.input.idx": "0de64434fe9991ef", "valid1.label.bin": "1e531dfa8f0d647d",
        "valid1.label.idx": "143ffad3ea9c4839", "valid1.text.txt": "c4dc83326ebbad28",
    },
    "plain_wordpiece": {
        "dict.input.txt": "99b775fe39c7f144", "dict.label.txt": "0c17295e915d19a5",
        "preprocess.json": "152588d4a94f3e11", "test.input.bin": "8147563c3b96ca28",
        "test.input.idx": "32d71a5ca764a608", "test.text.txt": "37de0718dd2a50c3",
        "tokenizer.input.pt": "a938fdea8eb0e118", "train.input.bin": "05a59caf67d9831c",
        "train.input.idx": "f25125814e758764", "train.label.bin": "914d842b3a7ecf3d",
        "train.label.idx": "362f2ab880a0fa2d", "train.text.txt": "15714e24c382ef2f",
        "valid.input.bin": "1bff279663d4f8ee", "valid.input.idx": "99c5408fbba2b874",
        "valid.label.bin": "1e531dfa8f0d647d", "valid.label.idx": "143ffad3ea9c4839",
        "valid.text.txt": "022c335c0bc5cdbf",
    },
    "single_space_nwords": {
        "dict.input.txt": "30140eb56930f560", "dict.label.txt": "0c17295e915d19a5",
        "preprocess.json": "d0f1b68a5915a6ae", "test.input.bin": "5a911eccc090b780",
        "test.input.idx": "e8acb389738b034e", "test.text.txt": "90db2260271caefc",
        "tokenizer.input.pt": "1774779670f0aa4b", "train.input.bin": "b3a6afee46367a1b",
        "train.input.idx": "cd4a0bb6443c9a53", "train.label.bin": "914d842b3a7ecf3d",
        "train.label.idx": "362f2ab880a0fa2d", "train.text.txt": "4893b8d5377361d6",
        "valid.input.bin": "cfc3c5da37ea2284", "valid.input.idx": "445c7e0018959dff",
        "valid.label.bin": "1e531dfa8f0d647d", "valid.label.idx": "143ffad3ea9c4839",
        "valid.text.txt": "c4dc83326ebbad28",
    },
}

FROZEN["single_spm_gz"] = FROZEN["single_spm"]  # a gzipped TSV: the same folder


def labelled_digest(folder, raw):
    """:func:`stream_fixtures.digest`, ``preprocess.json`` with the input folder ``raw`` (which
    carved.from names) written as RAW."""
    out = digest(folder)
    with open(os.path.join(folder, "preprocess.json"), encoding="utf-8") as f:
        meta = json.load(f)
    if meta.get("carved"):
        meta["carved"]["from"] = meta["carved"]["from"].replace(str(raw), "RAW")
    meta["tokenizer"] = _strip_new(meta["tokenizer"])
    out["preprocess.json"] = hashlib.sha256(json.dumps(meta, indent=2, ensure_ascii=False).encode()).hexdigest()[:16]
    return out


def run(raw, dest, name, **over):
    fields, tok = labelled_configs(raw)[name]
    tok = over.pop("tokenizer", tok)
    return preprocess(PreprocessConfig(destdir=str(dest), tokenizer=TOKENIZERS.make_config(tok), **{**fields, **over}))


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    return make_labelled_raw(str(tmp_path_factory.mktemp("labelled")))


@pytest.mark.parametrize("key", list(FROZEN))
def test_folder_is_the_one_the_in_memory_reader_wrote(raw, tmp_path, monkeypatch, key):
    """Byte for byte the in-memory reader's folder; also in 3 workers, with blocks of 64 bytes (rows
    across blocks) and offsets of 8 lines at most (workers seek mid-file)."""
    run(raw, tmp_path / "a", key)
    assert labelled_digest(str(tmp_path / "a"), raw) == FROZEN[key]
    monkeypatch.setattr(stream, "BLOCK_BYTES", 64)
    monkeypatch.setattr(stream, "OFFSET_SLOTS", 4)
    monkeypatch.setattr(encode, "BATCH_LINES", 5)
    run(raw, tmp_path / "b", key, workers=3)
    assert labelled_digest(str(tmp_path / "b"), raw) == FROZEN[key]


def _single(root, rows, header="sentence\tlabel"):
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "train.tsv"), "w", encoding="utf-8") as f:
        f.write(header + "\n" + "".join(f"{a}\t{y}\n" for a, _, y in rows))
    return os.path.join(root, "train.tsv")


@pytest.mark.parametrize("share,seed", [(0.1, 1), (0.3, 7), (0.5, 2)])
def test_carved_rows_are_the_in_memory_carves(tmp_path, share, seed):
    """The rows carve_valid holds out (and those train keeps), in file order with their labels, are
    those the in-memory carve picked: random.Random(seed).sample(range(n), k), rows in 2 workers."""
    path = _single(str(tmp_path / "raw"), _rows(300, 5))
    rest, held, _ = carve(read_classification(path, ["sentence"], "label"), share, seed, "example")
    dest = tmp_path / "bin"
    preprocess(PreprocessConfig(task="classification", trainpref=path, destdir=str(dest), carve_valid=share,
                                carve_seed=seed, workers=2, tokenizer=TOKENIZERS.make_config({"name": "space"})))
    labels = sorted(set(rest.labels))
    for split, part in (("valid", held), ("train", rest)):
        assert (dest / f"{split}.text.txt").read_text().splitlines() == [t[0] for t in part.texts]
        stored = IndexedDataset(str(dest / f"{split}.label"))
        assert [labels[int(x[0])] for x in stored] == part.labels
    assert held_rows(300, share, seed, "examples").tolist() == sorted(pick(300, share, seed, "examples"))


def test_each_row_is_encoded_once_and_the_tokenizer_learns_a_sample(raw, tmp_path, monkeypatch, caplog):
    calls = []
    encode_text = WordPieceTokenizer.encode
    monkeypatch.setattr(WordPieceTokenizer, "encode", lambda self, line: calls.append(line) or encode_text(self, line))
    with caplog.at_level(logging.INFO, logger="seqkit.preprocess"):
        run(raw, tmp_path / "wp", "plain_wordpiece")
    assert len(calls) == 2 * (140 + 20 + 9)  # both sentences of every row, once
    assert "trained wordpiece on input: 280 of 280 lines (seed 1)" in caplog.text  # a small corpus: every line
    with caplog.at_level(logging.INFO, logger="seqkit.preprocess"):
        run(raw, tmp_path / "sample", "carve_example", tokenizer={"name": "wordpiece", "vocab_size": 80,
                                                                  "input_sentence_size": 50, "seed": 7})
    assert "trained wordpiece on input: 50 of 126 lines (seed 7)" in caplog.text  # the rows train keeps


# bad inputs: (files to write under raw/, settings); the in-memory reader's error is the one expected
HEADER = "id\tsentence\tlabel\n"
BAD = {
    "columns": ({"train.tsv": HEADER + "0\ta b\tpos\n1\tc\td\tneg\n"}, {}),
    "empty_text": ({"train.tsv": HEADER + "0\ta b\tpos\n1\t  \tneg\n"}, {}),
    "empty_pair_side": ({"train.tsv": "a\tb\tlabel\nx\ty\t1\nx\t \t0\n"}, {"text_columns": ["a", "b"]}),
    "empty_label": ({"train.tsv": HEADER + "0\ta b\tpos\n\n1\tc\t \n"}, {}),
    "no_text_column": ({"train.tsv": "id\ttext\tlabel\n0\ta\tpos\n"}, {}),
    "empty_file": ({"train.tsv": ""}, {}),
    "header_only": ({"train.tsv": HEADER + "\n \n"}, {}),
    "no_label_column": ({"train.tsv": "sentence\n" + "a b\n"}, {}),
    "not_utf8": ({"train.tsv": (HEADER + "0\ta\tpos\n1\tcaf").encode() + b"\xe9\tneg\n"}, {}),
    "columns_before_bad_utf8": ({"train.tsv": (HEADER + "0\ta\n1\tb\tneg\n\xff").encode("latin-1")}, {}),
    "unknown_dev_label": ({"train.tsv": HEADER + "0\ta\tpos\n1\tb\tneg\n",
                           "dev.tsv": HEADER + "0\ta\tpos\n\n1\tb\tmixed\n2\tc\tother\n"}, {"validpref": "dev"}),
    "carved_label_not_in_train": ({"train.tsv": HEADER + "".join(f"{i}\tw{i}\t{ {3: 'rare', 8: 'odd'}.get(i, 'pos')}\n"
                                                                 for i in range(10))},
                                  {"carve_valid": 0.5, "carve_seed": 3}),  # rows 2, 3, 4, 7, 8 held out
    "carve_too_small": ({"train.tsv": HEADER + "0\ta\tpos\n"}, {"carve_valid": 0.1}),
    "plain_counts": ({"train.input0": "a\nb\n", "train.input1": "c\n", "train.label": "0\n1\n"},
                     {"text_columns": ["input0", "input1"]}),
    "plain_empty_line": ({"train.input0": "a\nb\nc\n", "train.input1": "c\n \nd\n", "train.label": "0\n1\n\n"},
                         {"text_columns": ["input0", "input1"]}),
    "plain_empty_label": ({"train.input0": "a\nb\n", "train.label": "0\n\n"}, {}),
    "plain_second_input": ({"train.input0": "a\n", "train.input1": "b\n", "train.label": "0\n"}, {}),
    "plain_unknown_label": ({"train.input0": "a\nb\n", "train.label": "0\n1\n", "dev.input0": "a\nb\nc\n",
                             "dev.label": "0\n2\n1\n"}, {"validpref": "dev"}),
    "no_file": ({"other.tsv": HEADER}, {}),
}


@pytest.mark.parametrize("block", [stream.BLOCK_BYTES, 16])
@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_the_in_memory_readers_one_line(tmp_path, monkeypatch, case, block):
    """The same message as the in-memory reader (the first problem, in file order, also when a
    block holds a row error before a bad byte); nothing written."""
    monkeypatch.setattr(stream, "BLOCK_BYTES", block)
    assert_same_refusal(tmp_path, "classification", *BAD[case])


def test_a_line_over_1_mb_is_refused_by_number(tmp_path):
    long_row = b"1\t" + b"x" * stream.MAX_LINE_BYTES + b"\tneg\n"
    (tmp_path / "train.tsv").write_bytes(HEADER.encode() + b"0\ta\tpos\n" + long_row)
    with pytest.raises(SeqkitError, match=rf"^{tmp_path}/train.tsv:3: a line longer than 1 MB"):
        preprocess(PreprocessConfig(task="classification", trainpref=str(tmp_path / "train"),
                                    destdir=str(tmp_path / "bin"), tokenizer=TOKENIZERS.make_config({"name": "space"})))
    assert sorted(os.listdir(tmp_path)) == ["train.tsv"]


if __name__ == "__main__":  # print the digests of this checkout's folders (how FROZEN was made)
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        r = make_labelled_raw(os.path.join(tmp, "raw"))
        for key in labelled_configs(r):
            run(r, os.path.join(tmp, key), key)
            print(f"    {key!r}: {labelled_digest(os.path.join(tmp, key), r)!r},")
            sys.stdout.flush()
