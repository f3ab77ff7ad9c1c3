"""seqkit-preprocess on a tiny parallel corpus: read-back, workers parity, one-line errors."""

import gzip
import json
import os
import random

import pytest
import torch

from seqkit.cli.preprocess import main
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers import load_tokenizer
from seqkit.tokenizers.wordpiece import WordPieceConfig

DE_EN = {
    "Ein": "A", "Mann": "man", "Frau": "woman", "Mädchen": "girl", "läuft": "runs", "über": "across",
    "die": "the", "Straße": "street", "grüne": "green", "Bälle": "balls", "schöne": "nice", "trägt": "carries",
}


def corpus(n, seed):
    rng = random.Random(seed)
    de, en = [], []
    for _ in range(n):
        words = [rng.choice(list(DE_EN)) for _ in range(rng.randint(2, 7))]
        end = rng.choice([".", "!", ""])
        de.append(" ".join(words) + end)
        en.append(" ".join(DE_EN[w] for w in words) + end)
    return de, en


def write(path, lines, gz=False):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if gz:
        path = str(path) + ".gz"
        data = gzip.compress(data, mtime=0)
    with open(path, "wb") as f:
        f.write(data)


@pytest.fixture
def raw(tmp_path):
    """train (gzipped, with two empty-side pairs), valid (with one empty pair), test."""
    root = tmp_path / "raw"
    root.mkdir()
    de, en = corpus(200, 0)
    de[5], en[9] = "", "  "
    write(root / "train.de", de, gz=True)
    write(root / "train.en", en, gz=True)
    de, en = corpus(20, 1)
    de[3] = en[3] = ""
    write(root / "valid.de", de)
    write(root / "valid.en", en)
    de, en = corpus(10, 2)
    write(root / "test.de", de)
    write(root / "test.en", en)
    return root


def args(raw, dest, *extra):
    return ["source_lang=de", "target_lang=en", f"trainpref={raw}/train", f"validpref={raw}/valid",
            f"testpref={raw}/test", f"destdir={dest}", *extra]


def test_preprocess_reads_back_to_the_original_text(raw, tmp_path):
    dest = tmp_path / "bin"
    main(args(raw, dest, "tokenizer=sentencepiece_bpe", "tokenizer.vocab_size=60"))
    assert sorted(os.listdir(dest)) == sorted(
        ["dict.de.txt", "dict.en.txt", "tokenizer.de.pt", "tokenizer.en.pt", "preprocess.json"]
        + [f"{s}.de-en.{lang}.{e}" for s in ("train", "valid", "test") for lang in ("de", "en") for e in ("bin", "idx")]
    )
    assert (dest / "dict.de.txt").read_bytes() == (dest / "dict.en.txt").read_bytes()  # joined
    meta = json.loads((dest / "preprocess.json").read_text())
    assert meta["splits"] == {"train": 198, "valid": 20, "test": 10}
    assert meta["tokenizer"]["name"] == "sentencepiece_bpe" and meta["tokenizer"]["vocab_size"] == 60
    assert meta["stats"]["train"]["skipped_empty"] == 2
    assert meta["stats"]["valid"]["langs"]["en"]["empty"] == 1

    for lang in ("de", "en"):
        tok = load_tokenizer(str(dest / f"tokenizer.{lang}.pt"))
        d = Dictionary.load(str(dest / f"dict.{lang}.txt"))
        lines = [line.rstrip("\n") for line in open(raw / f"valid.{lang}", encoding="utf-8")]
        ds = IndexedDataset(str(dest / f"valid.de-en.{lang}"))
        assert len(ds) == len(lines) == 20
        for i, line in enumerate(lines):
            assert ds[i][-1].item() == d.eos()
            assert tok.decode(d.string(ds[i])) == line
        assert ds[3].tolist() == [d.eos()]  # the empty valid line is kept, as eos alone


def test_workers_give_identical_output(raw, tmp_path):
    outs = []
    for workers in (1, 2):
        dest = tmp_path / f"w{workers}"
        cfg = PreprocessConfig(source_lang="de", target_lang="en", trainpref=f"{raw}/train",
                               validpref=f"{raw}/valid", testpref=f"{raw}/test", destdir=str(dest),
                               workers=workers, tokenizer=WordPieceConfig(vocab_size=80))
        stats = preprocess(cfg)
        outs.append(dest)
    assert stats["splits"]["train"]["langs"]["de"]["sentences"] == 198
    assert stats["lines_per_s"] > 0
    names = sorted(os.listdir(outs[0]))
    assert names == sorted(os.listdir(outs[1]))
    for name in names:
        if name.endswith(".pt"):  # torch.save embeds a random id: compare the content
            a, b = (torch.load(o / name, weights_only=True) for o in outs)
            assert a == b
        else:
            assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name


def test_one_language_and_separate_dictionaries(raw, tmp_path):
    lm = tmp_path / "lm"
    main(["source_lang=de", f"trainpref={raw}/train", f"validpref={raw}/valid,{raw}/test", f"destdir={lm}",
          "tokenizer=space"])  # an unquoted comma list, as fairseq users write it
    assert sorted(os.listdir(lm)) == ["dict.de.txt", "preprocess.json", "tokenizer.de.pt"] + [
        f"{split}.de.{ext}" for split in ("train", "valid", "valid1") for ext in ("bin", "idx")]
    assert json.loads((lm / "preprocess.json").read_text())["splits"] == {"train": 199, "valid": 20, "valid1": 10}
    assert len(IndexedDataset(str(tmp_path / "lm" / "train.de"))) == 199  # one empty line dropped

    main(args(raw, tmp_path / "sep", "joined_dictionary=false", "tokenizer=wordpiece", "tokenizer.vocab_size=60"))
    de, en = (Dictionary.load(str(tmp_path / "sep" / f"dict.{lang}.txt")) for lang in ("de", "en"))
    assert "Mädchen" not in en.indices and de.index("##ä") != de.unk()


def _fails(capsys, argv, expect):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("seqkit-preprocess: error:") and expect in err, err
    assert "Traceback" not in err


def test_errors_are_one_line_and_leave_destdir_alone(raw, tmp_path, capsys):
    dest = tmp_path / "out"
    _fails(capsys, args(raw, dest, "testpref=" + str(raw / "nope")), f"{raw}/nope.de")
    _fails(capsys, args(raw, dest, "tokenizer.foo=1"), "foo")
    _fails(capsys, args(raw, dest, "tokenizer=bogus"), "unknown tokenizer 'bogus'")
    write(raw / "valid.en", corpus(19, 1)[1])
    _fails(capsys, args(raw, dest), "valid.de has 20 lines")
    with open(raw / "test.en", "ab") as f:
        f.write(b"caf\xe9\n")
    _fails(capsys, args(raw, dest, "validpref=null"), f"{raw}/test.en:11: not valid UTF-8")
    assert not dest.exists()
    assert [p for p in os.listdir(tmp_path) if p != "raw"] == []  # no staging folder left behind

    dest.mkdir()
    (dest / "keep.txt").write_text("old")
    _fails(capsys, args(raw, dest), "not empty")
    _fails(capsys, args(raw, dest, "overwrite=true"), "valid.de has 20 lines")
    assert os.listdir(dest) == ["keep.txt"]


def test_help_lists_fields(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "trainpref" in out and "sentencepiece_unigram" in out and "wordpiece" in out
