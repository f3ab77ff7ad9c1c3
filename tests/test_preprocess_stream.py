"""The streamed seqkit-preprocess (issue 63): the same folder as the in-memory one did, each line
encoded once, the tokenizer's seeded sample, the check pass's one-line errors, shards."""

import json
import logging
import os

import numpy as np
import pytest
import torch

from seqkit.cli.preprocess import main
from seqkit.core.errors import SeqkitError
from seqkit.core.io import read_all_lines
from seqkit.core.registry import TOKENIZERS
from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.preprocess import encode, stream
from seqkit.preprocess.common import sample_ranks
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers import load_tokenizer
from seqkit.tokenizers.wordpiece import WordPieceTokenizer
from stream_fixtures import configs, digest, make_raw, write

# digests of the folders seqkit at ea5b05f wrote for stream_fixtures.configs (sentencepiece with
# its input_sentence_size=0 of then): tests/stream_fixtures.py's digest, run over that checkout
FROZEN = {
    "spm_bpe": {
        "dict.de.txt": "6aa8c9ef5b0c2ba0", "dict.en.txt": "6aa8c9ef5b0c2ba0", "preprocess.json": "82c68c6ef3bee8f7",
        "test.de-en.de.bin": "35caab3d4cf1b00a", "test.de-en.de.idx": "41d4086493891f0c",
        "test.de-en.en.bin": "38b188e38c9696aa", "test.de-en.en.idx": "3cee6db9cefa0580",
        "tokenizer.de.pt": "20b763e330a5f0d5", "tokenizer.en.pt": "20b763e330a5f0d5",
        "train.de-en.de.bin": "0082ae5edfeeb2b3", "train.de-en.de.idx": "40fe2abe1d5435fd",
        "train.de-en.en.bin": "cd68cc51aff46396", "train.de-en.en.idx": "194b3b4f8ddc4fc8",
        "valid.de-en.de.bin": "dab0903d5638273b", "valid.de-en.de.idx": "bfb938288207a5a1",
        "valid.de-en.en.bin": "34cd8654985e9777", "valid.de-en.en.idx": "3e6f1125b2e443b6",
    },
    "wordpiece_separate": {
        "dict.de.txt": "534f18673248076a", "dict.en.txt": "b6483e3a4ab5821e", "preprocess.json": "780ccfd19828554f",
        "test.de-en.de.bin": "617507f6364e0309", "test.de-en.de.idx": "4a49411fff61c527",
        "test.de-en.en.bin": "c272571c592b64d9", "test.de-en.en.idx": "4f8727a51a0d4545",
        "tokenizer.de.pt": "ff87d95d674dc9cb", "tokenizer.en.pt": "9713a364a509f8b0",
        "train.de-en.de.bin": "74cda5a176a15b30", "train.de-en.de.idx": "a3f9eb809d3972e0",
        "train.de-en.en.bin": "bcee88c0618ea4a5", "train.de-en.en.idx": "8c97d3f1f980bac2",
        "valid.de-en.de.bin": "cbfd8160588c8e62", "valid.de-en.de.idx": "c078cb6595663c78",
        "valid.de-en.en.bin": "ee32efbe45c1dcdb", "valid.de-en.en.idx": "ed0b285cbe9ba010",
    },
    "lm_space": {
        "dict.text.txt": "3812fd24bce0c023", "preprocess.json": "d6ff919555747727",
        "tokenizer.text.pt": "1774779670f0aa4b", "train.text.bin": "3617ea43c1d9a405",
        "train.text.idx": "f8b58a1b283c2685", "valid.text.bin": "e6a3f68174155069",
        "valid.text.idx": "bce68fdc7840971d",
    },
    "mono_unigram_special": {
        "dict.de.txt": "342279a22a6d3c84", "preprocess.json": "d5214d23b5ddf3a1", "test.de.bin": "f83162fdad56a7d4",
        "test.de.idx": "bfc77a50ecc5c9b2", "tokenizer.de.pt": "216f70efa9935d44", "train.de.bin": "fa29ee372c9eb498",
        "train.de.idx": "0d7a462f7db92acb",
    },
    "char_keep_empty": {
        "dict.de.txt": "edd945f1cbc673d7", "dict.en.txt": "edd945f1cbc673d7", "preprocess.json": "0e7cf69493ddc5f5",
        "test.de-en.de.bin": "cdf90290fc308df0", "test.de-en.de.idx": "5736dec365316cc0",
        "test.de-en.en.bin": "821216f4eeb6d65b", "test.de-en.en.idx": "30902b8789c7149b",
        "tokenizer.de.pt": "8b0e3ef0213c23e2", "tokenizer.en.pt": "8b0e3ef0213c23e2",
        "train.de-en.de.bin": "acbe1e9b54dbb05a", "train.de-en.de.idx": "e62ebab562cfdeb6",
        "train.de-en.en.bin": "884c5c10657946cc", "train.de-en.en.idx": "a8fb7c981114c159",
        "valid.de-en.de.bin": "5d4a173a1882f688", "valid.de-en.de.idx": "cab6e6822b8fdfec",
        "valid.de-en.en.bin": "39405d8d75919590", "valid.de-en.en.idx": "97b1f46290157c75",
    },
}
FROZEN["spm_bpe_gz"] = FROZEN["spm_bpe"]  # gzipped inputs: the same folder, byte for byte


