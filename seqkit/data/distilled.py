"""Sequence-level distillation data (Kim & Rush, 2016): a translation data folder whose targets, in
one split, are a teacher's beam-search output instead of the references.

``seqkit-generate ... gen_subset=train distill_to=DIR`` calls :func:`write_distilled_folder`: DIR
is a copy of the data folder (dictionaries, tokenizers, every other split unchanged) in which the
split's target side holds each sentence's best hypothesis, in sentence order, as the teacher's own
token ids (no detokenizing and re-encoding on the way). A student trained on DIR learns the
teacher's mode instead of the data's spread of translations.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Dict, List, Sequence

from seqkit.core.errors import SeqkitError
from seqkit.core.io import atomic_write_text
from seqkit.data.indexed_dataset import write_dataset


def check_destination(dest: str, data: str) -> None:
    """One clear error before any translating: DIR must be new, and not the data folder itself."""
    if os.path.abspath(dest) == os.path.abspath(data):
        raise SeqkitError(f"distill_to={dest} is task.data itself: choose a new folder")
    if os.path.exists(dest):
        raise SeqkitError(f"distill_to={dest} exists: remove it or choose a new folder")


def write_distilled_folder(data: str, dest: str, split: str, src_lang: str, tgt_lang: str,
                           best: Sequence[List[int]], eos: int, vocab_size: int, provenance: Dict) -> None:
    """Copy ``data`` to ``dest`` with ``split``'s target side replaced by ``best`` (one id list per
    sentence, in order; eos appended where a hypothesis stopped at the length limit without one).
    Written into a temporary folder renamed at the end: a failure leaves nothing at ``dest``."""
    tmp = dest.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        replaced = f"{split}.{src_lang}-{tgt_lang}.{tgt_lang}"
        for name in sorted(os.listdir(data)):
            path = os.path.join(data, name)
            if os.path.isfile(path) and not name.startswith(replaced + ".") and name != "preprocess.json":
                shutil.copy2(path, os.path.join(tmp, name))
        write_dataset(os.path.join(tmp, replaced), (ids if ids and ids[-1] == eos else list(ids) + [eos]
                                                     for ids in best), vocab_size)
        meta_path = os.path.join(data, "preprocess.json")
        meta = {}
        if os.path.isfile(meta_path):
            with open(meta_path, encoding="utf-8") as f:
                meta = json.load(f)
        meta["distilled"] = {"split": split, **provenance,
                             "target_tokens": sum(len(ids) - (1 if ids and ids[-1] == eos else 0) for ids in best)}
        atomic_write_text(os.path.join(tmp, "preprocess.json"), json.dumps(meta, indent=2) + "\n")
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
