"""Sentence classification and sequence tagging in training and use: metrics in the training log
and checkpoint_best, the model-kind check, the Classifier API, and seqkit-generate /
seqkit-score output, on tiny synthetic data (tests/label_fixtures.py)."""

import json

import pytest
import torch

import seqkit
from seqkit.cli.train import main as train
from seqkit.cli.score import main as score
from seqkit.cli.generate import main as generate
from seqkit.core.errors import SeqkitError
from seqkit.generation.classifier import Classifier
from seqkit.generation.translator import Translator
from seqkit.training.trainer import Trainer

from label_fixtures import (  # noqa: F401  (fixtures are used by name)
    BEST_BY_ACCURACY,
    one_line_error,
    pairs,
    pairs_ckpt,
    sentence,
    single,
    single_ckpt,
    tagged,
    tagged_ckpt,
    train_cfg,
    translation_ckpt,
    valid_records,
)

seqkit.import_builtin_components()


# -- training: metrics, checkpoint_best, model kinds ---------------------------------------------------------
def test_classification_metrics_pick_checkpoint_best(single, single_ckpt, tmp_path):
    records = valid_records(single_ckpt)
    assert [r["epoch"] for r in records] == [1, 2, 3, 4]
    accuracy = [r["accuracy"] for r in records]
    assert len(set(accuracy)) > 1  # the model learns something: the choice of checkpoint_best matters
    for i, r in enumerate(records):
        assert {"loss", "accuracy", "macro_f1", "mcc"} <= set(r) and not any(k.startswith("cm_") for k in r)
        assert 0 <= r["accuracy"] <= 100 and 0 <= r["macro_f1"] <= 100 and -100 <= r["mcc"] <= 100
        assert r["best_accuracy"] == max(accuracy[: i + 1])  # maximize: the running maximum
    best = torch.load(single_ckpt / "checkpoint_best.pt", weights_only=True)["train_state"]
    first_max = records[accuracy.index(max(accuracy))]
    assert best["best"] == max(accuracy) and best["num_updates"] == first_max["update"]

    # the same run without maximize keeps the lowest accuracy
    root, _ = single
    Trainer(train_cfg(root / "bin", tmp_path / "min", "classification", "cbow_tiny", *BEST_BY_ACCURACY)).run()
    low = valid_records(tmp_path / "min")
    assert [r["accuracy"] for r in low] == accuracy  # same seed, same updates
    assert [r["best_accuracy"] for r in low] == [min(accuracy[: i + 1]) for i in range(len(low))]


def test_tagging_metrics(tagged_ckpt):
    records = valid_records(tagged_ckpt)
    assert len(records) == 3 and records[-1]["f1"] > 0  # some entities found: the counts are not all zero
    for i, r in enumerate(records):
        assert {"loss", "precision", "recall", "f1", "accuracy"} <= set(r)
        assert not any(k.startswith("chunk_") for k in r)
        assert r["best_f1"] == max(x["f1"] for x in records[: i + 1])


def test_unknown_best_checkpoint_metric(single, tmp_path, run_cli):
    root, _ = single
    r = run_cli(train, ["task=classification", f"task.data={root}/bin", "model=cbow_tiny", "common.threads=1",
                        f"checkpoint.save_dir={tmp_path}/ck", "optimization.max_update=1",
                        "checkpoint.best_checkpoint_metric=bleu"])
    one_line_error(r, "seqkit-train", "best_checkpoint_metric='bleu' is not computed", "accuracy", "macro_f1",
                   log_lines_allowed=True)
    assert not list((tmp_path / "ck").glob("*.pt"))


def test_validation_on_a_split_without_labels_is_one_line(single, tmp_path, run_cli):
    root, _ = single
    r = run_cli(train, ["task=classification", f"task.data={root}/bin", "model=cbow_tiny", "common.threads=1",
                        f"checkpoint.save_dir={tmp_path}/ck", "optimization.max_update=1", "dataset.valid_subset=test"])
    one_line_error(r, "seqkit-train", "test.label.idx not found: the test split has no labels",
                   "dataset.valid_subset=", log_lines_allowed=True)