@pytest.fixture(scope="module")
def raws(tmp_path_factory):
    root = tmp_path_factory.mktemp("raw")
    return {False: make_raw(str(root / "plain")), True: make_raw(str(root / "gz"), gz_train=True)}


def run(raw, dest, name, **over):
    fields, tok = configs(raw)[name]
    tok = dict(tok, **over.pop("tokenizer", {}))
    return preprocess(PreprocessConfig(destdir=str(dest), tokenizer=TOKENIZERS.make_config(tok), **{**fields, **over}))


@pytest.mark.parametrize("key", list(FROZEN))
def test_folder_is_the_one_every_line_in_memory_wrote(raws, tmp_path, monkeypatch, key):
    """Byte for byte the folder of ea5b05f, also with blocks of 64 bytes (lines across blocks) and
    offsets of 8 lines at most (strides double; workers seek mid-file)."""
    name = key.removesuffix("_gz")
    old_tok = {"input_sentence_size": 0} if name.startswith(("spm", "mono")) else {}
    run(raws[key.endswith("_gz")], tmp_path / "a", name, tokenizer=old_tok)
    assert digest(str(tmp_path / "a")) == FROZEN[key]
    monkeypatch.setattr(stream, "BLOCK_BYTES", 64)
    monkeypatch.setattr(stream, "OFFSET_SLOTS", 4)
    monkeypatch.setattr(encode, "CACHE_WORDS", 8)  # the word cache emptied often, long words not kept
    monkeypatch.setattr(encode, "CACHE_WORD_CHARS", 3)
    run(raws[key.endswith("_gz")], tmp_path / "b", name, tokenizer=old_tok, workers=3)
    assert digest(str(tmp_path / "b")) == FROZEN[key]


def test_default_sample_of_a_small_corpus_is_every_line(raws, tmp_path, caplog):
    """input_sentence_size's default (2,000,000 pairs) on 296 pairs: the same model, dictionary and
    data as input_sentence_size=0; the log says how many lines the tokenizer learned from."""
    with caplog.at_level(logging.INFO, logger="seqkit.preprocess"):
        run(raws[False], tmp_path / "default", "spm_bpe")
    assert "trained sentencepiece_bpe on de+en: 592 of 592 lines (seed 1)" in caplog.text
    new, old = digest(str(tmp_path / "default")), FROZEN["spm_bpe"]
    assert {k: v for k, v in new.items() if k.endswith((".txt", ".bin", ".idx"))} == {
        k: v for k, v in old.items() if k.endswith((".txt", ".bin", ".idx"))}
    run(raws[False], tmp_path / "zero", "spm_bpe", tokenizer={"input_sentence_size": 0})
    a, b = (torch.load(tmp_path / d / "tokenizer.de.pt", weights_only=True) for d in ("default", "zero"))
    assert a["config"]["input_sentence_size"] == 1_000_000 and b["config"]["input_sentence_size"] == 0
    assert _proto(a) == _proto(b)


