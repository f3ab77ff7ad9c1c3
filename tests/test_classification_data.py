"""Sentence classification and sequence tagging data: preprocess layouts (TSV, sentence pairs,
fairseq's GLUE plain files, CoNLL), the binarized layout with its collation, first-piece tag
storage, and one-line errors on bad input (nothing written)."""

import json
import os

import pytest

import seqkit
from seqkit.cli.common import ConfigBuilder
from seqkit.cli.preprocess import main as preprocess
from seqkit.core.errors import SeqkitError
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.data.labelled_dataset import FIRST_TAG, IGNORE
from seqkit.generation.classifier import Classifier
from seqkit.tokenizers import load_tokenizer
from seqkit.training.config import TrainConfig

from label_fixtures import (  # noqa: F401  (fixtures are used by name)
    DOCSTART,
    MRPC_COLUMNS,
    MRPC_HEADER,
    load_task,
    mrpc_rows,
    one_line_error,
    pair_rows,
    pairs,
    sentence,
    single,
    single_rows,
    spm,
    tagged,
    tagged_ckpt,
    tagged_sentences,
    write_conll,
    write_tsv,
)

seqkit.import_builtin_components()


# -- preprocess: classification ---------------------------------------------------------------------------
def test_single_sentence_tsv_layout(single):
    root, rows = single
    dest = root / "bin"
    assert sorted(os.listdir(dest)) == sorted(
        ["dict.input.txt", "dict.label.txt", "tokenizer.input.pt", "preprocess.json"]
        + [f"{s}.input.{e}" for s in ("train", "valid", "test") for e in ("bin", "idx")]
        + [f"{s}.label.{e}" for s in ("train", "valid") for e in ("bin", "idx")]  # test has no labels
        + [f"{s}.text.txt" for s in ("train", "valid", "test")])
    labels = ["neg", "neu", "pos"]
    counts = {x: sum(1 for _, y in rows["train"] if y == x) for x in labels}
    assert (dest / "dict.label.txt").read_text() == "".join(f"{x} {counts[x]}\n" for x in labels)
    meta = json.loads((dest / "preprocess.json").read_text())
    assert (meta["task"], meta["pairs"], meta["labels"]) == ("classification", False, labels)
    assert meta["splits"] == {"train": 90, "valid": 15, "test": 6}
    assert [meta["stats"][s]["labelled"] for s in ("train", "valid", "test")] == [True, True, False]

    d = Dictionary.load(str(dest / "dict.input.txt"))
    tok = load_tokenizer(str(dest / "tokenizer.input.pt"))
    inputs, stored = IndexedDataset(str(dest / "valid.input")), IndexedDataset(str(dest / "valid.label"))
    for i, (text, label) in enumerate(rows["dev"]):
        ids = inputs[i].tolist()
        assert ids[0] == d.bos() and ids[-1] == d.eos() and ids.count(d.eos()) == 1  # <s> a </s>
        assert tok.decode(d.string(inputs[i][1:-1])) == text
        assert stored[i].tolist() == [labels.index(label)]
    assert (dest / "test.text.txt").read_text().splitlines() == [s for s, _ in rows["test"]]


