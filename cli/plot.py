"""``seqkit-plot``: pictures of a model and its training (needs ``pip install 'seqkit[plot]'``).

    seqkit-plot attention path=CK.pt sentence="Ein Hund rennt." [output=attention.png] [beam=5] [layer=N]
    seqkit-plot curves LOG.jsonl [LOG.jsonl ...] [output=curves.png] [labels=[a,b]]
    seqkit-plot activations path=CK.pt text_file=PASSAGE.txt [unit=K | property=quotes] [output=activations.png]
    seqkit-plot gradients RESULTS.json [RESULTS.json ...] [output=gradients.png]

The drawing lives in :mod:`seqkit.analysis.plot`; this module parses the command line and, for
``attention``, translates the sentence with the checkpoint.
"""

from __future__ import annotations

import re
import sys
from typing import List, Optional, Sequence

from seqkit.analysis.plot import (ActivationsPlotConfig, AttentionPlotConfig, CurvesPlotConfig, GradientsPlotConfig,
                                  PruningPlotConfig)
from seqkit.cli.common import ConfigBuilder, parse_argv, run_main, setup_logging
from seqkit.core.errors import SeqkitError

PROG = "seqkit-plot"

USAGES = {
    "attention": 'seqkit-plot attention path=CHECKPOINT sentence="TEXT" [output=attention.png] [beam=5] [layer=N]',
    "curves": "seqkit-plot curves LOG.jsonl [LOG.jsonl ...] [output=curves.png] [labels=[a,b]]",
    "pruning": "seqkit-plot pruning RESULTS.jsonl [RESULTS.jsonl ...] [output=pruning.png]",
    "activations": "seqkit-plot activations path=CHECKPOINT text_file=FILE [unit=K | property=quotes] "
                   "[layer=-1] [state=cell] [output=activations.png]",
    "gradients": "seqkit-plot gradients RESULTS.json [RESULTS.json ...] [output=gradients.png]",
}
DOCS = {
    "attention": "translate one sentence and draw the decoder's attention over the source as a heatmap",
    "curves": "draw train/valid loss, valid perplexity and loss against time of one or more runs' train_log.jsonl",
    "pruning": "draw BLEU (or accuracy) and speed against the share pruned from examples/pruning/sweep.py's results",
    "activations": "colour a passage by one LSTM unit's activation; find the units that track quotes, brackets, "
                   "position in the line or word",
    "gradients": "draw gradient norm against distance in time (RNN, GRU, LSTM) from "
                 "examples/language_model/vanishing_gradient/measure.py's results",
}
# commands whose plain arguments are files: the field
LISTED = {"curves": "logs", "pruning": "results", "gradients": "results"}
# values taken verbatim (a sentence may hold commas, quotes, brackets, ${...}): quoted for hydra
FREE_TEXT = {"attention": ("path", "sentence", "output"), "curves": ("output",), "pruning": ("output",),
             "activations": ("path", "text_file", "output"), "gradients": ("output",)}


def usage() -> str:
    lines = ["usage:"] + [f"  {u}" for u in USAGES.values()] + ["", "subcommands:"]
    lines += [f"  {name:<10} {doc}" for name, doc in DOCS.items()]
    lines += ["", "`seqkit-plot <subcommand> --help` lists its settings; "
                  "matplotlib comes with pip install 'seqkit[plot]'."]
    return "\n".join(lines)


def _quote(text: str) -> str:
    """``text`` as a hydra quoted string that composes back to exactly ``text``."""
    text = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, text)  # hydra: only these backslashes escape
    return "'" + text.replace("'", "\\'").replace("${", "\\${") + "'"


