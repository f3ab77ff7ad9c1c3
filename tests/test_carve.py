"""carve_valid= with carve_unit=sentence: on a phrase corpus (SST-2's layout: every phrase of each
training sentence is a row) whole sentences are held out and the phrases found only inside them
leave train; one-line errors for data it does not fit."""

import json

import seqkit
from seqkit.cli.preprocess import main as preprocess
from seqkit.data.labelled_text import LabelledSplit
from seqkit.preprocess.carve import carve

from label_fixtures import MRPC_COLUMNS, one_line_error, pairs, spm, write_tsv  # noqa: F401  (fixtures by name)

seqkit.import_builtin_components()

# 6 sentences and phrases of them; "the plot" is inside sentences 1 and 4, "dull" inside 2 and 5
SENTENCES = ["the plot is a mess", "dull and slow", "a quiet triumph", "the plot works", "long , dull , and loud",
             "warm and funny"]
PHRASES = ["the plot", "a mess", "is a mess", "dull", "and slow", "quiet triumph", "works", "long", "loud",
           "warm", "funny", "and funny"]


def phrase_corpus():
    rows = [(s, str(i % 2)) for i, s in enumerate(SENTENCES)] + [(p, str(len(p) % 2)) for p in PHRASES]
    return LabelledSplit("train.tsv", [(t,) for t, _ in rows], [y for _, y in rows], list(range(2, 2 + len(rows))))


def inside(phrase, sentence):
    return f" {phrase} " in f" {sentence} "


def test_sentence_carve_holds_out_whole_sentences_and_drops_their_own_phrases():
    train = phrase_corpus()
    rest, held, summary = carve(train, 0.5, 3, "sentence")
    held_text = [t[0] for t in held.texts]
    rest_text = [t[0] for t in rest.texts]
    # frozen for seed 3: half of the 6 sentences, in file order, labels and line numbers with them
    assert held_text == ["dull and slow", "the plot works", "warm and funny"]
    assert held.labels == ["1", "1", "1"] and held.lines == [3, 5, 7]
    assert summary == {"sentences": 6, "dropped": 5}  # and slow, works, warm, funny, and funny
    kept = [s for s in SENTENCES if s not in held_text]
    # a phrase stays in train exactly when a kept sentence holds it ("the plot" and "dull": shared)
    assert rest_text == kept + [p for p in PHRASES if any(inside(p, s) for s in kept)]
    assert "the plot" in rest_text and "dull" in rest_text and "works" not in rest_text
    assert len(rest_text) + len(held_text) + summary["dropped"] == len(train.texts)
    # the seed alone decides (not the order of a set); another seed, another split
    assert [t[0] for t in carve(train, 0.5, 3, "sentence")[1].texts] == held_text
    assert [t[0] for t in carve(train, 0.5, 4, "sentence")[1].texts] != held_text
    # by example: rows picked one by one, phrases of held sentences stay in train
    rest, held, summary = carve(train, 0.5, 3, "example")
    assert len(held.texts) == 9 and len(rest.texts) == 9 and summary == {}


def test_sentence_carve_from_the_command_line(tmp_path):
    rows = [(s, "pos" if i % 2 else "neg") for i, s in enumerate(SENTENCES + PHRASES)]
    write_tsv(tmp_path / "train.tsv", ["sentence", "label"], rows)
    write_tsv(tmp_path / "dev.tsv", ["sentence", "label"], rows[:3])
    dest = tmp_path / "bin"
    preprocess(["task=classification", f"trainpref={tmp_path}/train", f"validpref={tmp_path}/dev.tsv",
                "carve_valid=0.5", "carve_seed=3", "carve_unit=sentence", f"destdir={dest}", *spm(40)])
    meta = json.loads((dest / "preprocess.json").read_text())
    assert meta["carved"] == {"split": "valid", "share": 0.5, "seed": 3, "unit": "sentence",
                              "from": str(tmp_path / "train.tsv"), "sentences": 6, "dropped": 5}
    assert meta["splits"] == {"train": 10, "valid": 3, "valid1": 3}
    assert (dest / "valid.text.txt").read_text().splitlines() == ["dull and slow", "the plot works", "warm and funny"]


def test_sentence_carve_refuses_pairs_unknown_units_and_a_unit_without_a_carve(pairs, tmp_path, run_cli):
    root, _ = pairs
    common = ["task=classification", f"trainpref={root}/train", MRPC_COLUMNS, "label_column=Quality",
              "carve_valid=0.1", *spm()]
    r = run_cli(preprocess, [*common, "carve_unit=sentence", f"destdir={tmp_path / 'a'}"])
    one_line_error(r, "seqkit-preprocess", "carve_unit=sentence", "carve_unit=example")
    r = run_cli(preprocess, [*common, "carve_unit=phrase", f"destdir={tmp_path / 'b'}"])
    one_line_error(r, "seqkit-preprocess", "carve_unit='phrase'", "example, sentence")
    r = run_cli(preprocess, [*common, "carve_valid=0", "carve_unit=sentence", f"destdir={tmp_path / 'c'}"])
    one_line_error(r, "seqkit-preprocess", "carve_unit=sentence", "carve_valid=0 holds out nothing")
    assert not any((tmp_path / d).exists() for d in "abc")
