"""Pictures of a model and its training: an attention heatmap of one translation, and training
curves (loss, perplexity, wall time) of one or more runs from their ``train_log.jsonl`` files.

matplotlib is optional (``pip install 'seqkit[plot]'``) and imported only when a picture is drawn,
always with its Agg (PNG) canvas, never a window. ``seqkit-plot`` (``seqkit/cli/plot.py``) calls this.
"""

from __future__ import annotations

import io
import json
import math
import os
import textwrap
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError

DPI = 100
CURVES_FIGSIZE = (12.0, 8.0)  # inches: 1200 x 800 pixels at DPI
CELL = 0.4  # inches per attention cell, shrunk where a side would pass MAX_INCHES
MAX_INCHES = 24.0
SCORES = {"bleu": "BLEU", "accuracy": "accuracy", "f1": "F1"}  # log key -> axis name, first found drawn


@dataclass
class AttentionPlotConfig:
    path: str = arg("", "checkpoint to translate with (required)")
    sentence: str = arg("", "source sentence, raw text as seqkit-generate input=- takes it (required)")
    output: str = arg("attention.png", "PNG file to write")
    beam: int = arg(5, "beam size; the best hypothesis is drawn", ge=1)
    layer: Optional[int] = arg(None, "decoder layer whose cross-attention (mean over heads) is drawn "
                                     "(None: the model's default, the Transformer's last layer)")


@dataclass
class CurvesPlotConfig:
    logs: List[str] = arg(help="train_log.jsonl files, one run each (also given as plain arguments)", factory=list)
    output: str = arg("curves.png", "PNG file to write")
    labels: List[str] = arg(help="one legend label per log (default: each log's folder name)", factory=list)


def _figure(figsize: Tuple[float, float]) -> Any:
    """A matplotlib Figure on an Agg canvas (no pyplot, no global backend state)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise SeqkitError("plotting needs matplotlib: pip install 'seqkit[plot]'") from None
    fig = Figure(figsize=figsize, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def require_matplotlib() -> None:
    """Fail early (before loading a model) when matplotlib is missing."""
    _figure((1.0, 1.0))


def _save(fig: Any, output: str) -> None:
    from seqkit.core.io import atomic_write_bytes

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)  # no bbox_inches="tight": the size stays figsize x DPI
    folder = os.path.dirname(os.path.abspath(output))
    try:
        os.makedirs(folder, exist_ok=True)
        atomic_write_bytes(output, buf.getvalue())
    except OSError as e:
        raise SeqkitError(f"cannot write {output}: {e.strerror or e}") from None


# -- attention --------------------------------------------------------------------------------------
def _cell(n: int, margin: float) -> float:
    return min(CELL, (MAX_INCHES - margin) / max(n, 1))


def attention_figsize(n_src: int, n_tgt: int) -> Tuple[float, float]:
    """Inches for a heatmap of ``n_src`` columns x ``n_tgt`` rows: room for labels, title, colourbar;
    at most MAX_INCHES a side (an undertrained model's 200-piece hypothesis still fits)."""
    return (round(max(5.0, 2.5 + _cell(n_src, 2.5) * n_src), 2), round(max(4.0, 2.2 + _cell(n_tgt, 2.2) * n_tgt), 2))


def write_attention(output: str, weights: Any, src_pieces: Sequence[str], tgt_pieces: Sequence[str],
                    title: str) -> Tuple[int, int]:
    """PNG heatmap of ``weights`` ``[n_tgt, n_src]`` (rows: target pieces, columns: source pieces);
    returns the image's (width, height) in pixels."""
    import numpy as np

    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (len(tgt_pieces), len(src_pieces)):
        raise SeqkitError(f"attention has shape {tuple(w.shape)} but there are {len(tgt_pieces)} target and "
                          f"{len(src_pieces)} source pieces")
    figsize = attention_figsize(len(src_pieces), len(tgt_pieces))
    fig = _figure(figsize)
    ax = fig.add_subplot()
    image = ax.imshow(w, cmap="Greys", vmin=0.0, vmax=max(float(w.max(initial=0.0)), 1e-9), aspect="auto",
                      interpolation="nearest")
    # tick labels as large as their cells allow: 10 pt at full size, 4 pt at the smallest
    ax.set_xticks(range(len(src_pieces)), list(src_pieces), rotation=90,
                  fontsize=min(10.0, max(4.0, 60 * _cell(len(src_pieces), 2.5))))
    ax.set_yticks(range(len(tgt_pieces)), list(tgt_pieces),
                  fontsize=min(10.0, max(4.0, 60 * _cell(len(tgt_pieces), 2.2))))
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    fig.colorbar(image, ax=ax, label="attention weight")
    wrap = max(30, int(figsize[0] * 11))  # ~11 characters per inch at the default title size
    ax.set_title(textwrap.fill(title, wrap) or "(empty translation)", fontsize="medium")
    _save(fig, output)
    return int(round(figsize[0] * DPI)), int(round(figsize[1] * DPI))


# -- training curves --------------------------------------------------------------------------------
def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool):
        return None
    try:
        x = float(value)  # lr is logged as a string, e.g. "0.000248"
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def read_log(path: str) -> Dict[str, List[Dict[str, float]]]:
    """``{"train": [...], "valid": [...]}`` numeric records of a seqkit ``train_log.jsonl``, each with
    ``update`` and ``wall``: seconds since the run started (its first record's time less that
    record's ``train_wall``), or the last ``train_wall`` where records carry no time."""
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, "train_log.jsonl")):
        path = os.path.join(path, "train_log.jsonl")  # a run's save_dir is fine too
    if not os.path.isfile(path):
        raise SeqkitError(f"{path}: no such log file")
    out: Dict[str, List[Dict[str, float]]] = {"train": [], "valid": []}
    t0: Optional[float] = None
    train_wall: Optional[float] = None
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise SeqkitError(f"{path} line {lineno}: not a JSON line ({e.msg}); "
                                      "expected a seqkit train_log.jsonl") from None
                if not isinstance(rec, dict):
                    raise SeqkitError(f"{path} line {lineno}: not a log record (a JSON object); "
                                      "expected a seqkit train_log.jsonl")
                when = _number(rec.get("time"))
                if t0 is None and when is not None:  # the run's start: its first record less its train time
                    t0 = when - (_number(rec.get("train_wall")) or 0.0)
                update = _number(rec.get("update"))
                if rec.get("tag") not in ("train", "valid") or update is None:
                    continue
                values = {k: x for k, x in ((k, _number(v)) for k, v in rec.items()) if x is not None}
                if "train_wall" in values:
                    train_wall = values["train_wall"]
                wall = when - t0 if (when is not None and t0 is not None) else train_wall
                if wall is not None:
                    values["wall"] = wall
                out[rec["tag"]].append(values)
    except UnicodeDecodeError:
        raise SeqkitError(f"{path}: not UTF-8 text; expected a seqkit train_log.jsonl") from None
    if not out["train"] and not out["valid"]:
        raise SeqkitError(f"{path}: no train or valid records; expected a seqkit train_log.jsonl")
    return out