def _overrides(command: str, argv: List[str]) -> List[str]:
    """Quote free-text values; for ``curves`` and ``pruning``, plain arguments (no ``=``) become
    ``logs=[...]`` / ``results=[...]``."""
    out: List[str] = []
    logs: List[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        key, sep, value = a.partition("=")
        if a in ("--config", "--cfg", "-c") and i + 1 < len(argv):
            out += [a, argv[i + 1]]
            i += 2
            continue
        if sep and key in FREE_TEXT[command]:
            a = f"{key}={_quote(value)}"
        elif not sep and not a.startswith("-") and command in LISTED:
            logs.append(a)
            i += 1
            continue
        out.append(a)
        i += 1
    if logs:
        key = LISTED[command]
        if any(o.startswith(f"{key}=") for o in out):
            raise SeqkitError(f"give the files as arguments or as {key}=[...], not both")
        out.append(f"{key}=[" + ",".join(_quote(p) for p in logs) + "]")
    return out


def _config(command: str, schema: type, argv: List[str]) -> object:
    from omegaconf import OmegaConf

    builder = ConfigBuilder(f"plot_{command}", schema)
    if any(a in ("-h", "--help") for a in argv):
        print("\n".join([f"usage: {USAGES[command]}", "", DOCS[command] + ".", ""]
                        + builder.help_text(f"{PROG} {command}").splitlines()[2:]))
        raise SystemExit(0)
    return OmegaConf.to_object(parse_argv(builder, _overrides(command, argv), f"{PROG} {command}"))


def attention(argv: List[str]) -> None:
    import logging

    from seqkit.analysis.plot import require_matplotlib, write_attention

    cfg: AttentionPlotConfig = _config("attention", AttentionPlotConfig, argv)
    setup_logging()
    if not cfg.path:
        raise SeqkitError("path=CHECKPOINT is required")
    if not cfg.sentence.strip():
        raise SeqkitError('sentence="..." is required: the source sentence to translate')
    require_matplotlib()  # before the checkpoint loads

    from seqkit.generation.translator import Translator

    t = Translator.from_checkpoint(cfg.path, print_alignment=True, alignment_layer=cfg.layer, beam=cfg.beam)
    best = t.translate_nbest([cfg.sentence])[0][0]
    # columns: the source pieces, then eos (which the dictionary's string() leaves out); rows: the
    # hypothesis' pieces, then eos
    src = t.task.pieces(t.task.encode_source(cfg.sentence), "src") + ["</s>"]
    tgt = list(best["pieces"]) + ["</s>"]
    weights = best["attention"].float().cpu().numpy()
    width, height = write_attention(cfg.output, weights, src, tgt, best["text"])
    logging.getLogger("seqkit.plot").info("wrote %s (%dx%d px): %d source x %d target pieces; %s",
                                          cfg.output, width, height, len(src), len(tgt), best["text"])


def curves(argv: List[str]) -> None:
    import logging

    from seqkit.analysis.plot import read_log, require_matplotlib, run_labels, write_curves

    cfg: CurvesPlotConfig = _config("curves", CurvesPlotConfig, argv)
    setup_logging()
    if not cfg.logs:
        raise SeqkitError("no logs given: seqkit-plot curves LOG.jsonl [LOG.jsonl ...]")
    if cfg.labels and len(cfg.labels) != len(cfg.logs):
        raise SeqkitError(f"labels= has {len(cfg.labels)} names for {len(cfg.logs)} logs")
    require_matplotlib()
    runs = [read_log(p) for p in cfg.logs]
    labels = [str(x) for x in cfg.labels] or run_labels(cfg.logs)
    width, height = write_curves(cfg.output, runs, labels)
    logging.getLogger("seqkit.plot").info("wrote %s (%dx%d px): %d run(s)", cfg.output, width, height, len(runs))


def activations(argv: List[str]) -> None:
    import logging

    import torch

    from seqkit.analysis.activations import PROPERTIES, property_signals, read_passage, search, unit_activations
    from seqkit.analysis.plot import require_matplotlib, write_activations
    from seqkit.core.checkpoints import load_for_inference

    cfg: ActivationsPlotConfig = _config("activations", ActivationsPlotConfig, argv)
    setup_logging()
    log = logging.getLogger("seqkit.plot")
    if not cfg.path or not cfg.text_file:
        raise SeqkitError("path=CHECKPOINT and text_file=FILE are required")
    require_matplotlib()
    lines = read_passage(cfg.text_file, cfg.max_chars)  # before the checkpoint loads
    task, model = load_for_inference(cfg.path)
    model.eval()
    if getattr(task, "model_kind", None) != "lm":
        raise SeqkitError(f"{cfg.path} is not a language model checkpoint (unit activations read an LSTM LM)")
    d, tok = task.dictionary, task.tokenizer()
    ids = [d.eos()]  # the stream as training read it: each line's pieces, then </s>
    for line in lines:
        pieces = tok.encode(line) if tok is not None else line.split()
        if len(pieces) != len(line):
            raise SeqkitError(f"{cfg.path} does not read one piece per character (tokenizer=char): "
                              "unit activations are drawn per character")
        ids += d.encode(pieces, append_eos=True)
    layers = getattr(getattr(model, "lstm", None), "num_layers", 1)
    layer = cfg.layer if cfg.layer >= 0 else layers - 1
    acts = unit_activations(model, torch.tensor(ids), layer, cfg.state)[1:].numpy()  # after each character
    found = search(acts, property_signals(lines))
    for name in PROPERTIES:
        log.info("%s: best units %s", name, ", ".join(f"{u} (r={r:+.3f})" for u, r in found[name]))
    unit = cfg.unit if cfg.unit >= 0 else found[cfg.property][0][0]
    if unit >= acts.shape[1]:
        raise SeqkitError(f"unit={unit}: layer {layer} has units 0-{acts.shape[1] - 1}")
    r = dict(found[cfg.property]).get(unit)
    title = f"layer {layer} {cfg.state} unit {unit}" + (f" (r={r:+.3f} with {cfg.property})" if r is not None else "")
    rows = write_activations(cfg.output, lines, acts[:, unit], title, cfg.width)
    log.info("wrote %s: %s, %d characters in %d rows", cfg.output, title, len(acts), rows)


def pruning(argv: List[str]) -> None:
    import json
    import logging

    from seqkit.analysis.plot import require_matplotlib, write_pruning
    from seqkit.core.io import read_lines

    cfg: PruningPlotConfig = _config("pruning", PruningPlotConfig, argv)
    setup_logging()
    if not cfg.results:
        raise SeqkitError("no results given: seqkit-plot pruning RESULTS.jsonl [...]")
    require_matplotlib()
    rows = []
    for path in cfg.results:
        for i, line in enumerate(read_lines(path), 1):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise SeqkitError(f"{path}:{i}: not a JSON line") from None
    if not rows or any(k not in r for r in rows for k in ("method", "share", "per_s_b64")):
        raise SeqkitError("the results need method, share and per_s_b64 on every line (examples/pruning/sweep.py)")
    write_pruning(cfg.output, rows)
    logging.getLogger("seqkit.plot").info("wrote %s: %d rows", cfg.output, len(rows))


def gradients(argv: List[str]) -> None:
    import json
    import logging

    from seqkit.analysis.plot import require_matplotlib, run_labels, write_gradients

    cfg: GradientsPlotConfig = _config("gradients", GradientsPlotConfig, argv)
    setup_logging()
    if not cfg.results:
        raise SeqkitError("no results given: seqkit-plot gradients RESULTS.json [...]")
    require_matplotlib()
    results = []
    for path in cfg.results:
        try:
            with open(path, encoding="utf-8") as f:
                results.append(json.load(f))
        except OSError as e:
            raise SeqkitError(f"cannot read {path}: {e.strerror or e}") from None
        except json.JSONDecodeError:
            raise SeqkitError(f"{path}: not JSON") from None
        result = results[-1] if isinstance(results[-1], dict) else {}
        runs = result.get("runs") or [{}]
        if "distances" not in result or any(k not in r for r in runs for k in ("cell", "updates", "mean")):
            raise SeqkitError(f"{path}: needs distances and runs with cell, updates and mean "
                              "(examples/language_model/vanishing_gradient/measure.py)")
    labels = run_labels(cfg.results) if len(cfg.results) > 1 else [""]
    write_gradients(cfg.output, results, labels)
    logging.getLogger("seqkit.plot").info("wrote %s: %d curve(s)", cfg.output, sum(len(r["runs"]) for r in results))


COMMANDS = {"attention": attention, "curves": curves, "pruning": pruning, "activations": activations,
            "gradients": gradients}


def plot(argv: Optional[Sequence[str]] = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        raise SystemExit(0 if args else 2)
    if args[0] not in COMMANDS:
        raise SeqkitError(f"unknown plot {args[0]!r}; valid: {', '.join(COMMANDS)} (see seqkit-plot --help)")
    COMMANDS[args[0]](args[1:])


def main(argv: Optional[List[str]] = None) -> None:
    run_main(PROG, lambda: plot(argv))


if __name__ == "__main__":
    main()