def test_carve_valid_holds_out_seeded_training_examples(single, tmp_path, run_cli):
    """carve_valid: a seeded share of train becomes `valid`, the official dev file becomes valid1; the same seed gives the same split, another seed another."""
    root, rows = single
    common = ["task=classification", f"trainpref={root}/train", f"validpref={root}/dev.tsv", *spm()]

    def carved(seed):
        dest = tmp_path / f"carved{seed}"
        preprocess([*common, "carve_valid=0.1", f"carve_seed={seed}", f"destdir={dest}", "overwrite=true"])
        return dest, json.loads((dest / "preprocess.json").read_text())

    dest, meta = carved(1)
    assert meta["splits"] == {"train": 81, "valid": 9, "valid1": 15}
    assert meta["carved"] == {"split": "valid", "share": 0.1, "seed": 1, "unit": "example", "from": str(root / "train.tsv")}
    train_text = (dest / "train.text.txt").read_text().splitlines()
    held = (dest / "valid.text.txt").read_text().splitlines()
    everything = [s for s, _ in rows["train"]]
    assert sorted(train_text + held) == sorted(everything) and len(held) == 9
    assert held == [s for s in everything if s in held]  # file order kept
    # the held-out labels travel with their sentences; the official dev file is valid1, unchanged
    labels = ["neg", "neu", "pos"]
    by_text = dict(rows["train"])
    assert [labels[x[0]] for x in map(list, IndexedDataset(str(dest / "valid.label")))] == [by_text[s] for s in held]
    assert (dest / "valid1.text.txt").read_text().splitlines() == [s for s, _ in rows["dev"]]
    assert (dest / "dict.label.txt").read_text().startswith("neg ")
    assert carved(1)[1]["splits"] == meta["splits"]
    assert (tmp_path / "carved1" / "valid.text.txt").read_text().splitlines() == held
    assert (carved(2)[0] / "valid.text.txt").read_text().splitlines() != held
    # translation has its own validation files: one line, nothing written
    r = run_cli(preprocess, ["task=translation", "source_lang=de", "target_lang=en", f"trainpref={root}/x",
                             "carve_valid=0.05", f"destdir={tmp_path / 'mt'}"])
    assert r.code == 1 and "carve_valid= applies to task=classification and tagging" in r.err
    assert "Traceback" not in r.err and not (tmp_path / "mt").exists()
    r = run_cli(preprocess, [*common, "carve_valid=1.5", f"destdir={tmp_path / 'big'}"])
    assert r.code != 0 and "carve_valid" in r.err and "Traceback" not in r.err


def test_pair_tsv_with_bom_layout_and_segments(pairs):
    root, rows = pairs
    dest = root / "bin"
    meta = json.loads((dest / "preprocess.json").read_text())
    assert (meta["task"], meta["pairs"], meta["labels"]) == ("classification", True, ["0", "1"])
    assert not (dest / "test.label.idx").exists() and meta["stats"]["test"]["labelled"] is False
    assert (dest / "valid.text.txt").read_text().splitlines() == [f"{a}\t{b}" for a, b, _ in rows["dev"]]

    task = load_task("classification", dest)
    d, tok = task.src_dict, task.tokenizer()
    ds = task.load_dataset("valid")
    for i, (a, b, _) in enumerate(rows["dev"]):
        ids = ds.src[i].tolist()
        sep = ids.index(d.eos())
        # <s> a </s> b </s>
        assert ids[0] == d.bos() and ids[-1] == d.eos() and ids.count(d.eos()) == 2
        assert tok.decode(d.string(ds.src[i][1:sep])) == a and tok.decode(d.string(ds.src[i][sep + 1:-1])) == b

    batch = ds.collate([0, 1, 2, 3])
    tokens, lengths = batch["net_input"]["src_tokens"], batch["net_input"]["src_lengths"]
    segments = batch["net_input"]["segments"]
    assert segments.shape == tokens.shape and len(set(lengths.tolist())) > 1  # some rows are padded
    for row, n in zip(range(4), lengths.tolist()):
        sep = tokens[row].tolist().index(d.eos())
        # 0 up to and including the first </s>, 1 after it, 0 on padding
        assert segments[row].tolist() == [0] * (sep + 1) + [1] * (n - sep - 1) + [0] * (tokens.size(1) - n)
        assert tokens[row, n:].eq(d.pad()).all()
    assert batch["target"].tolist() == [int(q) for _, _, q in rows["dev"][:4]]
    assert batch["sample_size"] == batch["nsentences"] == 4  # the loss is a sum over the 4 labels
    assert batch["ntokens"] == int(lengths.sum())  # input tokens (throughput)

    test = task.load_dataset("test", with_target=False)
    assert test.labels is None and "target" not in test.collate([0, 1])


