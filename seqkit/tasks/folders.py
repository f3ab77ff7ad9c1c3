"""What a data folder is made for, read from the ``preprocess.json`` that ``seqkit-preprocess``
writes beside the splits (``task``: language_modeling, classification or tagging; none: a
translation folder, as the first folders were), and the checks every task's ``load_dataset`` makes
before it reads a split: the folder is of the kind the task reads and binarized in the task's own
dictionary. So a checkpoint run on the wrong folder (a classifier on a tagging folder, a word-level
language model on a character-level folder) says so in one line instead of predicting or scoring
ids that mean something else. ``task.data=dir1:dir2:...`` names shards of one corpus (fairseq's
convention): :func:`epoch_dir` picks an epoch's, :func:`check_shards` holds them to one dictionary.
"""

from __future__ import annotations

import fnmatch
import json
import os
from typing import Any, Dict, List, Optional

from seqkit.core.errors import SeqkitError
from seqkit.data.dictionary import Dictionary

META = "preprocess.json"


def read_meta(data: str) -> Optional[Dict[str, Any]]:
    """The folder's ``preprocess.json``, or None when it has none (a folder written by hand)."""
    path = os.path.join(data, META)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise SeqkitError(f"{path}: not readable as JSON ({e})") from None
    if not isinstance(meta, dict):
        raise SeqkitError(f"{path}: expected a JSON object")
    return meta


def folder_task(meta: Dict[str, Any]) -> str:
    """The task a folder was preprocessed for."""
    return str(meta.get("task") or "translation")


def tokenizer_name(meta: Dict[str, Any]) -> str:
    """The tokenizer a folder's text went through (``preprocess.json``'s ``tokenizer.name``)."""
    tok = meta.get("tokenizer")
    return str(tok.get("name")) if isinstance(tok, dict) and tok.get("name") else "unknown"


def tokenizer_label(tokenizer_state: Optional[Dict[str, Any]]) -> str:
    """``space tokenizer``: which tokenizer a checkpoint's text goes through (its saved state), for messages."""
    return f"{((tokenizer_state or {}).get('config') or {}).get('name') or 'no'} tokenizer"


def describe_folder(meta: Dict[str, Any]) -> str:
    """``a tagging data folder (9 tags)``, ``a translation data folder (de→en)``, ..."""
    task = folder_task(meta)
    labels = meta.get("labels") or []
    if task == "translation":
        langs = f" ({meta.get('source_lang')}→{meta.get('target_lang')})" if meta.get("source_lang") else ""
        return f"a translation data folder{langs}"
    if task == "classification":
        return f"a classification data folder ({len(labels)} labels{', sentence pairs' if meta.get('pairs') else ''})"
    if task == "tagging":
        return f"a tagging data folder ({len(labels)} tags)"
    if task == "language_modeling":
        return f"a language-modeling data folder ({tokenizer_name(meta)} tokenizer)"
    return f"a {task} data folder"


def check_folder(data: str, reads: str, model: str) -> Optional[Dict[str, Any]]:
    """Refuse ``data`` unless it is a folder preprocessed for task ``reads`` (``model``: what reads
    it, e.g. ``a sentence classifier (3 labels)``, for the message); returns its ``preprocess.json``
    (None for a folder without one, whose splits are read as they are)."""
    if not os.path.isdir(data):
        raise SeqkitError(f"task.data={data}: no such folder (a folder written by seqkit-preprocess)")
    meta = read_meta(data)
    if meta is not None and folder_task(meta) != reads:
        raise SeqkitError(f"task.data={data} is {describe_folder(meta)}, but this checkpoint is {model}, which reads "
                          f"{reads} folders: give it one (seqkit-preprocess task={reads} ...)")
    return meta


def check_dictionary(data: str, name: str, dictionary: Dictionary, vocab: str,
                     meta: Optional[Dict[str, Any]], redo: str) -> None:
    """Refuse a folder whose dictionary ``name`` (``dict.text.txt``, ...) is not ``dictionary`` or
    its first symbols (a masked LM adds ``<mask>`` after them): its ids would mean other pieces.
    ``vocab`` names the checkpoint's tokenizer, ``redo`` says how to binarize for it."""
    path = os.path.join(data, name)
    if not os.path.isfile(path):
        return
    theirs = Dictionary.load(path)
    if theirs.is_prefix_of(dictionary):
        return
    tok = f"{tokenizer_name(meta)} tokenizer, " if meta is not None else ""
    raise SeqkitError(f"task.data={data} was binarized with another dictionary ({tok}{len(theirs)} types) than "
                      f"this checkpoint's ({vocab}, {len(dictionary)} types): {redo}")


# -- shards: task.data=dir1:dir2:... (fairseq's convention) ------------------------------------------
def shard_dirs(data: str) -> List[str]:
    """The folders of ``task.data``: ``dir1:dir2:...`` names shards of one corpus, each a complete
    folder written by seqkit-preprocess in the same dictionaries; one folder is one shard."""
    dirs = data.split(os.pathsep)
    if len(dirs) > 1 and not all(dirs):
        raise SeqkitError(f"task.data={data}: an empty shard between ':'s; give dir1:dir2:... (one folder each)")
    return dirs


def epoch_dir(data: str, epoch: int = 1) -> str:
    """The folder epoch ``epoch`` (1-based) reads its training split from: shard ``(epoch - 1) % N``,
    round robin as fairseq's; validation and test splits come from the first (epoch 1)."""
    dirs = shard_dirs(data)
    return dirs[(max(epoch, 1) - 1) % len(dirs)]


def check_shards(data: str) -> None:
    """Refuse shards whose dictionaries or tokenizers (``dict.*.txt``, ``tokenizer.*.pt``) are not
    the first shard's, byte for byte: the same ids would mean other pieces from one epoch to the next."""
    dirs = shard_dirs(data)
    if len(dirs) < 2:
        return
    first = dirs[0]
    names = sorted(n for n in (os.listdir(first) if os.path.isdir(first) else [])
                   if fnmatch.fnmatch(n, "dict.*.txt") or fnmatch.fnmatch(n, "tokenizer.*.pt"))
    for i, shard in enumerate(dirs[1:], start=2):
        if not os.path.isdir(shard):
            raise SeqkitError(f"task.data: shard {i} ({shard}) is no folder; each of dir1:dir2:... is a folder "
                              "written by seqkit-preprocess")
        for name in names:
            if not _same_file(os.path.join(first, name), os.path.join(shard, name)):
                raise SeqkitError(f"task.data: shard {i} ({shard}) has another {name} than the first shard ({first}): "
                                  "every shard must be binarized with the same dictionaries and tokenizer "
                                  "(seqkit-preprocess shards=N writes such shards)")


def _same_file(a: str, b: str) -> bool:
    if not os.path.isfile(b) or os.path.getsize(a) != os.path.getsize(b):
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()