def run_labels(paths: Sequence[str]) -> List[str]:
    """Each log's folder name, with more of its path where two would read the same."""
    parents = [os.path.abspath(p if os.path.isdir(p) else os.path.dirname(p) or ".") for p in paths]
    for depth in range(1, 6):
        labels = ["/".join(p.strip(os.sep).split(os.sep)[-depth:]) or p for p in parents]
        if len(set(labels)) == len(labels):
            return labels
    return [os.path.abspath(p) for p in paths]


def _series(records: List[Dict[str, float]], x: str, y: str) -> Tuple[List[float], List[float]]:
    pairs = [(r[x], r[y]) for r in records if x in r and y in r]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def write_curves(output: str, runs: Sequence[Dict[str, List[Dict[str, float]]]],
                 labels: Sequence[str]) -> Tuple[int, int]:
    """One PNG, a 2x2 grid: train/valid loss, valid perplexity and (valid BLEU, accuracy or F1, or
    the learning rate) against updates, valid loss against wall time; one colour per run. Returns
    (width, height) px."""
    fig = _figure(CURVES_FIGSIZE)
    (loss_ax, ppl_ax), (wall_ax, extra_ax) = fig.subplots(2, 2)
    colours = [f"C{i % 10}" for i in range(len(runs))]
    longest = max((r.get("wall", 0.0) for run in runs for r in run["valid"]), default=0.0)
    unit, scale = ("h", 3600.0) if longest > 3 * 3600 else ("min", 60.0) if longest > 600 else ("s", 1.0)
    # the fourth panel: the validation score the runs log (translation BLEU, classification accuracy,
    # tagging F1), else the learning rate
    order = list(SCORES)
    if any("precision" in r for run in runs for r in run["valid"]):  # tagging: conlleval's entity F1 first
        order = ["f1"] + [k for k in order if k != "f1"]
    score = next((k for k in order if any(k in r for run in runs for r in run["valid"])), None)
    with_score = score is not None
    extra_tag, extra_key = ("valid", score) if with_score else ("train", "lr")

    for run, label, c in zip(runs, labels, colours):
        xs, ys = _series(run["train"], "update", "loss")
        loss_ax.plot(xs, ys, color=c, linewidth=1.2, label=f"{label} train")
        xs, ys = _series(run["valid"], "update", "loss")
        loss_ax.plot(xs, ys, color=c, linestyle="--", marker="o", markersize=3, label=f"{label} valid")
        xs, ys = _series(run["valid"], "update", "ppl")
        ppl_ax.plot(xs, ys, color=c, marker="o", markersize=3, label=label)
        xs, ys = _series(run["valid"], "wall", "loss")
        wall_ax.plot([x / scale for x in xs], ys, color=c, marker="o", markersize=3, label=label)
        xs, ys = _series(run[extra_tag], "update", extra_key)
        extra_ax.plot(xs, ys, color=c, marker="o" if with_score else None, markersize=3, label=label)

    panels = [
        (loss_ax, "loss (solid: train, dashed: valid)", "updates", "loss (base 2)"),
        (ppl_ax, "valid perplexity", "updates", "perplexity"),
        (wall_ax, "valid loss against time", f"wall time ({unit})", "loss (base 2)"),
        (extra_ax, f"valid {SCORES[score]}" if with_score else "learning rate", "updates",
         SCORES[score] if with_score else "lr"),
    ]
    for ax, title, xlabel, ylabel in panels:
        ax.set_title(title, fontsize="medium")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if any(len(line.get_xdata()) for line in ax.get_lines()):
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "no records", ha="center", va="center", transform=ax.transAxes, color="grey")
    if any(len(line.get_xdata()) for line in ppl_ax.get_lines()):
        ppl_ax.set_yscale("log")
    _save(fig, output)
    return int(CURVES_FIGSIZE[0] * DPI), int(CURVES_FIGSIZE[1] * DPI)


