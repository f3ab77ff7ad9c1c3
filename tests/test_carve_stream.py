"""carve_unit=sentence on the streamed ``task=classification`` (issue 63): the rows held out, kept
and dropped are those :func:`seqkit.preprocess.carve.carve_sentences` chooses (on a phrase corpus with
NULs, non-ASCII and prefix tokens, whose order the sort must keep, and on SST-2 when present), and the
folder is the one the in-memory path wrote, byte for byte, in 1 and 2 workers."""

import hashlib
import os
import random
from pathlib import Path

import pytest

import seqkit
from seqkit.cli.preprocess import main
from seqkit.core.registry import TOKENIZERS
from seqkit.data.labelled_text import LabelledSplit, read_classification
from seqkit.preprocess import encode, stream
from seqkit.preprocess.carve import carve_sentences, held_rows
from seqkit.preprocess.carve_stream import carve_sentence_rows, sort_key
from seqkit.preprocess.labelled import preprocess_in_memory
from seqkit.preprocess.labelled_stream import check_source, sentence_texts
from seqkit.preprocess.text import PreprocessConfig, preprocess

from label_fixtures import write_tsv
from stream_fixtures import assert_same_refusal, digest

seqkit.import_builtin_components()

# "a" < "a\0" < "a\0b" < "a\1" as tuples' tokens: a plain join (" " or "\0") would sort them otherwise
VOCAB = ["a", "a\0", "a\0b", "a\1", "b", "é", "e", "ẞ", "😀", "the", "then", "x"]
GAPS = [" ", "  ", "\u3000", " \u3000 "]  # str.split() takes each as one gap
SST2 = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "sst2", "train.tsv")


