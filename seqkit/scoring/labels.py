"""``seqkit-score`` for classification and tagging output (the readers; the metrics live in
:mod:`seqkit.scoring.metrics`). :mod:`seqkit.scoring.text` reads the files and dispatches here.

Classification output of ``seqkit-generate``, one block per sentence, lines in any order::

    S-<id>\\t<text>      T-<id>\\t<gold label>      L-<id>\\t<label>\\t<prob>[\\t<label2>\\t<prob2> ...]

The prediction is the first label of the first ``L-`` line of an id (top-k lines are sorted).
Gold labels come from ``T-`` lines or from ``ref=FILE``: one label per line in id order, or a
TSV whose header has a ``label_column`` column (GLUE's dev.tsv).

Tagging output is CoNLL columns as conlleval reads them: one token per line, whitespace-separated
``word ... gold prediction`` (or ``word prediction`` with the gold tags from a CoNLL ``ref=FILE``,
its last column), a blank line between sentences, ``-DOCSTART-`` lines ignored. Unlike
conlleval.pl, ``-DOCSTART-`` lines are not counted as tokens, so token accuracy can differ a little
on files that hold them; entity scores are the same.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from seqkit.core.errors import SeqkitError
from seqkit.scoring.metrics import classification_metrics, confusion_matrix, entity_counts, entity_scores

log = logging.getLogger("seqkit.scoring")

TASKS = ("auto", "translation", "classification", "tagging")
DEFAULT_POSITIVE_LABEL = "1"  # GLUE MRPC / QQP: label 1 is the positive class

_GEN_LINE = re.compile(r"^([STHDPL])-(\d+)\t")
_ANY_GEN_LINE = re.compile(r"^[A-Z]-\d+\t")
_TAG = re.compile(r"^(?:O|[BIESLUM]-\S+)$")  # what a last CoNLL column looks like, for auto-detection


def _is_conll_line(line: str) -> bool:
    fields = line.split()
    return len(fields) >= 2 and (fields[0] == "-DOCSTART-" or _TAG.match(fields[-1]) is not None)


def detect_task(lines: Sequence[str], name: str) -> str:
    """``classification``, ``tagging`` or ``translation`` for a hypothesis file's lines.

    Tagging: more than half of the non-blank lines look like CoNLL (2+ columns, the last one ``O``
    or ``X-TYPE``). Classification: seqkit-generate output with ``L-`` lines. Anything else is
    translation (plain text or generate output). Mixed kinds are an error naming a line of each.
    """
    nonblank = gen_only = conll = 0
    first: Dict[str, int] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        nonblank += 1
        m = _GEN_LINE.match(line)
        if _is_conll_line(line):
            conll += 1
            first.setdefault("conll", lineno)
        elif m is not None:
            gen_only += 1
            first.setdefault("generate", lineno)
        if m is not None:
            first.setdefault("L" if m.group(1) == "L" else "HD" if m.group(1) in "HDP" else "ST", lineno)
    if conll * 2 > nonblank:
        if gen_only:
            raise SeqkitError(f"{name}: mixed formats: CoNLL tagging lines (e.g. line {first['conll']}) and "
                              f"seqkit-generate lines (e.g. line {first['generate']})")
        return "tagging"
    if "L" in first:
        if "HD" in first:
            raise SeqkitError(f"{name}: mixed formats: classification L- lines (e.g. line {first['L']}) and "
                              f"translation H-/D-/P- lines (e.g. line {first['HD']})")
        return "classification"
    return "translation"


# --------------------------------------------------------------------------- classification


def _ids_shown(ids: Sequence[int]) -> str:
    return ", ".join(str(i) for i in ids[:5]) + (", ..." if len(ids) > 5 else "")


def parse_classification_output(lines: Sequence[str], name: str) -> Tuple[List[int], List[str], Dict[int, str]]:
    """(ids sorted, top-1 predicted label per id, T- gold label per id) of classification output."""
    ids, preds, gold = set(), {}, {}
    skipped = 0
    for lineno, line in enumerate(lines, 1):
        m = _GEN_LINE.match(line)
        if m is None:
            if line.strip() and not _ANY_GEN_LINE.match(line):
                skipped += 1  # e.g. log lines captured with 2>&1
            continue
        kind, idx, rest = m.group(1), int(m.group(2)), line[m.end():]
        ids.add(idx)
        if kind == "L":
            fields = rest.split("\t")
            if len(fields) % 2:
                raise SeqkitError(f"{name}:{lineno}: an L- line holds <label>\\t<prob> pairs, found {len(fields)} "
                                  "tab-separated fields after the id")
            for prob in fields[1::2]:
                try:
                    float(prob)
                except ValueError:
                    raise SeqkitError(f"{name}:{lineno}: probability {prob!r} is not a number") from None
            if not fields[0].strip():
                raise SeqkitError(f"{name}:{lineno}: empty predicted label")
            preds.setdefault(idx, fields[0].strip())
        elif kind == "T":
            if not rest.strip():
                raise SeqkitError(f"{name}:{lineno}: empty gold label on a T- line")
            gold.setdefault(idx, rest.strip())
    if skipped:
        log.warning("%s: skipped %d lines that are not S-/T-/L- lines", name, skipped)
    missing = sorted(ids - set(preds))
    if missing:
        raise SeqkitError(f"{name}: {len(missing)} of {len(ids)} sentence ids have no L- line (ids "
                          f"{_ids_shown(missing)}); is it complete seqkit-generate output?")
    order = sorted(ids)
    return order, [preds[i] for i in order], gold


def read_label_ref(lines: Sequence[str], name: str, label_column: str = "label") -> List[str]:
    """Gold labels of a reference file: one per line, or the ``label_column`` column of a TSV with a header."""
    lines = list(lines)
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise SeqkitError(f"reference file {name} is empty")
    header = [h.strip() for h in lines[0].split("\t")]
    if label_column in header:
        col, body, first = header.index(label_column), lines[1:], 2
    elif len(header) > 1:
        raise SeqkitError(f"{name}: tab-separated, but its header (line 1) has no {label_column!r} column (columns: "
                          f"{', '.join(header)}); set label_column=")
    else:
        col, body, first = None, lines, 1
    labels = []
    for lineno, line in enumerate(body, first):
        fields = line.split("\t")
        if col is not None and len(fields) <= col:
            raise SeqkitError(f"{name}:{lineno}: {len(fields)} tab-separated columns, but {label_column!r} is column "
                              f"{col + 1} of the header")
        label = (fields[col] if col is not None else line).strip()
        if not label:
            raise SeqkitError(f"{name}:{lineno}: empty gold label")
        labels.append(label)
    return labels


def _label_order(labels: Sequence[str], positive_label: str) -> Tuple[List[str], Optional[int]]:
    """Sorted label set, and the index of the positive label for binary F1 (put last: index 1).

    No binary F1 (None) for other than two labels, nor for two named labels without the default
    positive label ``1`` (RTE's entailment / not_entailment): like sklearn, which takes ``pos_label=1``
    but asks for one with string labels, seqkit does not guess which label is positive; one line says
    how to ask. A positive label given that is neither label is an error."""
    order = sorted(set(labels))
    if len(order) != 2:
        return order, None
    if positive_label not in order:
        if positive_label != DEFAULT_POSITIVE_LABEL:
            raise SeqkitError(f"positive_label={positive_label} is not one of the two labels ({', '.join(order)})")
        log.info("no binary f1: the labels are %s (no label %s); positive_label=%s (or %s) reports that label's f1",
                 " and ".join(order), DEFAULT_POSITIVE_LABEL, order[0], order[1])
        return order, None
    return [x for x in order if x != positive_label] + [positive_label], 1


def classification_results(gold: Sequence[str], pred: Sequence[str],
                           positive_label: str = DEFAULT_POSITIVE_LABEL) -> List[Dict[str, Any]]:
    """Result dicts (``metric``, ``name``, ``score``, ``text``, ...) for seqkit-score's output."""
    labels, positive = _label_order([*gold, *pred], positive_label)
    index = {x: i for i, x in enumerate(labels)}
    cm = confusion_matrix([index[x] for x in gold], [index[x] for x in pred], len(labels))
    scores = classification_metrics(cm, positive)
    n, correct = len(gold), sum(cm[i][i] for i in range(len(labels)))
    present = sum(1 for i in range(len(labels)) if sum(cm[i]) or sum(row[i] for row in cm))
    rows = [
        ("accuracy", f"({correct}/{n})", "correct / sentences", {"correct": correct, "n": n}),
        ("macro_f1", f"(mean F1 over the {present} labels in gold or predictions)",
         "sklearn f1_score average=macro zero_division=0", {"labels": labels}),
    ]
    if "f1" in scores:
        rows.append(("f1", f"(F1 of positive label {positive_label!r})", "F1 of the positive label, as GLUE for MRPC",
                     {"positive_label": positive_label}))
    rows.append(("mcc", "(Matthews correlation x100)", "sklearn matthews_corrcoef (multi-class, Gorodkin 2004)", {}))
    results = []
    for metric, detail, definition, extra in rows:
        score = scores[metric]
        results.append({"metric": metric, "name": metric, "score": score, **extra, "definition": definition,
                        "text": f"{metric} = {score:.2f} {detail}"})
    results[0]["confusion_matrix"] = cm
    return results


def score_classification(lines: Sequence[str], name: str, ref: Optional[Tuple[str, List[str]]] = None,
                         label_column: str = "label",
                         positive_label: str = DEFAULT_POSITIVE_LABEL) -> List[Dict[str, Any]]:
    """Score classification output; ``ref`` is (file name, its lines) or None for the T- lines."""
    ids, preds, targets = parse_classification_output(lines, name)
    if not ids:
        raise SeqkitError(f"{name}: no S-/T-/L- lines; is it seqkit-generate output of a classification model?")
    if ref is not None:
        ref_name, ref_lines = ref
        gold = read_label_ref(ref_lines, ref_name, label_column)
        if len(gold) != len(ids) or ids[-1] != len(ids) - 1:
            gaps = sorted(set(range(len(gold))) - set(ids))
            raise SeqkitError(f"label counts differ: {name} has {len(ids)} sentences (ids {ids[0]}..{ids[-1]}) but "
                              f"{ref_name} has {len(gold)} labels"
                              + (f"; ids missing: {_ids_shown(gaps)}" if gaps else ""))
    else:
        missing = [i for i in ids if i not in targets]
        if missing:
            raise SeqkitError(f"{name}: {len(missing)} of {len(ids)} sentence ids have no T- line (ids "
                              f"{_ids_shown(missing)}); pass the gold labels with ref=FILE")
        gold = [targets[i] for i in ids]
    log.info("%s: classification output, %d sentences", name, len(ids))
    return classification_results(gold, preds, positive_label)


# --------------------------------------------------------------------------- tagging

Sentence = List[Tuple[int, List[str]]]  # (line number, whitespace-separated fields) per token


def read_conll(lines: Sequence[str], name: str) -> Tuple[List[Sentence], int]:
    """Sentences of a CoNLL file and its column count; every token line must have the same count."""
    sentences: List[Sentence] = []
    current: Sentence = []
    ncols, first = 0, 0
    for lineno, line in enumerate(lines, 1):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            if current:
                sentences.append(current)
                current = []
            continue
        if not ncols:
            ncols, first = len(fields), lineno
        elif len(fields) != ncols:
            raise SeqkitError(f"{name}:{lineno}: {len(fields)} columns, but line {first} has {ncols}; CoNLL token "
                              "lines are 'word ... gold prediction' with the same number of columns")
        current.append((lineno, fields))
    if current:
        sentences.append(current)
    if not sentences:
        raise SeqkitError(f"{name}: no token lines")
    return sentences, ncols


def _aligned_gold(hyp: List[Sentence], name: str, ref: List[Sentence], ref_name: str) -> List[List[str]]:
    if len(hyp) != len(ref):
        raise SeqkitError(f"sentence counts differ: {name} has {len(hyp)} sentences but {ref_name} has {len(ref)}")
    gold = []
    for h_sent, r_sent in zip(hyp, ref):
        if len(h_sent) != len(r_sent):
            raise SeqkitError(f"{name}:{h_sent[0][0]}: sentence has {len(h_sent)} tokens but the one at "
                              f"{ref_name}:{r_sent[0][0]} has {len(r_sent)}")
        for (h_line, h), (r_line, r) in zip(h_sent, r_sent):
            if h[0] != r[0]:
                raise SeqkitError(f"{name}:{h_line}: word {h[0]!r} but {ref_name}:{r_line} has {r[0]!r}; "
                                  "are the files aligned?")
        gold.append([r[-1] for _, r in r_sent])
    return gold


def tagging_results(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> List[Dict[str, Any]]:
    """Result dicts for seqkit-score: entity_f1 (with precision, recall, per_type) and token_accuracy."""
    s = entity_scores(entity_counts(gold, pred))
    table = ["type\tprecision\trecall\tf1\tcorrect\tpredicted\tgold"]
    for kind, t in s["per_type"].items():
        table.append("\t".join([kind, *(f"{t[k]:.2f}" for k in ("precision", "recall", "f1")),
                                *(str(t[k]) for k in ("correct", "predicted", "gold"))]))
    entity = {
        "metric": "entity_f1", "name": "entity_f1", "score": s["f1"], "precision": s["precision"],
        "recall": s["recall"], "correct": s["correct"], "predicted": s["predicted"], "gold": s["gold"],
        "sentences": len(gold), "per_type": s["per_type"], "definition": "conlleval",
        "text": (f"entity_f1 = {s['f1']:.2f} precision = {s['precision']:.2f} recall = {s['recall']:.2f} "
                 f"(conlleval: {s['correct']} correct, {s['predicted']} predicted, {s['gold']} gold phrases)"),
        "table": table,
    }
    accuracy = {
        "metric": "token_accuracy", "name": "token_accuracy", "score": s["accuracy"],
        "correct": s["correct_tokens"], "n": s["tokens"], "definition": "conlleval",
        "text": f"token_accuracy = {s['accuracy']:.2f} ({s['correct_tokens']}/{s['tokens']} tokens, conlleval)",
    }
    return [entity, accuracy]


def score_tagging(lines: Sequence[str], name: str, ref: Optional[Tuple[str, List[str]]] = None) -> List[Dict[str, Any]]:
    """Score CoNLL tagging output; ``ref`` is (file name, its lines) or None for the hyp's gold column."""
    hyp, ncols = read_conll(lines, name)
    if ref is not None:
        ref_name, ref_lines = ref
        if ncols < 2:
            raise SeqkitError(f"{name}: 1 column per line; need 'word prediction' (gold tags from {ref_name})")
        ref_sents, ref_cols = read_conll(ref_lines, ref_name)
        if ref_cols < 2:
            raise SeqkitError(f"{ref_name}: 1 column per line; a CoNLL reference needs 'word ... gold tag'")
        gold = _aligned_gold(hyp, name, ref_sents, ref_name)
    elif ncols < 3:
        raise SeqkitError(f"{name}: {ncols} column(s) per line; need 'word ... gold prediction', or pass the gold "
                          "tags with ref=FILE")
    else:
        gold = [[f[-2] for _, f in sent] for sent in hyp]
    pred = [[f[-1] for _, f in sent] for sent in hyp]
    log.info("%s: CoNLL tagging output, %d sentences", name, len(hyp))
    return tagging_results(gold, pred)