def test_glue_plain_layout(tmp_path):
    """fairseq's GLUE folders: {pref}.input0, {pref}.input1 and {pref}.label (test: no label file)."""
    raw = tmp_path / "raw"
    raw.mkdir()
    rows = {"train": pair_rows(30, 0), "dev": pair_rows(6, 1), "test": pair_rows(4, 2)}
    for split, r in rows.items():
        (raw / f"{split}.input0").write_text("".join(a + "\n" for a, _, _ in r))
        (raw / f"{split}.input1").write_text("".join(b + "\n" for _, b, _ in r))
        if split != "test":
            (raw / f"{split}.label").write_text("".join(q + "\n" for _, _, q in r))
    dest = tmp_path / "bin"
    preprocess(["task=classification", f"trainpref={raw}/train", f"validpref={raw}/dev", f"testpref={raw}/test",
                f"destdir={dest}", "text_columns=[input0,input1]", "tokenizer=space"])
    meta = json.loads((dest / "preprocess.json").read_text())
    assert (meta["pairs"], meta["labels"], meta["splits"]) == (True, ["0", "1"], {"train": 30, "valid": 6, "test": 4})
    assert not (dest / "test.label.idx").exists() and (dest / "valid.label.idx").exists()
    task = load_task("classification", dest)
    assert task.load_dataset("valid").collate([0, 1, 2])["target"].tolist() == [int(q) for _, _, q in rows["dev"][:3]]
    assert (dest / "test.text.txt").read_text().splitlines() == [f"{a}\t{b}" for a, b, _ in rows["test"]]

    # one input file: single sentences
    for name in ("train.input1", "dev.input1", "test.input1"):
        (raw / name).unlink()
    preprocess(["task=classification", f"trainpref={raw}/train", f"validpref={raw}/dev", f"destdir={tmp_path}/one",
                "tokenizer=space"])
    assert json.loads((tmp_path / "one" / "preprocess.json").read_text())["pairs"] is False