@pytest.mark.parametrize("task, data, model, fragments, absent", [
    ("classification", "single", "transformer_tiny", ["'transformer' is a seq2seq model", "task classification",
                                                      "cbow_tiny", "kim_cnn_tiny", "bilstm_classifier_tiny",
                                                      "transformer_classifier_tiny"], "tagger_tiny"),
    ("tagging", "tagged", "cbow_tiny", ["'cbow' is a classifier model", "bilstm_tagger_tiny",
                                        "transformer_tagger_tiny"], "cbow_tiny"),
    ("translation", "toy", "cbow_tiny", ["'cbow' is a classifier model", "task translation", "transformer_tiny",
                                         "lstm_tiny"], "cbow_tiny"),
    ("classification", "tagged", "cbow_tiny", ["was preprocessed for task tagging, not classification"], None),
    ("translation", "single", "transformer_tiny", ["was preprocessed for task classification, not translation",
                                                   "task=classification"], None),
])
def test_task_and_model_kinds_must_match(task, data, model, fragments, absent, request, tmp_path, run_cli):
    folder = {"single": lambda: request.getfixturevalue("single")[0] / "bin",
              "tagged": lambda: request.getfixturevalue("tagged")[0] / "bin",
              "toy": lambda: request.getfixturevalue("toy_data")[1]}[data]()
    r = run_cli(train, [f"task={task}", f"task.data={folder}", f"model={model}", f"checkpoint.save_dir={tmp_path}/ck"])
    line = one_line_error(r, "seqkit-train", *fragments, log_lines_allowed=True)
    if absent:
        assert absent not in line
    assert not (tmp_path / "ck").exists()


# -- the Classifier API -----------------------------------------------------------------------------------------
def test_classifier_predicts_strings_with_topk(single, single_ckpt):
    root, rows = single
    c = Classifier.from_checkpoint(str(single_ckpt / "checkpoint_best.pt"))
    assert c.labels == ["neg", "neu", "pos"] and not c.per_token
    texts = [s for s, _ in rows["dev"]]
    for k in (1, 2, 3, 10):
        for r in c.predict(texts, topk=k):
            probs = [p for _, p in r["topk"]]
            assert len(r["topk"]) == min(k, 3) and (r["label"], r["prob"]) == r["topk"][0]
            assert probs == sorted(probs, reverse=True) and all(0 <= p <= 1 for p in probs)
            assert sum(probs) <= 1 + 1e-6
            if k >= 3:
                assert sum(probs) == pytest.approx(1, abs=1e-5)
    # padding invariance: a batch of different lengths gives what one example at a time gives
    batched = c.predict(texts, topk=3, batch_size=16)
    for text, b in zip(texts, batched):
        (alone,) = c.predict([text], topk=3)
        assert dict(alone["topk"]) == pytest.approx(dict(b["topk"]), abs=1e-5)
    with pytest.raises(SeqkitError, match="single sentences"):
        c.predict(["one\ttwo"])


def test_classifier_predicts_pairs(pairs, pairs_ckpt):
    _, rows = pairs
    c = Classifier.from_checkpoint(str(pairs_ckpt / "checkpoint_last.pt"))
    as_tuples = c.predict([(a, b) for a, b, _ in rows["dev"]], topk=2)
    as_strings = c.predict([f"{a}\t{b}" for a, b, _ in rows["dev"]], topk=2, batch_size=5)
    assert [r["label"] for r in as_tuples] == [r["label"] for r in as_strings]
    for t, s in zip(as_tuples, as_strings):
        assert dict(t["topk"]) == pytest.approx(dict(s["topk"]), abs=1e-5)  # batch size changes the padding
        assert sum(p for _, p in t["topk"]) == pytest.approx(1, abs=1e-5)
    a, b, _ = rows["dev"][0]
    # the segments matter: swapping the sentences changes the input
    swapped = dict(c.predict([(b, a)], topk=2)[0]["topk"])
    assert abs(swapped["1"] - dict(as_tuples[0]["topk"])["1"]) > 1e-6
    with pytest.raises(SeqkitError, match="sentence pairs"):
        c.predict(["only one sentence"])
    with pytest.raises(SeqkitError, match="example 1: empty"):
        c.predict([(a, b), (a, " ")])


