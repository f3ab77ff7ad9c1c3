"""Classification and sequence-tagging metrics: confusion matrix, accuracy, macro-F1, MCC, and
entity precision/recall/F1 exactly as CoNLL's ``conlleval`` script counts them.

Scores are in percent, rounded to 2 decimals (as GLUE and conlleval print them)::

    from seqkit.scoring.metrics import confusion_matrix, classification_metrics, chunks, entity_counts, entity_scores
    classification_metrics(confusion_matrix([0, 1, 1], [0, 1, 0], 2))
    # {'accuracy': 66.67, 'macro_f1': 66.67, 'mcc': 50.0, 'f1': 66.67}
    chunks(["B-PER", "I-PER", "O", "I-LOC"])          # [('PER', 0, 2), ('LOC', 3, 4)]
    entity_scores(entity_counts([["B-PER", "O"]], [["B-PER", "O"]]))["f1"]   # 100.0

Pure Python; :func:`confusion_counts` is the one torch helper (torch is imported only there).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

# --------------------------------------------------------------------------- classification


def confusion_matrix(gold: Sequence[int], pred: Sequence[int], num_labels: int) -> List[List[int]]:
    """``cm[g][p]`` = number of items with gold label ``g`` predicted as ``p``: (K, K), rows gold."""
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold labels but {len(pred)} predictions")
    cm = [[0] * num_labels for _ in range(num_labels)]
    for g, p in zip(gold, pred):
        if not (0 <= g < num_labels and 0 <= p < num_labels):
            raise ValueError(f"label out of range [0, {num_labels}): gold {g}, prediction {p}")
        cm[g][p] += 1
    return cm


def confusion_counts(logits_or_pred: Any, target: Any, num_labels: int, ignore_index: int = -1) -> Any:
    """Confusion matrix of a batch as a ``torch.LongTensor`` (K, K), rows gold, cols predicted.

    ``logits_or_pred`` is either logits/probabilities ``[..., K]`` (floating; argmax is taken) or
    predicted label ids shaped like ``target`` ``[...]``. Positions with ``target == ignore_index``
    (padding, or sub-word pieces in tagging) are not counted. Sum the matrices over batches and
    pass ``.tolist()`` to :func:`classification_metrics`. Under ``torch.compile`` the label range
    is not checked (the check reads the device) and the counting is one traceable scatter.
    """
    import torch

    pred = logits_or_pred
    if pred.is_floating_point():
        if pred.dim() != target.dim() + 1 or pred.size(-1) != num_labels:
            raise ValueError(f"logits {tuple(pred.shape)} do not fit target {tuple(target.shape)} "
                             f"and {num_labels} labels")
        pred = pred.argmax(-1)
    if pred.shape != target.shape:
        raise ValueError(f"predictions {tuple(pred.shape)} and target {tuple(target.shape)} differ in shape")
    keep = target != ignore_index
    if torch.compiler.is_compiling():  # no boolean indexing (a data-dependent size): ignored cells count 0
        cells = (target.long().clamp(0, num_labels - 1) * num_labels + pred.long()).reshape(-1)
        flat = torch.zeros(num_labels * num_labels, dtype=torch.long, device=cells.device)
        return flat.scatter_add_(0, cells, keep.reshape(-1).long()).view(num_labels, num_labels)
    gold, pred = target[keep].long(), pred[keep].long()
    if gold.numel() and (gold.min() < 0 or gold.max() >= num_labels or pred.min() < 0 or pred.max() >= num_labels):
        raise ValueError(f"label ids out of range [0, {num_labels})")
    flat = torch.bincount(gold * num_labels + pred, minlength=num_labels * num_labels)
    return flat.view(num_labels, num_labels)


def _pct(x: float) -> float:
    return round(100.0 * x, 2)


def per_label_f1(cm: Sequence[Sequence[int]]) -> List[Optional[float]]:
    """F1 of each label (0..1): ``2 tp / (gold + predicted)``; ``None`` for a label with neither."""
    out: List[Optional[float]] = []
    for k in range(len(cm)):
        gold = sum(cm[k])
        predicted = sum(row[k] for row in cm)
        out.append(2.0 * cm[k][k] / (gold + predicted) if gold + predicted else None)
    return out


def classification_metrics(cm: Sequence[Sequence[int]], positive: Optional[int] = 1) -> Dict[str, float]:
    """Accuracy, macro-F1 and MCC (all x100, 2 decimals) of a confusion matrix (K, K), rows gold.

    - macro_f1: mean of the per-label F1 over the labels that occur in gold or predictions. This is
      sklearn's ``f1_score(average="macro", zero_division=0)`` with its default ``labels`` (the labels
      seen in ``y_true`` or ``y_pred``): a label seen only on one side has F1 = 0; a label seen on
      neither side is left out, so unused rows of a fixed label set do not drag the mean down.
    - f1 (only when K == 2 and ``positive`` is not None): F1 of label ``positive``, as GLUE reports
      for MRPC and QQP.
    - mcc: multi-class Matthews correlation (Gorodkin 2004; sklearn ``matthews_corrcoef``)::

          (c * s - sum_k p_k t_k) / sqrt((s^2 - sum_k p_k^2) (s^2 - sum_k t_k^2))

      with c = correct, s = total, t_k = gold count and p_k = predicted count of label k;
      0 when the denominator is 0 (all gold or all predictions in one label).

    An empty matrix gives zeros.
    """
    k = len(cm)
    total = sum(sum(row) for row in cm)
    correct = sum(cm[i][i] for i in range(k))
    t = [sum(cm[i]) for i in range(k)]
    p = [sum(row[i] for row in cm) for i in range(k)]
    f1s = [f for f in per_label_f1(cm) if f is not None]
    denom = (total * total - sum(x * x for x in p)) * (total * total - sum(x * x for x in t))
    mcc = (correct * total - sum(a * b for a, b in zip(p, t))) / math.sqrt(denom) if denom > 0 else 0.0
    out = {
        "accuracy": _pct(correct / total) if total else 0.0,
        "macro_f1": _pct(sum(f1s) / len(f1s)) if f1s else 0.0,
        "mcc": _pct(mcc),
    }
    if k == 2 and positive is not None:
        out["f1"] = _pct(per_label_f1(cm)[positive] or 0.0)
    return out


# --------------------------------------------------------------------------- tagging (conlleval)
#
# conlleval.pl's startOfChunk/endOfChunk rules, with the IOBES additions of the Python conlleval
# ports (and seqeval's default mode): S- is a one-token chunk and a chunk always ends after E- or
# S-. For B-/I-/O tags (IOB1 and IOB2) the rules are exactly conlleval.pl's: I- after O or after a
# chunk of another type starts a chunk (IOB1), B- always starts one. A tag is split at its first
# "-" into prefix and type ("O" has type ""); "." and "[", "]" are conlleval's old chunk tags.


def _split_tag(label: str) -> Tuple[str, str]:
    prefix, dash, kind = label.partition("-")
    return (prefix, kind) if dash else (label, "")


def end_of_chunk(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    """Did a chunk end between the previous token and this one? (conlleval's ``endOfChunk``)"""
    if prev_tag in ("E", "S", "[", "]"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag not in ("O", ".") and prev_type != type_


def start_of_chunk(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    """Does a chunk start at this token? (conlleval's ``startOfChunk``)"""
    if tag in ("B", "S", "[", "]"):
        return True
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag not in ("O", ".") and prev_type != type_


def chunks(tags: Sequence[str]) -> List[Tuple[str, int, int]]:
    """Chunks ``(type, start, end)`` (end exclusive) of ONE sentence's tags, in IOB1, BIO or IOBES.

    The sentence is closed by an implicit ``O``, so no chunk crosses a sentence end: score
    sentence by sentence, never over concatenated sentences.
    """
    out: List[Tuple[str, int, int]] = []
    prev_tag, prev_type = "O", ""
    start, kind = -1, ""
    for i, label in enumerate([*tags, "O"]):
        tag, type_ = _split_tag(label)
        if start >= 0 and end_of_chunk(prev_tag, tag, prev_type, type_):
            out.append((kind, start, i))
            start = -1
        if start_of_chunk(prev_tag, tag, prev_type, type_):
            if start >= 0:  # only with tags outside the schemes above; a new chunk closes the last
                out.append((kind, start, i))
            start, kind = i, type_
        prev_tag, prev_type = tag, type_
    return out


def entity_counts(gold_sents: Sequence[Sequence[str]], pred_sents: Sequence[Sequence[str]]) -> Dict[str, Any]:
    """conlleval's counts over sentences of gold and predicted tags (equal lengths per sentence).

    Returns ``correct`` (chunks with the same type, start and end on both sides), ``predicted``,
    ``gold``, ``tokens``, ``correct_tokens`` (same tag string) and ``per_type``: ``{type: {correct,
    predicted, gold}}`` for every type seen on either side.
    """
    if len(gold_sents) != len(pred_sents):
        raise ValueError(f"{len(gold_sents)} gold sentences but {len(pred_sents)} predicted")
    counts: Dict[str, Any] = {"correct": 0, "predicted": 0, "gold": 0, "tokens": 0, "correct_tokens": 0}
    per_type: Dict[str, Dict[str, int]] = {}
    for n, (gold, pred) in enumerate(zip(gold_sents, pred_sents)):
        if len(gold) != len(pred):
            raise ValueError(f"sentence {n}: {len(gold)} gold tags but {len(pred)} predicted")
        counts["tokens"] += len(gold)
        counts["correct_tokens"] += sum(g == p for g, p in zip(gold, pred))
        gold_chunks, pred_chunks = set(chunks(gold)), set(chunks(pred))
        for key, found in (("gold", gold_chunks), ("predicted", pred_chunks), ("correct", gold_chunks & pred_chunks)):
            counts[key] += len(found)
            for kind, _, _ in found:
                per_type.setdefault(kind, {"correct": 0, "predicted": 0, "gold": 0})[key] += 1
    counts["per_type"] = {kind: per_type[kind] for kind in sorted(per_type)}
    return counts


def _prf(correct: int, predicted: int, gold: int) -> Dict[str, float]:
    # conlleval: percentages first, F1 from the unrounded percentages, 0 where undefined
    precision = 100.0 * correct / predicted if predicted else 0.0
    recall = 100.0 * correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": round(precision, 2), "recall": round(recall, 2), "f1": round(f1, 2)}


def entity_scores(counts: Dict[str, Any]) -> Dict[str, Any]:
    """conlleval's percentages from :func:`entity_counts`: precision, recall, f1 (its FB1),
    accuracy (token tags), and ``per_type`` ``{type: {precision, recall, f1, correct, predicted, gold}}``;
    the counts are carried along."""
    out: Dict[str, Any] = _prf(counts["correct"], counts["predicted"], counts["gold"])
    out["accuracy"] = round(100.0 * counts["correct_tokens"] / counts["tokens"], 2) if counts["tokens"] else 0.0
    out.update({k: counts[k] for k in ("correct", "predicted", "gold", "tokens", "correct_tokens")})
    out["per_type"] = {kind: {**_prf(c["correct"], c["predicted"], c["gold"]), **c}
                       for kind, c in counts["per_type"].items()}
    return out