# -- preprocess: tagging ----------------------------------------------------------------------------------
def test_tagging_first_piece_round_trip(tagged, tagged_ckpt):
    """words -> pieces -> a label on each word's first piece only -> collate targets (IGNORE
    elsewhere) -> word-level predictions: exactly one tag per word, however many pieces."""
    root, sents = tagged
    dest = root / "bin"
    tags = sorted({t for _, ts in sents["train"] for t in ts})
    meta = json.loads((dest / "preprocess.json").read_text())
    assert (meta["task"], meta["pairs"], meta["labels"]) == ("tagging", False, tags)
    assert meta["splits"] == {"train": 60, "valid": 8, "test": 4}  # -DOCSTART- lines are no sentences
    counts = {x: sum(ts.count(x) for _, ts in sents["train"]) for x in tags}
    assert (dest / "dict.label.txt").read_text() == "".join(f"{x} {counts[x]}\n" for x in tags)
    assert (dest / "valid.text.txt").read_text().splitlines() == [" ".join(w) for w, _ in sents["dev"]]

    task = load_task("tagging", dest)
    d, tok = task.src_dict, task.tokenizer()
    ds = task.load_dataset("valid")
    multi_piece = 0
    for i, (words, gold) in enumerate(sents["dev"]):
        ids, stored = ds.src[i].tolist(), ds.labels[i].tolist()
        assert len(stored) == len(ids) and ids[0] == d.bos() and ids[-1] == d.eos()
        starts = [p for p, v in enumerate(stored) if v >= FIRST_TAG]
        assert ds.word_starts(i).tolist() == starts and len(starts) == len(words)
        assert [tags[stored[p] - FIRST_TAG] for p in starts] == gold
        assert all(v == 0 for p, v in enumerate(stored) if p not in starts)
        for word, s, e in zip(words, starts, starts[1:] + [len(ids) - 1]):
            assert tok.decode(d.string(ds.src[i][s:e])) == word
            multi_piece += e - s > 1
    assert multi_piece > len(sents["dev"])  # the small vocabulary splits many words

    order = list(range(len(ds)))
    batch = ds.collate(order)
    target, tokens = batch["target"], batch["net_input"]["src_tokens"]
    assert target.shape == tokens.shape and "segments" not in batch["net_input"]
    for row, i in enumerate(order):
        expected = [IGNORE] * tokens.size(1)
        for p, t in zip(ds.word_starts(i).tolist(), sents["dev"][i][1]):
            expected[p] = tags.index(t)
        assert target[row].tolist() == expected  # IGNORE on later pieces, <s>, </s> and padding
    assert batch["sample_size"] == sum(len(w) for w, _ in sents["dev"])  # one scored target per word
    assert batch["ntokens"] == int(batch["net_input"]["src_lengths"].sum())

    c = Classifier.from_checkpoint(str(tagged_ckpt / "checkpoint_last.pt"))
    results = c.predict_ids([ds.src[i].tolist() for i in order], [ds.word_starts(i).tolist() for i in order])
    for r, (words, _) in zip(results, sents["dev"]):
        assert len(r["tags"]) == len(r["probs"]) == len(words) and set(r["tags"]) <= set(tags)
    # raw words encode as preprocessing stored them, and predict the same tags
    ids, starts, _ = c.encode([" ".join(w) for w, _ in sents["dev"]])
    assert ids == [ds.src[i].tolist() for i in order] and starts == [ds.word_starts(i).tolist() for i in order]
    raw = c.predict([" ".join(w) for w, _ in sents["dev"]])
    assert [r["tags"] for r in raw] == [r["tags"] for r in results]
    assert [r["words"] for r in raw] == [w for w, _ in sents["dev"]]

    # the untagged test split stores word starts only (1), and is predicted all the same
    test = task.load_dataset("test", with_target=False)
    assert all(set(test.labels[i].tolist()) == {0, 1} for i in range(len(test)))
    assert [len(test.word_starts(i)) for i in range(len(test))] == [len(w) for w, _ in sents["test"]]
    with pytest.raises(SeqkitError, match="has no tags"):
        task.load_dataset("test")  # training or validating on it would score nothing


# -- preprocess: bad input is one line, and nothing is written -----------------------------------------------
def _bad_classification(raw):
    write_tsv(raw / "train.tsv", ["sentence", "label"], single_rows(30, 0))
    write_tsv(raw / "dev.tsv", ["sentence", "label"], single_rows(5, 1))


def case_missing_text_column(raw):
    write_tsv(raw / "train.tsv", ["text", "label"], single_rows(10, 0))
    return ["task=classification", f"trainpref={raw}/train"], [f"{raw}/train.tsv:1", "'sentence'", "text_columns"]


def case_unseen_dev_label(raw):
    _bad_classification(raw)
    rows = single_rows(5, 1)
    rows[2] = (rows[2][0], "mixed")
    write_tsv(raw / "dev.tsv", ["sentence", "label"], rows)
    return (["task=classification", f"trainpref={raw}/train", f"validpref={raw}/dev"],
            [f"{raw}/dev.tsv:4: label 'mixed' in valid never occurs in train", "neg, neu, pos"])


def case_unseen_dev_label_plain_layout(raw):
    for split, n in (("train", 10), ("dev", 5)):
        rows = single_rows(n, 0)
        (raw / f"{split}.input0").write_text("".join(s + "\n" for s, _ in rows))
        (raw / f"{split}.label").write_text("".join((y if (split, i) != ("dev", 3) else "mixed") + "\n"
                                                    for i, (_, y) in enumerate(rows)))
    return (["task=classification", f"trainpref={raw}/train", f"validpref={raw}/dev"],
            [f"{raw}/dev.label:4: label 'mixed'"])


def case_unseen_dev_tag(raw):
    write_conll(raw / "train.conll", tagged_sentences(10, 0))
    dev = tagged_sentences(6, 1)
    dev[4][1][1] = "B-MISC"
    starts = write_conll(raw / "dev.conll", dev)
    return (["task=tagging", f"trainpref={raw}/train", f"validpref={raw}/dev"],
            [f"{raw}/dev.conll:{starts[4] + 1}: label 'B-MISC' in valid never occurs in train"])