def _proto(state):
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(state["model_proto"])
    proto.trainer_spec.ClearField("input")  # the trainer's temporary files
    proto.trainer_spec.ClearField("model_prefix")
    return proto.SerializeToString(deterministic=True)


def _pieces(folder):
    from seqkit.tokenizers import load_tokenizer

    return load_tokenizer(os.path.join(folder, "tokenizer.de.pt")).vocab_pieces()


def test_a_sample_is_drawn_with_the_seed(raws, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="seqkit.preprocess"):
        for name in ("a", "b"):
            run(raws[False], tmp_path / name, "wordpiece_separate", tokenizer={"input_sentence_size": 100, "seed": 7})
    assert "trained wordpiece on de: 100 of 296 lines (seed 7)" in caplog.text
    assert _pieces(tmp_path / "a") == _pieces(tmp_path / "b")
    run(raws[False], tmp_path / "all", "wordpiece_separate")
    assert _pieces(tmp_path / "a") != _pieces(tmp_path / "all")  # 100 pairs lack some of the words


def test_sample_ranks_are_seeded_sorted_and_distinct():
    assert sample_ranks(10, 0, 1) is None and sample_ranks(10, 10, 1) is None
    a = sample_ranks(1000, 300, 5, chunk=64)  # drawn chunk by chunk
    assert len(a) == len(np.unique(a)) == 300 and (np.diff(a) > 0).all() and a[-1] < 1000
    assert (a == sample_ranks(1000, 300, 5, chunk=64)).all() and not (a == sample_ranks(1000, 300, 6, chunk=64)).all()
    counts = np.bincount(np.concatenate([sample_ranks(40, 10, s, chunk=8) for s in range(400)]), minlength=40)
    assert counts.min() > 50 and counts.max() < 150  # uniform: 100 expected each


def test_ranks_map_to_the_lines_skip_empty_keeps():
    dropped = np.array([0, 2, 3, 7])
    kept = [i for i in range(10) if i not in dropped]
    assert stream.lines_of_ranks(np.arange(6), dropped).tolist() == kept


def test_each_line_is_encoded_once(raws, tmp_path, monkeypatch):
    calls = []
    encode = WordPieceTokenizer.encode
    monkeypatch.setattr(WordPieceTokenizer, "encode", lambda self, line: calls.append(line) or encode(self, line))
    run(raws[False], tmp_path / "wp", "wordpiece_separate")
    assert len(calls) == 2 * (296 + 30 + 12)  # both sides of every kept pair, once


def test_a_bpe_model_is_encoded_word_by_word_as_whole_lines(raws, tmp_path, monkeypatch):
    """The word cache is used where sound, and gives sentencepiece's ids of whole lines (spaces
    trimmed and collapsed, unknown characters, a literal ▁, a word too long to keep); not for
    unigram, another normalization or special tokens."""
    run(raws[False], tmp_path / "a", "spm_bpe")
    tok = load_tokenizer(torch.load(tmp_path / "a" / "tokenizer.de.pt", weights_only=True))
    table = encode.PieceIds(tok)
    assert table.words is not None
    monkeypatch.setattr(encode, "CACHE_WORDS", 6)
    lines = ["  Ein  Mann läuft ", "", "   ", "ẞΩ Hund\tKatze", "\u2581Haus \u2581 ", "Straße" * 9 + " Frau", "Ωø ç"]
    want = tok.encode_ids(lines)
    for _ in range(2):  # words new, then kept
        flat, sizes = table._word_ids(lines)
        assert sizes.tolist() == [len(r) for r in want] and flat.tolist() == [i for r in want for i in r]
    assert len(table.words) <= 6 + 12 and all(len(w) <= encode.CACHE_WORD_CHARS for w in table.words)
    with open(tmp_path / "t.txt", "w") as f:
        f.write("\n".join(read_all_lines(str(raws[False]) + "/train.de")) + "\n")
    for k, over in enumerate([{"name": "sentencepiece_unigram"}, {"normalization_rule_name": "nmt_nfkc"},
                              {"special_tokens": ["<x>"]}]):
        other = TOKENIZERS.build(TOKENIZERS.make_config({"name": "sentencepiece_bpe", "vocab_size": 50, **over}))
        os.makedirs(tmp_path / f"other{k}")
        other.train([str(tmp_path / "t.txt")], str(tmp_path / f"other{k}"))
        assert not other.words_apart() and encode.PieceIds(other).words is None


