"""The child processes of ``benchmarks/scale.py``: a seqkit command run from a chosen source tree, and
one training epoch's batching timed on a data folder.

    python benchmarks/scale_child.py run preprocess SRC|- ARGS...   # seqkit.cli.preprocess:main(ARGS)
    python benchmarks/scale_child.py batching FOLDER MAX_TOKENS EPOCHS [SRC]

``run`` with ``SRC`` (an older checkout of seqkit, also on ``PYTHONPATH``) imports every seqkit module
from there: the installed package is editable, and its finder maps ``seqkit.cli`` and
``seqkit.hydra_conf`` to this checkout's ``cli/`` and ``hydra_conf/``, so a finder put first here maps
them to ``SRC/cli`` and ``SRC/hydra_conf`` instead. Before running, it prints one stderr line
``scale_child modules: {json}`` with the files the command's modules came from (the proof of which
code ran; ``elsewhere`` lists any seqkit module imported from outside ``seqkit``'s checkout: none is
expected). ``-`` runs the installed seqkit, as the ``seqkit-<command>`` console script does.

``batching`` (with ``SRC``: imported from that checkout) prints one JSON line: the seconds to open the train split (memory-mapped) and, per
epoch, the seconds of what the trainer does before its first batch of the epoch
(``too_long`` then ``batches(max_tokens, 0, seed 1, epoch, shuffle=True, exclude)``), and this
process's peak RSS (VmHWM).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import json
import os
import sys
import time
from typing import List, Optional

MARKER = "scale_child modules: "
# the packages the editable install maps outside seqkit/ (setup.cfg's package_dir)
MAPPED = {"seqkit.cli": "cli", "seqkit.hydra_conf": "hydra_conf"}


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds ``seqkit.cli`` and ``seqkit.hydra_conf`` in ``src`` (their submodules then follow the
    packages' ``__path__``)."""

    def __init__(self, src: str):
        self.src = src

    def find_spec(self, fullname: str, path=None, target=None):  # noqa: ANN001 - the finder protocol
        if fullname not in MAPPED:
            return None
        folder = os.path.join(self.src, MAPPED[fullname])
        return importlib.util.spec_from_file_location(fullname, os.path.join(folder, "__init__.py"),
                                                      submodule_search_locations=[folder])


def use_source(src: str) -> None:
    """Import seqkit from ``src`` from now on."""
    src = os.path.abspath(src)
    sys.path.insert(0, src)
    sys.meta_path.insert(0, _SourceFinder(src))


def module_files(command: str) -> dict:
    """Where the command's entry point and the code it runs were imported from."""
    names = ["seqkit", f"seqkit.cli.{command}", "seqkit.cli.common", "seqkit.hydra_conf"]
    if command == "preprocess":
        names.append("seqkit.preprocess")
    out = {}
    for name in names:
        try:
            out[name] = getattr(importlib.import_module(name), "__file__", None)
        except ImportError as e:
            out[name] = f"not importable: {e}"
    root = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["seqkit"].__file__)))
    out["elsewhere"] = sorted(name for name, mod in list(sys.modules.items())
                              if name.split(".")[0] == "seqkit" and getattr(mod, "__file__", None)
                              and not os.path.abspath(mod.__file__).startswith(root + os.sep))
    return out


def run(command: str, src: str, argv: List[str]) -> None:
    if src != "-":
        use_source(src)
    main = importlib.import_module(f"seqkit.cli.{command}").main
    print(MARKER + json.dumps(module_files(command)), file=sys.stderr, flush=True)
    main(argv)


def batching(folder: str, max_tokens: int, epochs: int, max_positions: int = 1024) -> dict:
    """What the trainer does with the train split before each epoch's first batch, timed."""
    from seqkit.tasks.translation import TranslationConfig, TranslationTask

    start = time.perf_counter()
    train = TranslationTask(TranslationConfig(data=folder)).load_dataset("train")
    load_s = time.perf_counter() - start
    epoch_s, n_batches = [], 0
    for epoch in range(1, epochs + 1):
        start = time.perf_counter()
        exclude = train.too_long(max_positions, max_positions)
        n_batches = len(train.batches(max_tokens, 0, 1, epoch, shuffle=True, exclude=exclude))
        epoch_s.append(round(time.perf_counter() - start, 4))
    return {"pairs": len(train), "max_tokens": max_tokens, "load_s": round(load_s, 4), "epoch_s": epoch_s,
            "batches": n_batches, "peak_rss_mb": round(peak_rss_kb() / 1024, 1)}


def peak_rss_kb() -> int:
    """This process's VmHWM (``ru_maxrss`` would carry the forking parent's peak across exec)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def main(argv: Optional[List[str]] = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) >= 3 and args[0] == "run":
        run(args[1], args[2], args[3:])
    elif len(args) in (4, 5) and args[0] == "batching":
        if len(args) == 5 and args[4] != "-":
            use_source(args[4])
        out = batching(args[1], int(args[2]), int(args[3]))
        out["batching_module"] = sys.modules["seqkit.data.batching"].__file__
        print(json.dumps(out), flush=True)
    else:
        sys.exit(f"usage: {sys.argv[0]} run COMMAND SRC|- ARGS... | batching FOLDER MAX_TOKENS EPOCHS [SRC|-]")


if __name__ == "__main__":
    main()
