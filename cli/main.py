"""``seqkit <subcommand> ARGS...``: one umbrella command for the ``seqkit-*`` entry points.

``seqkit train model=transformer_small`` is ``seqkit-train model=transformer_small``. Subcommand
modules are imported only when chosen, so ``seqkit score`` never imports torch.
"""

from __future__ import annotations

import importlib
import sys
from typing import List, Optional

import seqkit

# subcommand -> one-line description; each is seqkit.cli.<name>.main(argv)
SUBCOMMANDS = {
    "preprocess": "learn/apply a tokenizer, build dictionaries, binarize text into a data folder",
    "train": "train a model on a binarized data folder",
    "generate": "decode with a trained checkpoint (beam search, sampling)",
    "score": "score hypotheses against references with sacreBLEU (BLEU, chrF, TER)",
    "eval-lm": "perplexity of a language model on a binarized split (per token and per word)",
    "average": "average the weights of a run's last checkpoints (save_dir=DIR last=5 output=FILE)",
    "prune": "remove attention heads or zero the smallest weights of a checkpoint (method=heads|magnitude share=0.2)",
    "probe": "linear probes with control tasks on every layer of a pretraining checkpoint (path= data=)",
    "embed": "sentence vectors of a checkpoint to .npy, or nearest corpus sentences of a query (path= input=|query=)",
    "export": "write a checkpoint for CTranslate2 or HuggingFace, or stand-alone (see seqkit export --help)",
    "import": "turn a HuggingFace model folder into a seqkit checkpoint (needs seqkit[hf])",
    "plot": "attention heatmap of a translation, training curves of runs (needs seqkit[plot])",
}

MODULES = {"import": "import_hf"}  # subcommands whose module name differs (``import`` is a keyword)


def usage() -> str:
    lines = ["usage: seqkit [--version] [--help] <subcommand> [--help] [key=value ...]", "", "subcommands:"]
    lines += [f"  {name:<11} {doc}" for name, doc in SUBCOMMANDS.items()]
    lines += ["", "Each is also installed as seqkit-<subcommand>; `seqkit <subcommand> --help` lists its settings."]
    return "\n".join(lines)


def _fail(message: str, code: int) -> None:
    print(f"seqkit: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def main(argv: Optional[List[str]] = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(usage(), file=sys.stderr)
        raise SystemExit(2)
    first, rest = args[0], args[1:]
    if first in ("-h", "--help", "help"):
        print(usage())
        raise SystemExit(0)
    if first in ("-V", "--version"):
        print(f"seqkit {seqkit.__version__}")
        raise SystemExit(0)
    if first not in SUBCOMMANDS:
        what = "option" if first.startswith("-") else "subcommand"
        _fail(f"unknown {what} {first!r}; valid subcommands: {', '.join(SUBCOMMANDS)} (see seqkit --help)", 2)
    module_name = f"seqkit.cli.{MODULES.get(first, first.replace('-', '_'))}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:
            raise  # a real missing dependency inside the module: keep its traceback
        _fail(f"subcommand {first!r} is not available in this installation ({module_name} is missing)", 1)
    module.main(rest)


if __name__ == "__main__":
    main()