# -- probing ----------------------------------------------------------------------------------------
def write_probe(output: str, result: Dict[str, Any]) -> None:
    """seqkit-probe's results as one PNG: probe accuracy, control accuracy and selectivity per
    layer, the majority-label accuracy as a dashed line."""
    rows = result["layers"]
    fig = _figure((max(6.0, 0.6 * len(rows) + 3.0), 4.5))
    ax = fig.subplots()
    xs = list(range(len(rows)))
    ax.plot(xs, [r["accuracy"] for r in rows], marker="o", label="task accuracy")
    if any("control" in r for r in rows):
        ax.plot(xs, [r["control"] for r in rows], marker="s", label="control task accuracy")
        ax.plot(xs, [r["selectivity"] for r in rows], marker="^", label="selectivity (task - control)")
    ax.axhline(result["majority"], color="grey", linestyle="--", linewidth=1, label="majority label")
    ax.set_xticks(xs, [r["layer"] for r in rows], rotation=45 if len(rows) > 10 else 0)
    ax.set_xlabel("layer (0: embeddings)")
    ax.set_ylabel("%")
    folder = os.path.dirname(os.path.abspath(result["checkpoint"]))
    if os.path.basename(folder) == "checkpoints":  # RUN/checkpoints/checkpoint_best.pt: the run's name
        folder = os.path.dirname(folder)
    name = os.path.basename(folder) or os.path.basename(result["checkpoint"])
    body = f"{name}, random weights" if result["random_init"] else name
    ax.set_title(f"{body}: {os.path.basename(result['data'].rstrip('/'))} ({result['split']})", fontsize="medium")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    _save(fig, output)


# -- pruning ---------------------------------------------------------------------------------------------
@dataclass
class PruningPlotConfig:
    results: List[str] = arg(help="results.jsonl files of examples/pruning/sweep.py (also given as plain arguments)",
                             factory=list)
    output: str = arg("pruning.png", "PNG file to write")


def write_pruning(output: str, rows: Sequence[Dict[str, Any]]) -> None:
    """Score (BLEU or accuracy) and speed at batch 64 against the share pruned, one colour per
    method: the score solid on the left axis, sentences/s dashed on the right."""
    score = "bleu" if any("bleu" in r for r in rows) else "accuracy"
    fig = _figure((8.0, 5.0))
    ax = fig.subplots()
    speed_ax = ax.twinx()
    for i, method in enumerate(sorted({r["method"] for r in rows})):
        mine = sorted((r for r in rows if r["method"] == method), key=lambda r: r["share"])
        xs = [100 * r["share"] for r in mine]
        ax.plot(xs, [r[score] for r in mine], color=f"C{i}", marker="o", label=f"{method}: {SCORES[score]}")
        speed_ax.plot(xs, [r["per_s_b64"] for r in mine], color=f"C{i}", linestyle="--", marker="x",
                      label=f"{method}: per second (batch 64)")
    ax.set_xlabel("share pruned (%)")
    ax.set_ylabel(SCORES[score])
    speed_ax.set_ylabel("sentences (examples) per second, batch 64")
    ax.grid(True, alpha=0.3)
    lines = ax.get_lines() + speed_ax.get_lines()
    ax.legend(lines, [line.get_label() for line in lines], fontsize="small", loc="lower left")
    ax.set_title(f"{SCORES[score]} and speed against the share pruned", fontsize="medium")
    _save(fig, output)