def test_tagger_padding_invariance(tagged, tagged_ckpt):
    _, sents = tagged
    c = Classifier.from_checkpoint(str(tagged_ckpt / "checkpoint_last.pt"))
    texts = [" ".join(w) for w, _ in sents["dev"]]
    batched = c.predict(texts)
    for text, b in zip(texts, batched):
        (alone,) = c.predict([text])
        assert alone["tags"] == b["tags"] and alone["probs"] == pytest.approx(b["probs"], abs=1e-5)


def test_checkpoint_kind_mismatch_is_one_line(single_ckpt, translation_ckpt):
    with pytest.raises(SeqkitError) as e:
        Translator.from_checkpoint(str(single_ckpt / "checkpoint_last.pt"))
    assert "classifier model" in str(e.value) and "Classifier" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(SeqkitError) as e:
        Classifier.from_checkpoint(str(translation_ckpt))
    assert "seq2seq model" in str(e.value) and "Translator" in str(e.value) and "\n" not in str(e.value)


# -- seqkit-generate and seqkit-score -----------------------------------------------------------------------------
def label_blocks(text):
    """{id: {kind: fields}} of S-/T-/L- output, checking the line order S, [T], L per id."""
    out, order = {}, []
    for line in text.splitlines():
        head, rest = line.split("\t", 1)
        kind, sid = head.split("-")
        out.setdefault(int(sid), {})[kind] = rest.split("\t")
        order.append((int(sid), kind))
    assert order == [(i, k) for i in sorted(out) for k in "STL" if k in out[i]]
    return out


def test_generate_and_score_classification(single, single_ckpt, run_cli, tmp_path):
    root, rows = single
    ckpt = single_ckpt / "checkpoint_last.pt"
    r = run_cli(generate, [f"path={ckpt}", f"task.data={root}/bin", "gen_subset=valid", "topk=2", "common.threads=1"])
    assert r.code == 0, r.err
    blocks = label_blocks(r.out)
    assert sorted(blocks) == list(range(len(rows["dev"])))
    for i, (text, gold) in enumerate(rows["dev"]):
        b = blocks[i]
        assert b["S"] == [text] and b["T"] == [gold]
        labels, probs = b["L"][0::2], [float(p) for p in b["L"][1::2]]
        assert len(labels) == 2 and set(labels) <= {"neg", "neu", "pos"} and probs == sorted(probs, reverse=True)
    hyp = tmp_path / "gen.txt"
    hyp.write_text(r.out)
    s = run_cli(score, [f"hyp={hyp}"])
    assert s.code == 0, s.err
    correct = sum(blocks[i]["L"][0] == gold for i, (_, gold) in enumerate(rows["dev"]))
    accuracy = 100 * correct / len(rows["dev"])
    assert f"accuracy = {accuracy:.2f} ({correct}/{len(rows['dev'])})" in s.out.splitlines()
    # the trainer's last validation scored the same weights the same way
    assert valid_records(single_ckpt)[-1]["accuracy"] == pytest.approx(accuracy, abs=0.01)

    # the test split has no labels: no T- lines
    r = run_cli(generate, [f"path={ckpt}", f"task.data={root}/bin", "gen_subset=test", "common.threads=1"])
    assert r.code == 0, r.err
    blocks = label_blocks(r.out)
    assert [blocks[i]["S"] for i in range(len(rows["test"]))] == [[s] for s, _ in rows["test"]]
    assert all("T" not in b and len(b["L"]) == 2 for b in blocks.values())

    r = run_cli(generate, [f"path={ckpt}", "input=-", "topk=2", "common.threads=1"],
                stdin="a good film\nthe plot was dull\n")
    assert r.code == 0, r.err
    blocks = label_blocks(r.out)
    assert [blocks[i]["S"] for i in (0, 1)] == [["a good film"], ["the plot was dull"]]
    assert all(len(b["L"]) == 4 and "T" not in b for b in blocks.values())
    r = run_cli(generate, [f"path={ckpt}", "input=-", "common.threads=1"], stdin="a good film\n\n")
    one_line_error(r, "seqkit-generate", "stdin line 2: empty line", log_lines_allowed=True)


