"""Classification and tagging metrics (seqkit.scoring.metrics) and seqkit-score on classification/tagging output.

Every expected number is worked out by hand in the comments. The conlleval counts were also
checked once against conlleval.pl (2004-01-26) on 300 random IOB1/BIO sentence sets.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from seqkit.cli import score as score_cli
from seqkit.scoring.metrics import (chunks, classification_metrics, confusion_counts, confusion_matrix, entity_counts,
                                    entity_scores)


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def run_score(capsys, *args):
    score_cli.main(list(args))
    return capsys.readouterr().out.strip().splitlines()


def run_error(capsys, *args):
    """The one stderr line of a failing seqkit-score (exit code 1, nothing on stdout)."""
    with pytest.raises(SystemExit) as e:
        score_cli.main(list(args))
    out, err = capsys.readouterr()
    assert e.value.code == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("seqkit-score: error: ") and "Traceback" not in err, err
    return lines[0]

# --------------------------------------------------------------------------- classification


def test_confusion_matrix_rows_gold_cols_pred():
    assert confusion_matrix([0, 0, 1, 2, 2], [0, 1, 1, 2, 0], 3) == [[1, 1, 0], [0, 1, 0], [1, 0, 1]]
    with pytest.raises(ValueError):
        confusion_matrix([0, 3], [0, 0], 3)


def test_two_class_metrics():
    # rows gold, cols pred: 12 items, 9 correct -> accuracy 75.00
    cm = [[5, 1],
          [2, 4]]
    # label 0: tp 5, gold 6, pred 7 -> F1 = 2*5/(6+7) = 10/13 = 0.769231
    # label 1: tp 4, gold 6, pred 5 -> F1 = 2*4/(6+5) = 8/11  = 0.727273   macro = 0.748252 -> 74.83
    # MCC (binary, positive 1): TP 4, TN 5, FP 1, FN 2
    #   (4*5 - 1*2) / sqrt((4+1)(4+2)(5+1)(5+2)) = 18 / sqrt(1260) = 0.507093 -> 50.71
    # multi-class form gives the same: c 9, s 12, t = [6, 6], p = [7, 5]
    #   (9*12 - (7*6 + 5*6)) / sqrt((144 - 49 - 25)(144 - 36 - 36)) = 36 / sqrt(5040) = 0.507093
    assert 18 / math.sqrt(1260) == pytest.approx(36 / math.sqrt(5040))
    assert classification_metrics(cm) == {"accuracy": 75.0, "macro_f1": 74.83, "mcc": 50.71, "f1": 72.73}
    assert classification_metrics(cm, positive=0)["f1"] == 76.92  # 10/13
    assert "f1" not in classification_metrics(cm, positive=None)


def test_three_class_metrics():
    cm = [[4, 1, 0],
          [2, 3, 1],
          [0, 1, 2]]
    # gold counts t = [5, 6, 3], predicted counts p = [6, 5, 3], s = 14, c = 4+3+2 = 9 -> 64.29
    # F1: 2*4/(5+6) = 0.727273, 2*3/(6+5) = 0.545455, 2*2/(3+3) = 0.666667 -> mean 0.646465 -> 64.65
    # MCC: (9*14 - (6*5 + 5*6 + 3*3)) / sqrt((196 - 70)(196 - 70)) = (126 - 69) / 126 = 0.452381 -> 45.24
    assert classification_metrics(cm) == {"accuracy": 64.29, "macro_f1": 64.65, "mcc": 45.24}


def test_macro_f1_label_sets_and_undefined_mcc():
    # a label with neither gold nor predictions is left out of the macro mean (sklearn's default labels)
    assert classification_metrics([[5, 1, 0], [2, 4, 0], [0, 0, 0]]) == {"accuracy": 75.0, "macro_f1": 74.83,
                                                                        "mcc": 50.71}
    # a label seen only in gold has F1 0: label 0 F1 = 2*2/(2+3) = 0.8, label 1 F1 = 0 -> 40.00;
    # every prediction is label 0, so sum p^2 = 9 = s^2 and MCC is undefined -> 0
    assert classification_metrics([[2, 0], [1, 0]]) == {"accuracy": 66.67, "macro_f1": 40.0, "mcc": 0.0, "f1": 0.0}
    assert classification_metrics([[0, 0], [0, 0]]) == {"accuracy": 0.0, "macro_f1": 0.0, "mcc": 0.0, "f1": 0.0}


def test_confusion_counts_from_logits_and_ids():
    logits = torch.tensor([[[2.0, 0.1, 0.0], [0.0, 3.0, 0.0]],
                           [[0.0, 0.0, 1.0], [9.0, 0.0, 0.0]]])  # (B=2, T=2, K=3) -> argmax [[0, 1], [2, 0]]
    target = torch.tensor([[0, 2], [2, -1]])  # -1: padding, not counted
    expected = [[1, 0, 0], [0, 0, 0], [0, 1, 1]]
    got = confusion_counts(logits, target, 3)
    assert got.dtype == torch.long and got.tolist() == expected
    assert confusion_counts(torch.tensor([[0, 1], [2, 0]]), target, 3).tolist() == expected
    assert confusion_counts(torch.tensor([1, 1]), torch.tensor([9, 9]), 2, ignore_index=9).tolist() == [[0, 0], [0, 0]]
    with pytest.raises(ValueError):
        confusion_counts(torch.tensor([0, 5]), torch.tensor([0, 1]), 3)


# --------------------------------------------------------------------------- chunking


def test_chunks_iob1_conll2003():
    # CoNLL-2003 eng.testa lines: "U.N. NNP I-NP I-ORG / official NN I-NP O / Ekeus NNP B-NP I-PER /
    # heads VBZ I-VP O / for IN I-PP O / Baghdad NNP I-NP I-LOC / . . O O": I- after O starts a chunk
    assert chunks(["I-ORG", "O", "I-PER", "O", "O", "I-LOC", "O"]) == [("ORG", 0, 1), ("PER", 2, 3), ("LOC", 5, 6)]
    # B- only between two adjacent chunks of one type; I- of another type starts a new chunk
    assert chunks(["I-ORG", "I-ORG", "B-ORG", "I-ORG", "I-LOC", "O"]) == [("ORG", 0, 2), ("ORG", 2, 4), ("LOC", 4, 5)]


def test_chunks_bio():
    assert chunks(["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-MISC", "O"]) == [
        ("PER", 0, 2), ("LOC", 3, 4), ("LOC", 4, 5), ("MISC", 5, 6)]
    assert chunks(["B-ORG", "I-ORG"]) == [("ORG", 0, 2)]  # closed by the sentence end
    assert chunks(["O", "O"]) == [] and chunks([]) == []


def test_chunks_iobes():
    tags = ["S-PER", "B-ORG", "I-ORG", "E-ORG", "S-ORG", "O", "B-LOC", "E-LOC", "B-LOC", "E-LOC", "S-LOC", "S-LOC"]
    assert chunks(tags) == [("PER", 0, 1), ("ORG", 1, 4), ("ORG", 4, 5), ("LOC", 6, 8), ("LOC", 8, 10),
                            ("LOC", 10, 11), ("LOC", 11, 12)]


def test_chunk_types_with_hyphens():
    assert chunks(["B-ORG-X", "I-ORG-X"]) == [("ORG-X", 0, 2)]  # conlleval splits at the first "-"


# --------------------------------------------------------------------------- entity scores

# IOB1 sentences 1 and 2; sentence 3 is BIO
GOLD = [["O", "I-PER"],
        ["I-PER", "O", "I-LOC", "I-LOC"],
        ["B-ORG", "I-ORG", "O"]]
PRED = [["O", "I-PER"],
        ["I-PER", "O", "I-LOC", "O"],
        ["B-ORG", "O", "B-MISC"]]
# gold chunks: PER(s1 1-2) | PER(s2 0-1) LOC(s2 2-4) | ORG(s3 0-2)                    -> 4
# pred chunks: PER(s1 1-2) | PER(s2 0-1) LOC(s2 2-3) | ORG(s3 0-1) MISC(s3 2-3)       -> 5
# correct: the two PER chunks                                                          -> 2
# precision 2/5 = 40.00, recall 2/4 = 50.00, F1 = 2*40*50/90 = 44.44
# tokens 9; same tag: 2 + 3 + 1 = 6 -> accuracy 66.67


def test_chunks_never_cross_a_sentence_end():
    # concatenated, s1's final I-PER and s2's first I-PER would be one chunk (1, 3)
    assert [c for c in chunks(GOLD[0] + GOLD[1]) if c[0] == "PER"] == [("PER", 1, 3)]
    assert chunks(GOLD[0]) == [("PER", 1, 2)] and chunks(GOLD[1])[0] == ("PER", 0, 1)
    assert entity_counts(GOLD[:2], GOLD[:2])["per_type"]["PER"] == {"correct": 2, "predicted": 2, "gold": 2}


def test_entity_counts_and_scores():
    counts = entity_counts(GOLD, PRED)
    assert {k: counts[k] for k in ("correct", "predicted", "gold", "tokens", "correct_tokens")} == {
        "correct": 2, "predicted": 5, "gold": 4, "tokens": 9, "correct_tokens": 6}
    assert counts["per_type"] == {
        "LOC": {"correct": 0, "predicted": 1, "gold": 1},
        "MISC": {"correct": 0, "predicted": 1, "gold": 0},
        "ORG": {"correct": 0, "predicted": 1, "gold": 1},
        "PER": {"correct": 2, "predicted": 2, "gold": 2},
    }
    scores = entity_scores(counts)
    assert (scores["precision"], scores["recall"], scores["f1"], scores["accuracy"]) == (40.0, 50.0, 44.44, 66.67)
    assert scores["per_type"]["PER"] == {"precision": 100.0, "recall": 100.0, "f1": 100.0,
                                         "correct": 2, "predicted": 2, "gold": 2}
    assert scores["per_type"]["MISC"]["f1"] == 0.0  # predicted only: P 0, R undefined -> 0
    with pytest.raises(ValueError):
        entity_counts([["O"]], [["O", "O"]])


# --------------------------------------------------------------------------- seqkit-score: classification

CLS_OUT = """\
S-1\tawful
L-1\t1\t0.6\t0\t0.4
T-1\t0
S-0\tgreat movie
T-0\t1
L-0\t1\t0.9\t0\t0.1
S-2\tfine
T-2\t1
L-2\t1\t0.8\t0\t0.2
L-2\t0\t0.8
S-3\tbad
T-3\t0
L-3\t0\t0.7\t1\t0.3
"""
# gold 1 0 1 0, top-1 predictions 1 1 1 0 (first L- line per id): cm (labels 0, 1) = [[1, 1], [0, 2]]
# accuracy 3/4; F1(0) = 2/3, F1(1) = 4/5 -> macro 73.33; f1 (label '1') 80.00;
# MCC: TP 2, TN 1, FP 1, FN 0 -> (2*1 - 0) / sqrt(3*2*2*1) = 0.57735 -> 57.74


def test_score_classification_with_t_lines(tmp_path, capsys):
    hyp = tmp_path / "cls.out"
    hyp.write_text(CLS_OUT, encoding="utf-8")
    assert run_score(capsys, f"hyp={hyp}") == [
        "accuracy = 75.00 (3/4)",
        "macro_f1 = 73.33 (mean F1 over the 2 labels in gold or predictions)",
        "f1 = 80.00 (F1 of positive label '1')",
        "mcc = 57.74 (Matthews correlation x100)",
    ]
    records = [json.loads(x) for x in run_score(capsys, f"hyp={hyp}", "output_format=json", "task=classification")]
    assert [(r["metric"], r["score"]) for r in records] == [("accuracy", 75.0), ("macro_f1", 73.33), ("f1", 80.0),
                                                             ("mcc", 57.74)]
    assert records[0]["confusion_matrix"] == [[1, 1], [0, 2]] and records[0]["n"] == 4
    # positive_label=0: f1 of label '0' = 2/3
    assert run_score(capsys, f"hyp={hyp}", "positive_label=0")[2] == "f1 = 66.67 (F1 of positive label '0')"


# RTE: two named labels, none of them '1' (the default positive label, GLUE MRPC's)
RTE_OUT = "".join(f"S-{i}\ts{i}\nT-{i}\t{g}\nL-{i}\t{p}\t0.9\n" for i, (g, p) in enumerate(
    [("entailment", "entailment"), ("not_entailment", "entailment"), ("not_entailment", "not_entailment")]))


def test_score_named_binary_labels_without_label_1(tmp_path, capsys):
    """No label '1': no binary f1 is guessed, one line says how to ask for one; asked, it is reported."""
    hyp = write(tmp_path / "rte.out", RTE_OUT.splitlines())
    score_cli.main([f"hyp={hyp}"])
    out, err = capsys.readouterr()
    assert [line.split(" =")[0] for line in out.splitlines()] == ["accuracy", "macro_f1", "mcc"]
    said = [line for line in err.splitlines() if "f1" in line]
    assert len(said) == 1 and "| INFO | seqkit.scoring | " in said[0], err
    assert said[0].endswith("no binary f1: the labels are entailment and not_entailment (no label 1); "
                            "positive_label=entailment (or not_entailment) reports that label's f1")
    # entailment: tp 1, fp 1, fn 0 -> F1 2/3
    assert run_score(capsys, f"hyp={hyp}", "positive_label=entailment")[2] == \
        "f1 = 66.67 (F1 of positive label 'entailment')"
    with pytest.raises(SystemExit) as e:
        score_cli.main([f"hyp={hyp}", "positive_label=entailed"])
    assert e.value.code == 1 and capsys.readouterr().err.strip().splitlines()[-1] == (
        "seqkit-score: error: positive_label=entailed is not one of the two labels (entailment, not_entailment)")


# three labels in gold, a fourth ('other') only in the predictions: not an error, just wrong
CLS_REF_OUT = "".join(f"S-{i}\ts{i}\nL-{i}\t{p}\t0.5\n" for i, p in enumerate(["pos", "neg", "pos", "neu", "other"]))
CLS_GOLD = ["pos", "neg", "neu", "pos", "neg"]
# labels sorted: neg neu other pos; correct ids 0, 1 -> 2/5 = 40.00
# F1: neg 2*1/(2+1) = 0.6667, neu 0, other 0, pos 2*1/(2+2) = 0.5 -> mean 0.291667 -> 29.17
# MCC: c 2, s 5, t = [2, 1, 0, 2], p = [1, 1, 1, 2]:
#   (10 - (2 + 1 + 0 + 4)) / sqrt((25 - 7)(25 - 9)) = 3 / sqrt(288) = 0.176777 -> 17.68


def test_score_classification_with_ref(tmp_path, capsys):
    hyp = write(tmp_path / "cls.out", CLS_REF_OUT.splitlines())
    expected = ["accuracy = 40.00 (2/5)", "macro_f1 = 29.17 (mean F1 over the 4 labels in gold or predictions)",
                "mcc = 17.68 (Matthews correlation x100)"]
    plain = write(tmp_path / "gold.txt", CLS_GOLD)
    assert run_score(capsys, f"hyp={hyp}", f"ref={plain}") == expected
    tsv = write(tmp_path / "dev.tsv", ["sentence\tlabel"] + [f"s{i}\t{g}" for i, g in enumerate(CLS_GOLD)])
    assert run_score(capsys, f"hyp={hyp}", f"ref={tsv}") == expected
    tsv2 = write(tmp_path / "dev2.tsv", ["Quality\tstring"] + [f"{g}\ts{i}" for i, g in enumerate(CLS_GOLD)])
    assert run_score(capsys, f"hyp={hyp}", f"ref={tsv2}", "label_column=Quality") == expected


def test_score_classification_errors(tmp_path, capsys):
    hyp = write(tmp_path / "cls.out", CLS_REF_OUT.splitlines())
    short = write(tmp_path / "short.txt", CLS_GOLD[:4])
    msg = run_error(capsys, f"hyp={hyp}", f"ref={short}")
    assert f"label counts differ: {hyp} has 5 sentences (ids 0..4) but {short} has 4 labels" in msg
    assert "no T- line" in run_error(capsys, f"hyp={hyp}")  # gold needed: no T- lines, no ref
    tsv = write(tmp_path / "dev.tsv", ["sentence\tgold"] + [f"s{i}\t{g}" for i, g in enumerate(CLS_GOLD)])
    assert "has no 'label' column (columns: sentence, gold); set label_column=" in run_error(
        capsys, f"hyp={hyp}", f"ref={tsv}")
    gap = write(tmp_path / "gap.out", ["S-0\ta", "T-0\tx", "L-0\tx\t0.9", "S-1\tb", "T-1\ty"])
    assert "1 of 2 sentence ids have no L- line (ids 1)" in run_error(capsys, f"hyp={gap}")
    bad_prob = write(tmp_path / "bad.out", ["S-0\ta", "T-0\tx", "L-0\tx\thigh"])
    assert run_error(capsys, f"hyp={bad_prob}").endswith(f"{bad_prob}:3: probability 'high' is not a number")
    mixed = write(tmp_path / "mixed.out", ["S-0\ta", "L-0\tx\t0.9", "D-0\t-0.1\tb"])
    assert "mixed formats: classification L- lines (e.g. line 2) and translation H-/D-/P- lines (e.g. line 3)" in \
        run_error(capsys, f"hyp={mixed}")


# --------------------------------------------------------------------------- seqkit-score: tagging

WORDS = [["Peter", "Blackburn"], ["Smith", "in", "New", "York"], ["Acme", "Corp", "said"]]


def conll_lines(*columns_per_sentence):
    """CoNLL lines: a -DOCSTART- line, then one 'col col ...' line per token, a blank line per sentence."""
    lines = ["-DOCSTART- -X- O O", ""]
    for sent in zip(*columns_per_sentence):
        lines += [" ".join(cols) for cols in zip(*sent)] + [""]
    return lines


def test_score_tagging_conll_three_columns(tmp_path, capsys):
    hyp = write(tmp_path / "ner.txt", conll_lines(WORDS, GOLD, PRED))
    lines = run_score(capsys, f"hyp={hyp}")
    assert lines == [
        "entity_f1 = 44.44 precision = 40.00 recall = 50.00 (conlleval: 2 correct, 5 predicted, 4 gold phrases)",
        "token_accuracy = 66.67 (6/9 tokens, conlleval)",
        "type\tprecision\trecall\tf1\tcorrect\tpredicted\tgold",
        "LOC\t0.00\t0.00\t0.00\t0\t1\t1",
        "MISC\t0.00\t0.00\t0.00\t0\t1\t0",
        "ORG\t0.00\t0.00\t0.00\t0\t1\t1",
        "PER\t100.00\t100.00\t100.00\t2\t2\t2",
    ]
    records = [json.loads(x) for x in run_score(capsys, f"hyp={hyp}", "output_format=json")]
    assert [(r["metric"], r["score"]) for r in records] == [("entity_f1", 44.44), ("token_accuracy", 66.67)]
    assert records[0]["per_type"]["PER"]["f1"] == 100.0 and records[0]["definition"] == "conlleval"


def test_score_tagging_with_ref(tmp_path, capsys):
    hyp = write(tmp_path / "pred.txt", conll_lines(WORDS, PRED))  # word prediction
    pos = [["X"] * len(s) for s in WORDS]
    ref = write(tmp_path / "gold.conll", conll_lines(WORDS, pos, pos, GOLD))  # CoNLL-2003: word POS chunk NER
    lines = run_score(capsys, f"hyp={hyp}", f"ref={ref}", "task=tagging")
    assert lines[0].startswith("entity_f1 = 44.44 precision = 40.00 recall = 50.00 ")
    assert lines[1] == "token_accuracy = 66.67 (6/9 tokens, conlleval)"


def test_score_tagging_errors(tmp_path, capsys):
    lines = conll_lines(WORDS, GOLD, PRED)
    lines[3] = "Blackburn I-PER"  # 2 columns in a 3-column file
    bad = write(tmp_path / "bad.txt", lines)
    assert run_error(capsys, f"hyp={bad}").endswith(
        f"{bad}:4: 2 columns, but line 3 has 3; CoNLL token lines are 'word ... gold prediction' with the same "
        "number of columns")
    two = write(tmp_path / "two.txt", conll_lines(WORDS, PRED))
    assert "2 column(s) per line; need 'word ... gold prediction', or pass the gold tags with ref=FILE" in \
        run_error(capsys, f"hyp={two}")
    other = [list(s) for s in WORDS]
    other[1][2] = "Old"
    ref = write(tmp_path / "ref.conll", conll_lines(other, GOLD))
    assert f"{two}:8: word 'New' but {ref}:8 has 'Old'; are the files aligned?" in \
        run_error(capsys, f"hyp={two}", f"ref={ref}")
    ref2 = write(tmp_path / "ref2.conll", conll_lines(WORDS[:2], GOLD[:2]))
    assert "sentence counts differ" in run_error(capsys, f"hyp={two}", f"ref={ref2}")
    mixed = write(tmp_path / "mixed.txt", conll_lines(WORDS, GOLD, PRED) + ["D-0\t-0.1\ta b c"])
    assert "mixed formats: CoNLL tagging lines (e.g. line 1) and seqkit-generate lines (e.g. line 15)" in \
        run_error(capsys, f"hyp={mixed}")
    assert "task='ner' is not valid" in run_error(capsys, f"hyp={two}", "task=ner")