def phrase_rows(seed, sentences=40):
    """(text, label) rows: each sentence and some (or all) of its phrases, a tenth repeated, shuffled."""
    rng = random.Random(seed)
    rows = []
    for _ in range(sentences):
        words = [rng.choice(VOCAB) for _ in range(rng.randint(1, 7))]
        rows.append(words)
        phrases = [words[i:j] for i in range(len(words)) for j in range(i + 1, len(words) + 1) if j - i < len(words)]
        rows += rng.sample(phrases, rng.randint(0, len(phrases)))
    rows += rng.sample(rows, len(rows) // 10)
    rng.shuffle(rows)
    texts = ["".join(w + rng.choice(GAPS) for w in words).strip(" ") for words in rows]
    return [(text, rng.choice(["neg", "pos"])) for text in texts]


def reference(texts, share, seed):
    """(held, dropped) row numbers and the summary, by carve_sentences."""
    rest, held, summary = carve_sentences(LabelledSplit("t", [(t,) for t in texts], ["0"] * len(texts),
                                                        list(range(len(texts)))), share, seed)
    dropped = sorted(set(range(len(texts))) - set(rest.lines) - set(held.lines))
    return held.lines, dropped, summary


def streamed(texts, share, seed, batch=7):
    held, dropped, summary = carve_sentence_rows(lambda: (texts[i:i + batch] for i in range(0, len(texts), batch)),
                                                 len(texts), share, seed)
    return held.tolist(), dropped.tolist(), summary


def test_sort_key_orders_as_the_token_tuples():
    rng = random.Random(0)
    rows = [[rng.choice(VOCAB + ["\0", "\0\0", "a\0\0"]) for _ in range(rng.randint(0, 4))] for _ in range(3000)]
    assert sorted(rows, key=sort_key) == sorted(rows, key=tuple)


@pytest.mark.parametrize("corpus", [0, 1, 2])
def test_streamed_sentence_carve_holds_keeps_and_drops_the_rows_carve_sentences_does(corpus):
    texts = [t for t, _ in phrase_rows(corpus)]
    shared = 0  # rows kept in train although inside a held sentence (a kept one holds them too)
    for share, seed in [(0.1, 1), (0.3, 2), (0.5, 3), (0.7, 4), (0.5, 9)]:
        held, dropped, summary = streamed(texts, share, seed)
        assert (held, dropped, summary) == reference(texts, share, seed)
        held_words = [texts[i].split() for i in held]
        shared += sum(any(_inside(texts[i].split(), h) for h in held_words)
                      for i in set(range(len(texts))) - set(held) - set(dropped))
        assert summary["dropped"] > 0
    assert shared > 0


def _inside(words, sentence):
    return any(sentence[i:i + len(words)] == words for i in range(len(sentence) - len(words) + 1))


def _configs(raw):
    common = dict(task="classification", trainpref=f"{raw}/train", validpref=f"{raw}/dev.tsv",
                  testpref=f"{raw}/test.tsv", carve_valid=0.3, carve_unit="sentence")
    return {
        "space": (dict(common, carve_seed=2), dict(name="space")),
        "spm_sample": (dict(common, carve_seed=5, carve_valid=0.5),
                       dict(name="sentencepiece_bpe", vocab_size=30, num_threads=1, input_sentence_size=60, seed=3)),
    }


# digests of the folders seqkit at 0dfa4f2 (carve_unit=sentence read in memory) wrote for _configs:
# made by running this file as a script over that checkout (with this carve_stream.py beside it)
FROZEN = {
    "space": {
        "dict.input.txt": "78b8274e64a3852b", "dict.label.txt": "063e6c1f6bc56885",
        "preprocess.json": "3bfaa1689ea34fc4", "test.input.bin": "2dde0bdf5d53738f",
        "test.input.idx": "7934e6af8d8338fd", "test.text.txt": "1a306db230f95f09",
        "tokenizer.input.pt": "1774779670f0aa4b", "train.input.bin": "8f71830760ae970b",
        "train.input.idx": "85ae619516798eba", "train.label.bin": "0093d786046d6eb4",
        "train.label.idx": "3dac5f48ae0e0c35", "train.text.txt": "f30b8c47bee219c9",
        "valid.input.bin": "3e9062f04e50b584", "valid.input.idx": "8f6db85a9072973e",
        "valid.label.bin": "be5bb11ed21280b8", "valid.label.idx": "09cd3ed620eab406",
        "valid.text.txt": "313093ea6792bfe0", "valid1.input.bin": "be9ff148c581cd48",
        "valid1.input.idx": "51b0816056064832", "valid1.label.bin": "cb3b51f1bd3fa89a",
        "valid1.label.idx": "0cbe31827ce8337c", "valid1.text.txt": "e79ef73d67a80e2b",
    },
    "spm_sample": {
        "dict.input.txt": "a0d48533702c6645", "dict.label.txt": "65ad00bc79a2c5c6",
        "preprocess.json": "a478f49d7e5d8ceb", "test.input.bin": "702abe94010bb23f",
        "test.input.idx": "78c18040369bc970", "test.text.txt": "1a306db230f95f09",
        "tokenizer.input.pt": "222f686396ea1e6a", "train.input.bin": "fb45f85ebd0b1e28",
        "train.input.idx": "6a2c5e6a1bf16c47", "train.label.bin": "056f475edebd02e5",
        "train.label.idx": "011f204e5815b943", "train.text.txt": "2a71117cc0647dbf",
        "valid.input.bin": "9cfce99a358492eb", "valid.input.idx": "93f64c0ca42f6ab0",
        "valid.label.bin": "aef879c0567197cd", "valid.label.idx": "f23235a5658ea843",
        "valid.text.txt": "15e0b26bb28d91bb", "valid1.input.bin": "8ed55cddf7695a00",
        "valid1.input.idx": "ce298bd805107b7d", "valid1.label.bin": "cb3b51f1bd3fa89a",
        "valid1.label.idx": "0cbe31827ce8337c", "valid1.text.txt": "e79ef73d67a80e2b",
    },
}


def _raw(root, name):
    """train.tsv: :func:`phrase_rows`, a held-out sentence given a word of its own (train lacks it),
    a row that ``name``'s carve drops labelled ``rare`` (a label train lacks after the carve);
    dev.tsv and test.tsv (no labels)."""
    os.makedirs(root, exist_ok=True)
    fields = _configs(root)[name][0]
    carve = (fields["carve_valid"], fields["carve_seed"])
    rows = phrase_rows(0)
    for i in reference([t for t, _ in rows], *carve)[0]:  # the first held sentence that stays held with it
        words = rows[i][0].split()
        own = [(t + " ω", y) if t.split() == words else (t, y) for t, y in rows]
        held, dropped, _ = reference([t for t, _ in own], *carve)
        if i in held:
            break
    else:
        raise AssertionError("no held sentence stays held with a word of its own")
    rows = own
    rows[dropped[0]] = (rows[dropped[0]][0], "rare")
    write_tsv(Path(root, "train.tsv"), ["sentence", "label"], rows)
    write_tsv(Path(root, "dev.tsv"), ["sentence", "label"], phrase_rows(5, 3)[:9])
    write_tsv(Path(root, "test.tsv"), ["sentence"], [(t,) for t, _ in phrase_rows(6, 3)[:7]])
    return root


def _run(fn, raw, dest, name, **over):
    fields, tok = _configs(raw)[name]
    cfg = PreprocessConfig(destdir=str(dest), tokenizer=TOKENIZERS.make_config(tok), **{**fields, **over})
    fn(cfg, cfg.tokenizer, str(dest)) if fn is preprocess_in_memory else fn(cfg)


def _digest(folder, raw):
    out = digest(folder)
    del out["preprocess.json"]  # names the input folder
    with open(os.path.join(folder, "preprocess.json"), encoding="utf-8") as f:
        out["preprocess.json"] = hashlib.sha256(f.read().replace(str(raw), "RAW").encode()).hexdigest()[:16]
    return out


@pytest.mark.parametrize("name", ["space", "spm_sample"])
def test_streamed_folder_is_the_in_memory_one(tmp_path, monkeypatch, name):
    """The folder of the in-memory path (carve_sentences's rows, dictionary, labels and tokenizer
    from the kept rows: ``rare`` is only on a dropped row), in 1 worker, then in 2 with blocks of
    64 bytes and batches of 5 lines (rows across blocks, several batches a range)."""
    raw = _raw(str(tmp_path / "raw"), name)
    _run(preprocess_in_memory, raw, tmp_path / "old", name)
    old = _digest(str(tmp_path / "old"), raw)
    assert "rare" not in (tmp_path / "old" / "dict.label.txt").read_text()
    assert name != "space" or "ω" not in (tmp_path / "old" / "dict.input.txt").read_text()
    _run(preprocess, raw, tmp_path / "one", name)
    assert _digest(str(tmp_path / "one"), raw) == old
    monkeypatch.setattr(stream, "BLOCK_BYTES", 64)
    monkeypatch.setattr(encode, "BATCH_LINES", 5)
    _run(preprocess, raw, tmp_path / "two", name, workers=2)
    assert _digest(str(tmp_path / "two"), raw) == old
    assert old == FROZEN[name]


def test_a_word_only_held_out_rows_have_is_left_out_of_the_dictionary(tmp_path, monkeypatch):
    """carve_unit=example, word tokenizer: the held-out row's own word gets no id (as in memory),
    also when a later batch of its range counts pieces (batches of 5 lines)."""
    monkeypatch.setattr(encode, "BATCH_LINES", 5)
    rows = [(f"w{i % 7} w{i % 5}", "pos" if i % 3 else "neg") for i in range(40)]
    held = held_rows(len(rows), 0.2, 1, "examples")
    rows[held[0]] = ("ω " + rows[held[0]][0], rows[held[0]][1])
    write_tsv(tmp_path / "train.tsv", ["sentence", "label"], rows)
    folders = []
    for fn in (preprocess_in_memory, preprocess):
        dest = tmp_path / fn.__name__
        cfg = PreprocessConfig(task="classification", trainpref=str(tmp_path / "train.tsv"), destdir=str(dest),
                               carve_valid=0.2, carve_seed=1, tokenizer=TOKENIZERS.make_config({"name": "space"}))
        fn(cfg, cfg.tokenizer, str(dest)) if fn is preprocess_in_memory else fn(cfg)
        folders.append(digest(str(dest)))
    assert folders[1] == folders[0]
    assert "ω" not in (tmp_path / "preprocess" / "dict.input.txt").read_text()


SENTENCE = {"carve_valid": 0.5, "carve_unit": "sentence"}
# held out with seed 6: "w0 w1 w2" and "w3 w4" (the only "odd" row train would keep but for the
# dropped "w1 w2"): refused, naming line 4
ROWS = "sentence\tlabel\nw0 w1 w2\tpos\nw1 w2\todd\nw3 w4\todd\nw5 w6 w7\tneg\nw6\tpos\nw8 w9\tpos\nw2\tneg\n"
REFUSED = {
    "held_label_not_in_train": ("classification", {"train.tsv": ROWS}, {**SENTENCE, "carve_seed": 6}),
    "too_few_sentences": ("classification", {"train.tsv": "sentence\tlabel\na b c\tpos\nb c\tneg\na\tpos\n"},
                          {**SENTENCE, "carve_valid": 0.1}),
    "pairs": ("classification", {"train.tsv": "a\tb\tlabel\nx y\tz\t1\nx\tz\t0\n"},
              {**SENTENCE, "text_columns": ["a", "b"]}),
    "tagging": ("tagging", {"train": "EU B-ORG\nrejects O\n\nPeter B-PER\n\nBlackburn B-PER\nsaid O\n"}, SENTENCE),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refusals_are_the_in_memory_ones(tmp_path, case):
    """A carve that leaves a label to the held-out rows alone, too few sentences, sentence pairs and
    tagged sentences: the in-memory path's one line; nothing written."""
    assert_same_refusal(tmp_path, *REFUSED[case])


def test_workers_with_the_sentence_carve_from_the_command_line(tmp_path, run_cli):
    """``workers=2`` with ``carve_unit=sentence`` (refused while the carve was in memory)."""
    write_tsv(tmp_path / "train.tsv", ["sentence", "label"], phrase_rows(1))
    r = run_cli(main, ["task=classification", f"trainpref={tmp_path}/train", "carve_valid=0.2", "carve_unit=sentence",
                       "workers=2", f"destdir={tmp_path / 'bin'}", "tokenizer=space"])
    assert r.code == 0, r.err
    assert "sentences held out as split valid" in r.err


@pytest.mark.skipif(not os.path.isfile(SST2), reason="SST-2 not in ../shared/data/sst2")
def test_sst2_streamed_sentence_carve_is_carve_sentences(tmp_path):
    """What examples/classification's SST-2 recipes carve (carve_valid=0.1 carve_seed=1)."""
    split = read_classification(SST2, ["sentence"], "label")
    rest, held, summary = carve_sentences(split, 0.1, 1)
    src = check_source("train", SST2, ["sentence"], "label", str(tmp_path))
    got_held, got_dropped, got = carve_sentence_rows(sentence_texts(src), src.rows, 0.1, 1)
    assert got == summary == {"sentences": 6885, "dropped": 5678}
    row_of = {line: i for i, line in enumerate(split.lines)}
    assert got_held.tolist() == [row_of[line] for line in held.lines]
    kept = set(range(src.rows)) - set(got_held.tolist()) - set(got_dropped.tolist())
    assert sorted(kept) == [row_of[line] for line in rest.lines]


if __name__ == "__main__":  # print the digests of this checkout's folders (how FROZEN was made)
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for key in _configs(tmp):
            r = _raw(os.path.join(tmp, f"raw_{key}"), key)
            _run(preprocess, r, os.path.join(tmp, key), key)
            print(f"    {key!r}: {_digest(os.path.join(tmp, key), r)!r},")
            sys.stdout.flush()