def test_sides_that_disagree_are_one_line(raws, tmp_path, capsys):
    raw = tmp_path / "raw"
    make_raw(str(raw))
    lines = read_all_lines(str(raw / "valid.en"))
    write(str(raw / "valid.en"), lines[:-3])
    with pytest.raises(SystemExit):
        main(["source_lang=de", "target_lang=en", f"trainpref={raw}/train", f"validpref={raw}/valid",
              f"destdir={tmp_path / 'out'}", "tokenizer=space"])
    err = capsys.readouterr().err.strip()
    assert err == (f"seqkit-preprocess: error: line counts differ: {raw}/valid.de has 30 lines, {raw}/valid.en has "
                   "27: the sides disagree from line 28 (one has no partner there); align the two files")
    assert sorted(os.listdir(tmp_path)) == ["raw"]  # the staging folder went


@pytest.mark.parametrize("block", [stream.BLOCK_BYTES, 5])
@pytest.mark.parametrize("data", [b"ok\ncaf\xe9\nmore\n", b"ok\n\xff", b"ok\nab\xe2\x82", b"\xc3\n"])
def test_utf8_errors_name_the_line_as_before(tmp_path, monkeypatch, block, data):
    monkeypatch.setattr(stream, "BLOCK_BYTES", block)
    path = tmp_path / "x.de"
    path.write_bytes(data)
    with pytest.raises(SeqkitError) as old:
        read_all_lines(str(path))
    with pytest.raises(SeqkitError) as new:
        stream.scan_file(str(path), None, want_blank=True)
    assert str(new.value) == str(old.value)


@pytest.mark.parametrize("newline", [True, False])
def test_a_line_over_1_mb_is_refused_by_number(tmp_path, monkeypatch, newline):
    monkeypatch.setattr(stream, "BLOCK_BYTES", 1 << 16)  # the long line spans blocks
    path = tmp_path / "big.de"
    path.write_bytes(b"a\nb\n" + b"x" * (stream.MAX_LINE_BYTES + 1) + (b"\nc\n" if newline else b""))
    with pytest.raises(SeqkitError, match=rf"^{path}:3: a line longer than 1 MB \(1,048,576 bytes\)"):
        stream.scan_file(str(path), None, want_blank=False)
    path.write_bytes(b"a\n" + b"x" * stream.MAX_LINE_BYTES + b"\n")  # at the limit: read
    assert stream.scan_file(str(path), None, want_blank=False).lines == 2


def test_scan_counts_lines_offsets_and_blanks(tmp_path, monkeypatch):
    monkeypatch.setattr(stream, "BLOCK_BYTES", 7)
    monkeypatch.setattr(stream, "OFFSET_SLOTS", 2)
    lines = ["a", "", " \u3000\t", "b c", "\u00a0", "d", "\u2028e", "f\r", "", "g"]
    path = tmp_path / "t.txt"
    path.write_bytes("\n".join(lines).encode())  # no newline at the end
    scan = stream.scan_file(str(path), None, want_blank=True)
    assert scan.lines == 10 and scan.blank == [1, 2, 4, 8]
    assert scan.stride == 4 and len(scan.offsets) == 3
    data = path.read_bytes()
    for i, off in enumerate(scan.offsets):
        assert data[off:].split(b"\n")[0] == lines[i * scan.stride].encode()