def case_pair_without_second_sentence(raw):
    rows = mrpc_rows(pair_rows(6, 0))
    rows[1] = rows[1][:4] + ("  ",)
    write_tsv(raw / "train.tsv", MRPC_HEADER, rows, bom=True)
    return (["task=classification", f"trainpref={raw}/train", MRPC_COLUMNS, "label_column=Quality"],
            [f"{raw}/train.tsv:3: empty '#2 String'", "pair"])


def case_conll_wrong_columns(raw):
    starts = write_conll(raw / "train.conll", tagged_sentences(6, 0))
    lines = (raw / "train.conll").read_text().splitlines()
    lines[starts[3]] = lines[starts[3]].rsplit(" ", 1)[0]  # 2nd token of the 4th sentence: 3 columns
    (raw / "train.conll").write_text("\n".join(lines) + "\n")
    return ["task=tagging", f"trainpref={raw}/train"], [f"{raw}/train.conll:{starts[3] + 1}: 3 columns", "have 4"]


def case_train_without_labels(raw):
    write_tsv(raw / "train.tsv", ["sentence"], [(s,) for s, _ in single_rows(10, 0)])
    return ["task=classification", f"trainpref={raw}/train"], [f"{raw}/train.tsv", "training split has no labels",
                                                               "'label'"]


def case_train_without_tags(raw):
    write_conll(raw / "train.conll", tagged_sentences(6, 0), columns=1)
    return ["task=tagging", f"trainpref={raw}/train"], ["training split has no labels"]


def case_three_text_columns(raw):
    _bad_classification(raw)
    return (["task=classification", f"trainpref={raw}/train", "text_columns=[a,b,c]"],
            ["text_columns names 3 columns", "1 (a sentence) or 2 (a pair)"])


def case_plain_pair_with_one_text_column(raw):
    for name in ("train.input0", "train.input1", "train.label"):
        (raw / name).write_text("a b\nc d\n" if "input" in name else "0\n1\n")
    return ["task=classification", f"trainpref={raw}/train"], [f"{raw}/train.input1 exists", "text_columns"]


BAD = [case_missing_text_column, case_unseen_dev_label, case_unseen_dev_label_plain_layout, case_unseen_dev_tag,
       case_pair_without_second_sentence, case_conll_wrong_columns, case_train_without_labels,
       case_train_without_tags, case_three_text_columns, case_plain_pair_with_one_text_column]


@pytest.mark.parametrize("case", BAD, ids=[c.__name__[5:] for c in BAD])
def test_bad_input_is_one_line_and_writes_nothing(case, tmp_path, run_cli):
    raw = tmp_path / "raw"
    raw.mkdir()
    argv, fragments = case(raw)
    dest = tmp_path / "bin"
    r = run_cli(preprocess, [*argv, f"destdir={dest}", "tokenizer=space"])
    one_line_error(r, "seqkit-preprocess", *fragments)
    assert os.listdir(tmp_path) == ["raw"]  # no destdir, no staging folder


def test_preprocess_task_field_after_a_train_config_in_one_process(tmp_path):
    """hydra's config store is process-wide: train's ``task`` group must not turn preprocess's
    ``task=`` field into a group choice ("Could not override 'task'")."""
    ConfigBuilder("train", TrainConfig).compose(["task=classification"])
    write_tsv(tmp_path / "train.tsv", ["sentence", "label"], single_rows(10, 0))
    preprocess(["task=classification", f"trainpref={tmp_path}/train", f"destdir={tmp_path}/bin", "tokenizer=space"])
    assert json.loads((tmp_path / "bin" / "preprocess.json").read_text())["task"] == "classification"
    assert ConfigBuilder("train", TrainConfig).compose(["task=tagging"]).task.name == "tagging"


