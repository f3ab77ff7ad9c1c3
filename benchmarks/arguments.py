"""argparse pieces the benchmarks share: a parser that answers a bad argument in one line, and
argument types that check a value before anything runs (positive numbers, names from a list,
comma lists, Tatoeba's folder, an output file whose folder exists)."""

from __future__ import annotations

import argparse
import difflib
import math
import os
from typing import Any, List


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, ``PROG: message``: no usage block, no traceback."""

    def error(self, message: str) -> None:
        self.exit(2, f"{self.prog}: {message}\n")


def positive(kind: type, what: str) -> Any:
    """An argparse type: a positive ``kind`` (int, float), ``what`` naming it in the error."""
    def parse(text: str) -> Any:
        try:
            x = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not (math.isfinite(x) and x > 0):
            raise argparse.ArgumentTypeError(f"{text} is not positive")
        return x
    return parse


def one_of(choices: Any, kind: str) -> Any:
    def check(text: str) -> str:
        if text not in choices:
            near = difflib.get_close_matches(text, list(choices), n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise argparse.ArgumentTypeError(f"unknown {kind} {text!r}{hint}; valid: {', '.join(choices)}")
        return text
    return check


def comma_list(item: Any) -> Any:
    def parse(text: str) -> List[Any]:
        values = [item(v.strip()) for v in text.split(",")]
        if len(set(values)) < len(values):
            raise argparse.ArgumentTypeError(f"{text!r} names one value twice")
        return values
    return parse


def tatoeba_data(text: str) -> str:
    if not os.path.isfile(os.path.join(text, "deu.txt")):
        why = "no such folder" if not os.path.isdir(text) else "holds no deu.txt (Tatoeba's English<TAB>German pairs)"
        raise argparse.ArgumentTypeError(f"{text}: {why}")
    return text


def out_file(text: str) -> str:
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"{folder}: no such folder")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is a folder")
    return text