# -- unit activations -------------------------------------------------------------------------------
@dataclass
class ActivationsPlotConfig:
    path: str = arg("", "checkpoint of a character-level LSTM language model (required)")
    text_file: str = arg("", "UTF-8 passage to read (required): its lines as the model read its training lines")
    output: str = arg("activations.png", "PNG file to write")
    layer: int = arg(-1, "LSTM layer whose units are read (-1: the last)")
    state: str = arg("cell", "cell (the cell state c, as Karpathy et al. draw it) or hidden (the output h)",
                     choices=("cell", "hidden"))
    unit: int = arg(-1, "the unit to draw (-1: the unit best correlated with `property`)", ge=-1)
    property: str = arg("quotes", "when unit=-1, the property whose best unit is drawn: quotes, brackets, "
                                  "line_position or word_position",
                        choices=("quotes", "brackets", "line_position", "word_position"))
    max_chars: int = arg(3000, "read at most this many characters of the passage", ge=1)
    width: int = arg(100, "characters per drawn row", ge=10)


def write_activations(output: str, lines: Sequence[str], values: Sequence[float], title: str, width: int = 100) -> int:
    """The passage ``lines`` (each followed by one value for its end of line) coloured character by
    character by ``values`` (red positive, blue negative, white 0, scaled by the largest |value|);
    returns the number of drawn rows."""
    import numpy as np

    rows_text: List[str] = []
    rows_vals: List[List[float]] = []
    k = 0
    for line in lines:
        chars = list(line) + ["\u21b5"]  # ↵: where the line (the model's </s>) ends
        for start in range(0, len(chars), width):
            rows_text.append("".join(chars[start : start + width]))
            rows_vals.append([float(v) for v in values[k + start : k + start + width]])
        k += len(chars)
    grid = np.full((len(rows_text), width), np.nan)
    for r, vals in enumerate(rows_vals):
        grid[r, : len(vals)] = vals
    scale = float(np.nanmax(np.abs(grid))) or 1.0
    fig = _figure((min(0.13 * width + 1.0, MAX_INCHES), min(0.22 * len(rows_text) + 1.0, 4 * MAX_INCHES)))
    ax = fig.subplots()
    import matplotlib

    cmap = matplotlib.colormaps["coolwarm"].copy()
    cmap.set_bad("white")
    ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-scale, vmax=scale, aspect="auto", interpolation="nearest")
    for r, text in enumerate(rows_text):
        for c, ch in enumerate(text):
            ax.text(c, r, ch, ha="center", va="center", fontsize=7, family="monospace")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize="medium")
    _save(fig, output)
    return len(rows_text)


# -- gradient against distance ----------------------------------------------------------------------
@dataclass
class GradientsPlotConfig:
    results: List[str] = arg(help="results.json files of examples/language_model/vanishing_gradient/measure.py "
                                  "(also given as plain arguments)", factory=list)
    output: str = arg("gradients.png", "PNG file to write")


def write_gradients(output: str, results: Sequence[Dict[str, Any]], labels: Sequence[str]) -> None:
    """Mean ``||dL_T / dh_{T-k}||`` against the distance k on a log scale: one colour per cell (and
    results file), dashed at initialisation, solid after the last measured update count, dotted
    between. ``labels``: one prefix per results file (empty for one file)."""
    fig = _figure((9.0, 5.5))
    ax = fig.subplots()
    colour = 0
    for result, label in zip(results, labels):
        last = max(run["updates"] for run in result["runs"])
        for cell in dict.fromkeys(run["cell"] for run in result["runs"]):
            for run in (r for r in result["runs"] if r["cell"] == cell):
                style = "--" if run["updates"] == 0 else "-" if run["updates"] == last else ":"
                name = f"{label}{': ' if label else ''}{cell}, {run['updates']} updates"
                ax.plot(result["distances"], run["mean"], color=f"C{colour}", linestyle=style, label=name)
            colour += 1
    ax.set_yscale("log")  # zeros (an underflowed gradient) are left out of a log axis
    ax.set_xlabel("distance k: steps between the state h_(T-k) and the scored position T")
    ax.set_ylabel("mean ||dL_T / dh_(T-k)|| over sequences")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    ax.set_title(results[0].get("title", "gradient norm against distance"), fontsize="medium")
    _save(fig, output)
