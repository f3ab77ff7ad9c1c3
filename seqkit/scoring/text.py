"""Score detokenized hypotheses against references with sacreBLEU (BLEU, chrF, chrF++, TER).

Every score comes with its sacreBLEU signature, so numbers can be compared across papers. The
hypothesis file is either plain text (one detokenized sentence per line) or ``seqkit-generate``
output, recognised by its fairseq-style lines::

    S-<id>\\t<source>          T-<id>\\t<target>            P-<id>\\t<positional scores>
    H-<id>\\t<score>\\t<hyp>    D-<id>\\t<score>\\t<detokenized hyp>

In that mode the hypotheses are the first ``D-`` line of each id, sorted by id (lines may come in
any order; nbest output has several ``H-``/``D-`` lines per id), and, without ``ref=``, the
references are the ``T-`` lines.

    from seqkit.scoring.text import corpus_scores
    corpus_scores(["The cat sat."], [["The cat sat down."]])   # refs: one list per reference set

Classification output (``L-<id>`` lines) and CoNLL tagging output are recognised too, or chosen
with ``task=``, and scored by :mod:`seqkit.scoring.labels` (accuracy, macro-F1, MCC; conlleval
entity F1): those metrics are not sacreBLEU's, and their lines say which definition they follow.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.io import read_all_lines
from seqkit.core.settings import user_set
from seqkit.scoring.labels import (DEFAULT_POSITIVE_LABEL, TASKS, detect_task, score_classification,
                                   score_tagging)

log = logging.getLogger("seqkit.scoring")

METRICS = ("bleu", "chrf", "chrf++", "ter")
OUTPUT_FORMATS = ("text", "json")
TOK_LC_NAME = "tok-lc-BLEU (multi-bleu style, NOT sacreBLEU)"

# S-/T-/H-/D-/P- lines of seqkit-generate (fairseq) output; other letters (A-, E-, I-, W-) are
# lines fairseq may add and are skipped.
_GEN_LINE = re.compile(r"^([SHTDP])-(\d+)\t")
_ANY_GEN_LINE = re.compile(r"^[A-Z]-\d+\t")


@dataclasses.dataclass
class ScoreConfig:
    """``seqkit-score``: sacreBLEU scores of a hypothesis file against one or more references."""

    hyp: str = arg("", "hypothesis file: one detokenized sentence per line, seqkit-generate output, or CoNLL "
                       "tagging columns; - = stdin")
    task: str = arg("auto", "what hyp holds: auto (recognise it), translation, classification (L- lines) or "
                            "tagging (CoNLL columns)", choices=TASKS)
    # ref and metrics are Any, not List[str], so that both ref=a.txt and ref=[a.txt,b.txt] pass
    # hydra's type check; __post_init__ makes them lists.
    ref: Any = arg(help="reference file(s): ref=a.txt or ref=[a.txt,b.txt]; empty = T- lines of generate output",
                   factory=list)
    metrics: Any = arg(help=f"metric(s), of {', '.join(METRICS)}: metrics=bleu or metrics=[bleu,chrf]",
                       factory=lambda: ["bleu", "chrf", "ter"])
    lowercase: bool = arg(False, "lowercase before BLEU and chrF (TER is case-insensitive, as in sacreBLEU)")
    tokenize: str = arg("13a", "sacreBLEU tokenizer for BLEU: 13a, intl, zh, char, none, ...")
    tok_lc_bleu: bool = arg(False, "also report tokenized lowercased BLEU as older papers do (multi-bleu style, "
                                   "NOT sacreBLEU)")
    sentence_level: bool = arg(False, "also report a score per sentence")
    output_format: str = arg("text", "text (one line per metric) or json (one JSON object per metric per line)",
                             choices=OUTPUT_FORMATS)
    label_column: str = arg("label", "classification: the gold-label column of a ref=FILE TSV with a header")
    positive_label: str = arg(DEFAULT_POSITIVE_LABEL, "classification with two labels: the label whose F1 is reported as "
                                                      "f1 (GLUE MRPC)")

    def __post_init__(self) -> None:
        self.ref = as_list(self.ref)
        self.metrics = as_list(self.metrics)


def as_list(value: Any) -> List[str]:
    """``None``, a string, or a list of strings -> a list of strings."""
    if value is None or value == "":
        return []
    if isinstance(value, (str, int, float)):
        return [str(value)]
    return [str(v) for v in value]


# --------------------------------------------------------------------------- reading inputs


def _display(path: str) -> str:
    return "<stdin>" if path == "-" else path


def read_text_lines(path: str) -> List[str]:
    """Lines of a strict UTF-8 file (``-`` = stdin) without their newlines."""
    if path != "-":
        return read_all_lines(path)
    stream = getattr(sys.stdin, "buffer", None)
    data = stream.read() if stream is not None else sys.stdin.read().encode("utf-8")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        lineno = data[: e.start].count(b"\n") + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1)
        raise SeqkitError(f"<stdin>:{lineno}: not valid UTF-8 ({e.reason} at byte {col})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line, it does not start a new one
    return [line.rstrip("\r") for line in lines]


def is_generate_output(lines: Sequence[str]) -> bool:
    """True when the lines look like ``seqkit-generate`` output (any ``S-/T-/H-/D-/P-<id>\\t`` line)."""
    return any(_GEN_LINE.match(line) for line in lines)


def parse_generate_output(lines: Sequence[str], name: str = "generate output") -> Tuple[List[int], List[str], Dict[int, str]]:
    """(ids sorted, first D- hypothesis per id, first T- target per id) of seqkit-generate output."""
    ids, hyps, targets = set(), {}, {}
    skipped = 0
    for line in lines:
        m = _GEN_LINE.match(line)
        if m is None:
            if line.strip() and not _ANY_GEN_LINE.match(line):
                skipped += 1  # e.g. log lines captured with 2>&1
            continue
        kind, idx = m.group(1), int(m.group(2))
        ids.add(idx)
        rest = line[m.end():]
        if kind == "D" and idx not in hyps:
            # D-<id> \t <score> \t <detokenized hypothesis>; an empty hypothesis may lose its tab
            hyps[idx] = rest.split("\t", 1)[1] if "\t" in rest else ""
        elif kind == "T" and idx not in targets:
            targets[idx] = rest
    if skipped:
        log.warning("%s: skipped %d lines that are not S-/T-/H-/D-/P- lines", name, skipped)
    missing = sorted(ids - set(hyps))
    if missing:
        shown = ", ".join(str(i) for i in missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise SeqkitError(
            f"{name}: {len(missing)} of {len(ids)} sentence ids have no D- line (ids {shown}); "
            "is it complete seqkit-generate output?"
        )
    order = sorted(ids)
    return order, [hyps[i] for i in order], targets


# --------------------------------------------------------------------------- scoring


def _check_options(metrics: Sequence[str], tokenize: str, output_format: str = "text") -> List[str]:
    """Lowercased, de-duplicated metric names; one-line errors for unknown names."""
    from sacrebleu.metrics.bleu import _TOKENIZERS

    names: List[str] = []
    for m in metrics:
        key = str(m).lower()
        if key not in METRICS:
            raise SeqkitError(f"unknown metric {m!r}; valid: {', '.join(METRICS)}")
        if key not in names:
            names.append(key)
    if tokenize not in _TOKENIZERS:
        raise SeqkitError(f"unknown tokenize {tokenize!r}; valid: {', '.join(_TOKENIZERS)}")
    if output_format not in OUTPUT_FORMATS:
        raise SeqkitError(f"unknown output_format {output_format!r}; valid: {', '.join(OUTPUT_FORMATS)}")
    return names


def _make_metric(name: str, lowercase: bool, tokenize: str, sentence: bool = False) -> Any:
    from sacrebleu.metrics import BLEU, CHRF, TER

    try:
        if name == "bleu":
            # sentence BLEU without effective order is almost always 0 (sacreBLEU's advice)
            return BLEU(lowercase=lowercase, tokenize=tokenize, effective_order=sentence)
        if name in ("chrf", "chrf++"):
            return CHRF(lowercase=lowercase, word_order=2 if name == "chrf++" else 0)
        return TER()
    except Exception as e:  # e.g. ja-mecab without its optional package
        raise SeqkitError(f"cannot set up {name} (tokenize={tokenize}): {str(e).splitlines()[0]}") from None


def _tok_lc_bleu(hyps: List[str], refs: List[List[str]]) -> Dict[str, Any]:
    """BLEU the way multi-bleu.perl -lc scores tokenized text: split on whitespace, no smoothing.

    The text is tokenized with sacreBLEU's 13a (mteval) tokenizer first; papers that used the
    Moses tokenizer can differ slightly. Not comparable with sacreBLEU, hence its own label.
    """
    from sacrebleu.metrics import BLEU
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    tok = Tokenizer13a()

    def prep(line: str) -> str:
        return tok(line.strip()).lower()

    bleu = BLEU(tokenize="none", smooth_method="none", force=True)
    score = bleu.corpus_score([prep(h) for h in hyps], [[prep(r) for r in stream] for stream in refs])
    signature = f"nrefs:{len(refs)}|case:lc|tok:13a-then-whitespace|smooth:none (multi-bleu style, not a sacreBLEU signature)"
    rest = str(score).split(" = ", 1)[1]
    return {
        "metric": "tok_lc_bleu",
        "name": TOK_LC_NAME,
        "score": score.score,
        "signature": signature,
        "text": f"{TOK_LC_NAME} = {rest} {signature}",
    }


def corpus_scores(
    hyps: List[str],
    refs: List[List[str]],
    metrics: Sequence[str] = ("bleu", "chrf", "ter"),
    lowercase: bool = False,
    tokenize: str = "13a",
    tok_lc_bleu: bool = False,
    sentence_level: bool = False,
) -> List[Dict[str, Any]]:
    """sacreBLEU scores of ``hyps`` against ``refs``, one result dict per metric.

    ``refs`` holds one list per reference set, each as long as ``hyps`` (sacreBLEU's layout):
    two references per sentence are ``[[ref1_s1, ref1_s2, ...], [ref2_s1, ref2_s2, ...]]``.
    Each result has ``metric`` (bleu/chrf/chrf++/ter/tok_lc_bleu), ``name`` (sacreBLEU's, e.g.
    chrF2), ``score``, ``signature`` and ``text`` (the printable line); with ``sentence_level``
    also ``sentence_scores`` and ``sentence_signature``.
    """
    names = _check_options(metrics, tokenize)
    if not names and not tok_lc_bleu:
        raise SeqkitError("nothing to score: metrics is empty")
    if not hyps:
        raise SeqkitError("no hypotheses to score")
    if not refs:
        raise SeqkitError("no references to score against")
    for k, stream in enumerate(refs, 1):
        if len(stream) != len(hyps):
            raise SeqkitError(f"reference set {k} has {len(stream)} lines but there are {len(hyps)} hypotheses")
    results: List[Dict[str, Any]] = []
    for name in names:
        metric = _make_metric(name, lowercase, tokenize)
        score = metric.corpus_score(hyps, refs)
        signature = str(metric.get_signature())
        result = {
            "metric": name,
            "name": score.name,
            "score": score.score,
            "signature": signature,
            "text": f"{score} {signature}",
        }
        if sentence_level:
            sent = _make_metric(name, lowercase, tokenize, sentence=True)
            result["sentence_scores"] = [
                sent.sentence_score(h, [stream[i] for stream in refs]).score for i, h in enumerate(hyps)
            ]
            result["sentence_signature"] = str(sent.get_signature())
        results.append(result)
    if tok_lc_bleu:
        results.append(_tok_lc_bleu(hyps, refs))
    return results


# what each kind of output is scored with, and the settings only one kind reads
LABEL_METRICS = {"classification": "accuracy, macro-F1 and MCC (with two labels also the positive label's F1)",
                 "tagging": "conlleval's entity F1 and token accuracy"}
TRANSLATION_SETTINGS = ("metrics", "tokenize", "lowercase", "tok_lc_bleu", "sentence_level")
CLASSIFICATION_SETTINGS = ("label_column", "positive_label")


def check_settings(cfg: ScoreConfig, task: str, hyp_name: str) -> None:
    """Refuse the settings of another kind of output than ``task``'s (sacreBLEU's metrics on labels,
    classification's label settings on translations or tags), which scoring it would ignore."""
    given = user_set(cfg, TRANSLATION_SETTINGS) if task in LABEL_METRICS else []
    if given:
        raise SeqkitError(f"{', '.join(given)}: for translation output (sacreBLEU's metrics and tokenizers); "
                          f"{hyp_name} is {task} output, scored with {LABEL_METRICS[task]}: drop "
                          f"{'it' if len(given) == 1 else 'them'}")
    given = user_set(cfg, CLASSIFICATION_SETTINGS) if task != "classification" else []
    if given:
        scored = LABEL_METRICS.get(task, "sacreBLEU's metrics (metrics=)")
        raise SeqkitError(f"{', '.join(given)}: for classification output (L- lines); {hyp_name} is {task} output, "
                          f"scored with {scored}: drop {'it' if len(given) == 1 else 'them'}")


def score_files(cfg: ScoreConfig) -> List[Dict[str, Any]]:
    """Read ``cfg.hyp`` and ``cfg.ref`` (or the T- lines of generate output) and score them.

    Results are as from :func:`corpus_scores`; with ``sentence_level`` each also has
    ``sentence_ids`` (the generate ids, or 0-based line numbers of a plain file). Classification
    and tagging output (``cfg.task``, or recognised) are scored by :mod:`seqkit.scoring.labels`.
    """
    refs_paths = as_list(cfg.ref)
    _check_options(as_list(cfg.metrics), cfg.tokenize, cfg.output_format)
    if not cfg.hyp:
        raise SeqkitError("no hypothesis file: pass hyp=FILE (or hyp=- for stdin)")
    if [cfg.hyp, *refs_paths].count("-") > 1:
        raise SeqkitError("only one of hyp and ref can be read from stdin (-)")
    hyp_name = _display(cfg.hyp)
    lines = read_text_lines(cfg.hyp)
    if not lines:
        raise SeqkitError(f"hypothesis file {hyp_name} is empty")
    task = detect_task(lines, hyp_name) if cfg.task == "auto" else cfg.task
    if task not in TASKS:
        raise SeqkitError(f"unknown task {task!r}; valid: {', '.join(TASKS)}")
    check_settings(cfg, task, hyp_name)
    if task in ("classification", "tagging"):
        if len(refs_paths) > 1:
            raise SeqkitError(f"{task} takes one reference file, got {len(refs_paths)}")
        ref = (_display(refs_paths[0]), read_text_lines(refs_paths[0])) if refs_paths else None
        if task == "tagging":
            return score_tagging(lines, hyp_name, ref)
        return score_classification(lines, hyp_name, ref, cfg.label_column, str(cfg.positive_label))

    targets: Optional[Dict[int, str]] = None
    if is_generate_output(lines):
        ids, hyps, targets = parse_generate_output(lines, hyp_name)
        what = "hypotheses (D- lines)"
        log.info("%s: seqkit-generate output, %d hypotheses", hyp_name, len(hyps))
    else:
        ids, hyps, what = list(range(len(lines))), lines, "lines"

    refs: List[List[str]] = []
    for path in refs_paths:
        stream = read_text_lines(path)
        if len(stream) != len(hyps):
            raise SeqkitError(
                f"line counts differ: {hyp_name} has {len(hyps)} {what} but {_display(path)} has {len(stream)} lines"
            )
        refs.append(stream)
    if not refs:
        if targets is None:
            raise SeqkitError("no references: pass ref=FILE or ref=[FILE1,FILE2] (only seqkit-generate output carries "
                              "its own T- references)")
        missing = [i for i in ids if i not in targets]
        if missing:
            raise SeqkitError(f"{hyp_name}: {len(missing)} of {len(ids)} sentence ids have no T- line (e.g. id "
                              f"{missing[0]}); pass the references with ref=FILE")
        refs = [[targets[i] for i in ids]]

    results = corpus_scores(
        hyps,
        refs,
        metrics=as_list(cfg.metrics),
        lowercase=cfg.lowercase,
        tokenize=cfg.tokenize,
        tok_lc_bleu=cfg.tok_lc_bleu,
        sentence_level=cfg.sentence_level,
    )
    if cfg.sentence_level:
        for r in results:
            if "sentence_scores" in r:
                r["sentence_ids"] = ids
    return results


# --------------------------------------------------------------------------- output


def _json_record(result: Dict[str, Any]) -> Dict[str, Any]:
    out = {k: v for k, v in result.items() if k not in ("text", "table")}
    out["score"] = round(out["score"], 4)  # 100.00000000000004 -> 100.0
    if "sentence_scores" in out:
        out["sentence_scores"] = [round(x, 4) for x in out["sentence_scores"]]
    return out


def format_results(results: List[Dict[str, Any]], output_format: str = "text") -> str:
    """Printable results: a line per metric (score and signature) or a JSON object per metric."""
    if output_format == "json":
        return "\n".join(json.dumps(_json_record(r), ensure_ascii=False) for r in results)
    if output_format != "text":
        raise SeqkitError(f"unknown output_format {output_format!r}; valid: {', '.join(OUTPUT_FORMATS)}")
    lines = [r["text"] for r in results]
    for r in results:
        lines += r.get("table", [])  # e.g. conlleval's per-type scores, tab-separated
    per_sentence = [r for r in results if "sentence_scores" in r]
    if per_sentence:
        # a tab-separated table after the corpus scores: easy to sort/cut/paste
        lines += [f"sentence-level {r['name']}: {r['sentence_signature']}" for r in per_sentence]
        lines.append("\t".join(["id"] + [r["name"] for r in per_sentence]))
        ids = per_sentence[0].get("sentence_ids", range(len(per_sentence[0]["sentence_scores"])))
        for row, idx in enumerate(ids):
            lines.append("\t".join([str(idx)] + [f"{r['sentence_scores'][row]:.2f}" for r in per_sentence]))
    return "\n".join(lines)