def test_generate_pairs_from_stdin(pairs, pairs_ckpt, run_cli):
    root, rows = pairs
    ckpt = pairs_ckpt / "checkpoint_last.pt"
    lines = [f"{a}\t{b}" for a, b, _ in rows["dev"][:3]]
    r = run_cli(generate, [f"path={ckpt}", "input=-", "common.threads=1"], stdin="".join(x + "\n" for x in lines))
    assert r.code == 0, r.err
    blocks = label_blocks(r.out)
    assert [blocks[i]["S"] for i in range(3)] == [x.split("\t") for x in lines]
    # the split (MRPC layout, with gold labels from the Quality column) prints the same predictions
    r = run_cli(generate, [f"path={ckpt}", f"task.data={root}/bin", "gen_subset=valid", "common.threads=1"])
    split = label_blocks(r.out)
    for i in range(3):
        assert split[i]["L"][0] == blocks[i]["L"][0]
        assert float(split[i]["L"][1]) == pytest.approx(float(blocks[i]["L"][1]), abs=2e-4)
    assert [split[i]["T"] for i in range(len(rows["dev"]))] == [[q] for _, _, q in rows["dev"]]
    r = run_cli(generate, [f"path={ckpt}", "input=-", "common.threads=1"], stdin="no second sentence\n")
    one_line_error(r, "seqkit-generate", "sentence pairs", log_lines_allowed=True)


def test_generate_and_score_tagging(tagged, tagged_ckpt, run_cli, tmp_path):
    root, sents = tagged
    ckpt = tagged_ckpt / "checkpoint_last.pt"
    r = run_cli(generate, [f"path={ckpt}", f"task.data={root}/bin", "gen_subset=valid", "common.threads=1"])
    assert r.code == 0, r.err
    assert r.out.endswith("\n\n")
    blocks = r.out[:-2].split("\n\n")  # a blank line after each sentence
    assert len(blocks) == len(sents["dev"])
    tags = set(json.loads((root / "bin" / "preprocess.json").read_text())["labels"])
    for block, (words, gold) in zip(blocks, sents["dev"]):
        rows = [line.split(" ") for line in block.split("\n")]
        assert [row[:2] for row in rows] == [[w, g] for w, g in zip(words, gold)]  # word gold pred
        assert all(len(row) == 3 and row[2] in tags for row in rows)
    hyp = tmp_path / "gen.txt"
    hyp.write_text(r.out)
    s = run_cli(score, [f"hyp={hyp}"])
    assert s.code == 0, s.err
    (entity,) = [line for line in s.out.splitlines() if line.startswith("entity_f1 = ")]
    n_gold = len(sents["dev"]) + 0  # one entity per sentence
    assert f"{n_gold} gold phrases" in entity
    # the trainer's last validation counted the same way
    last = valid_records(tagged_ckpt)[-1]
    assert entity.startswith(f"entity_f1 = {last['f1']:.2f} precision = {last['precision']:.2f} "
                             f"recall = {last['recall']:.2f}")
    assert f"token_accuracy = {last['accuracy']:.2f}" in s.out

    # words only: 'word pred' columns
    r = run_cli(generate, [f"path={ckpt}", f"task.data={root}/bin", "gen_subset=test", "common.threads=1"])
    assert r.code == 0, r.err
    blocks = r.out[:-2].split("\n\n")
    assert [[line.split(" ")[0] for line in b.split("\n")] for b in blocks] == [w for w, _ in sents["test"]]
    assert all(len(line.split(" ")) == 2 for b in blocks for line in b.split("\n"))
    r = run_cli(generate, [f"path={ckpt}", "input=-", "common.threads=1"],
                stdin="Peter Blackburn visited Amsterdam\nMicrosoft said\n")
    assert r.code == 0, r.err
    rows = [line.split() for line in r.out.splitlines()]
    assert [row[0] if row else "" for row in rows] == ["Peter", "Blackburn", "visited", "Amsterdam", "",
                                                         "Microsoft", "said", ""]
    assert all(len(row) in (0, 2) for row in rows)