@pytest.mark.parametrize("drop", [False, True])
def test_training_lines_are_written_as_the_line_loop_wrote_them(tmp_path, monkeypatch, drop):
    """Every kept line as ``raw.rstrip(b"\\r\\n") + b"\\n"``: copied by blocks of 5 bytes (lines and
    \\r runs across blocks) when no pair is dropped, line by line otherwise."""
    monkeypatch.setattr(stream, "BLOCK_BYTES", 5)
    data = b"ab\r\ncd\r\r\n\ne\rf\n\r\n" + "gé".encode() * 4 + b"\nlast\r"
    path = tmp_path / "t.de"
    path.write_bytes(data)
    with open(path, "rb") as f:
        raw = list(f)  # the lines as the line loop reads them
    dropped = [2] if drop else []
    split = stream.Split("train", {"de": stream.scan_file(str(path), None, True)}, len(raw), np.array(dropped))
    stream.TrainFiles(split).write("de", None, str(tmp_path / "out"))
    want = b"".join(r.rstrip(b"\r\n") + b"\n" for i, r in enumerate(raw) if i not in dropped)
    assert (tmp_path / "out").read_bytes() == want and want.count(b"\n") == 7 - drop


def test_shards_are_whole_folders_of_the_training_pairs_in_order(raws, tmp_path, caplog):
    run(raws[False], tmp_path / "one", "spm_bpe")
    with caplog.at_level(logging.INFO, logger="seqkit.preprocess"):
        stats = run(raws[False], tmp_path / "three", "spm_bpe", shards=3)
    dirs = [tmp_path / "three" / f"shard{k}" for k in range(3)]
    assert sorted(os.listdir(tmp_path / "three")) == ["shard0", "shard1", "shard2"]
    assert f"task.data={dirs[0]}:{dirs[1]}:{dirs[2]}" in caplog.text
    one = digest(str(tmp_path / "one"))
    sizes = []
    for k, d in enumerate(dirs):
        mine = digest(str(d))
        assert set(mine) == set(one)
        for name in one:
            if not name.startswith(("train.", "preprocess.json")):  # dictionaries, tokenizers, valid, test
                assert mine[name] == one[name], name
        meta = json.loads((d / "preprocess.json").read_text())
        assert meta["shard"] == {"index": k, "count": 3} and meta["splits"]["valid"] == 30
        sizes.append(meta["splits"]["train"])
    assert sum(sizes) == 296 and min(sizes) >= 95 and stats["shards"][1]["train"]["langs"]["de"]["sentences"] == sizes[1]
    assert sum(json.loads((d / "preprocess.json").read_text())["stats"]["train"]["skipped_empty"] for d in dirs) == 4
    for lang in ("de", "en"):  # the shards' training pairs are the whole folder's, in order
        whole = IndexedDataset(str(tmp_path / "one" / f"train.de-en.{lang}"))
        parts = [IndexedDataset(str(d / f"train.de-en.{lang}")) for d in dirs]
        assert np.array_equal(np.concatenate([p.tokens for p in parts]), whole.tokens)
        assert np.array_equal(np.concatenate([p.sizes for p in parts]), whole.sizes)


def test_shards_refused_where_they_mean_nothing(raws, tmp_path, capsys):
    with pytest.raises(SeqkitError, match="shards=2 sets training text cut into shard folders, read by "
                                          "task=translation and language_modeling only; task=classification"):
        preprocess(PreprocessConfig(task="classification", trainpref=str(tmp_path / "x"), destdir=str(tmp_path / "o"),
                                    shards=2, tokenizer=TOKENIZERS.make_config({"name": "space"})))
    with pytest.raises(SeqkitError, match=r"shards=400: shard \d+ would hold no training pair \(296 in all\)"):
        run(raws[False], tmp_path / "many", "wordpiece_separate", shards=400)
    assert not (tmp_path / "many").exists()
