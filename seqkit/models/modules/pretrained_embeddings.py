"""Pretrained word vectors into a model's word-embedding tables (fairseq's ``--encoder-embed-path``).

``model.embed_path=FILE`` (``model.encoder_embed_path`` / ``model.decoder_embed_path`` on
encoder-decoder models) fills, when a training run starts, the rows of the dictionary's words that
FILE holds; ``model.freeze_embed=true`` keeps those tables fixed during training (Kim 2014's
CNN-static; false: fine-tuned, CNN-non-static). The vectors are read once, by the trainer
(:func:`apply_word_vectors`), before anything is written: a resumed run takes its weights from
its checkpoint and never reads FILE again, and a checkpoint does not need FILE (the vectors are
its weights). Models built from a checkpoint (generation, scoring, export) never read it either.

FILE is text, gzip-compressed or not (told by its first bytes, whatever its name):

- word2vec's text format: a first line ``count dim``, then ``word v1 ... vd`` per line (what
  ``word2vec -binary 0``, gensim's ``save_word2vec_format(binary=False)`` and seqkit's word2vec
  export write);
- GloVe's: the same lines without the first one (a first line of exactly two integers is a header).

The file is streamed: only the vectors of the dictionary's words are kept, so a GloVe file of GBs
costs the dictionary's rows of memory. A word is matched exactly (no lower-casing); a word that
comes twice keeps its first vector; a line with more fields than ``dim + 1`` holds a word with spaces
(GloVe 840B has some), which no dictionary of whitespace-split words holds.

Rows FILE does not fill (the words it lacks, and the special symbols other than padding) are drawn
from U[-a, a] with ``a = sqrt(3 var)``, ``var`` the variance of the found vectors' values: Kim's
choice ("a was chosen such that the randomly initialized vectors have the same variance as the
pre-trained ones"). The model's own init is not kept for them: its scale (e.g. a Transformer's
normal with std dim**-0.5, 0.04 at 512) is unrelated to the vectors' (word2vec's values have a std
near 0.1-0.2, GloVe's near 0.4), and the two kinds of rows would sit at different scales. The
padding row stays zero. A Transformer still multiplies its embeddings by sqrt(dim) unless
``model.no_scale_embedding=true``, as fairseq does with loaded vectors.

A model offers its tables by ``word_embeddings()`` (:mod:`seqkit.models.base`): the path setting
that fills each one -> :class:`WordTable`. A path setting on a model that offers no table for it
is refused in one line, as are ``freeze_embed`` without a path, a path beside
``checkpoint.restore_file`` (whose weights would replace the vectors), and the second path of a
table two settings share (``share_all_embeddings``).
"""

from __future__ import annotations

import gzip
import logging
import math
import os
import zlib
from dataclasses import dataclass
from typing import IO, Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Set, Tuple

import torch
from torch import nn

from seqkit.core.checkpoints import epoch_checkpoints
from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError

log = logging.getLogger("seqkit.models")

PATH_KEYS = ("embed_path", "encoder_embed_path", "decoder_embed_path")
SPECIALS = 4  # seqkit's dictionaries start with <pad>, <s>, </s>, <unk>
SIDES = {"embed_path": "", "encoder_embed_path": "the encoder's ", "decoder_embed_path": "the decoder's "}


def embed_path_arg(key: str = "embed_path") -> Any:
    """The config field ``key`` (one of :data:`PATH_KEYS`), with its doc line."""
    return arg("", f"a text file of word vectors (word2vec's text format or GloVe's, gzipped or not) loaded into "
                   f"{SIDES[key] or 'the '}embedding rows of the dictionary's words when training starts (fairseq's "
                   "--encoder-embed-path); other rows drawn from U[-a, a] with the vectors' variance (Kim 2014); "
                   "empty: none")


def freeze_embed_arg() -> Any:
    """The config field ``freeze_embed``, with its doc line."""
    return arg(False, "keep the embedding tables the *embed_path settings filled fixed during training (Kim's "
                      "CNN-static; false: fine-tuned, CNN-non-static)")


class WordTable(NamedTuple):
    """A word-embedding table a path setting fills."""

    embedding: nn.Embedding  # rows = the dictionary's symbols
    width_key: str = "embed_dim"  # the config field that sets its width (named when FILE's differs)
    target: bool = False  # its rows are the target dictionary's (a decoder's), else the source's
    tied_output: bool = False  # the output layer is this matrix (frozen with it)


@dataclass
class Vectors:
    """What :func:`read_vectors` kept: the dictionary rows found and their vectors."""

    rows: List[int]  # dictionary ids, in file order
    values: torch.Tensor  # (N, D) float32, row i the vector of rows[i]
    read: int  # vectors in the file


# -- reading ---------------------------------------------------------------------------------------
def _open(path: str, key: str) -> IO[str]:
    """FILE as text lines, gunzipped when its first bytes say gzip; a binary file is refused."""
    if not os.path.isfile(path):
        raise SeqkitError(f"model.{key}={path}: no such file")
    with open(path, "rb") as f:
        head = f.read(2)
    opener: Any = gzip.open if head == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        start = f.read(8192)
    if start.startswith(b"PK\x03\x04"):
        raise SeqkitError(f"model.{key}={path} is a zip archive (a checkpoint, or GloVe's download not yet "
                          "unzipped): give a text file of vectors (unzip glove.6B.zip, then glove.6B.300d.txt)")
    if b"\x00" in start:
        raise SeqkitError(f"model.{key}={path} is binary (word2vec's .bin format?): give the vectors as text "
                          "(word2vec -binary 0, gensim's save_word2vec_format(binary=False))")
    return opener(path, "rt", encoding="utf-8", errors="replace")


def _header(first: str) -> Optional[Tuple[int, int]]:
    """``(count, dim)`` when ``first`` is word2vec's header line (exactly two integers), else None."""
    parts = first.split()
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        return int(parts[0]), int(parts[1])
    return None


def _lines(f: IO[str]) -> Iterator[Tuple[int, str]]:
    """(line number, line without its end and trailing spaces) of the non-blank lines."""
    for number, line in enumerate(f, 1):
        line = line.rstrip()
        if line:
            yield number, line


def read_vectors(path: str, indices: Dict[str, int], dim: int, key: str, width: str) -> Vectors:
    """Stream ``path``: the vectors of the words of ``indices`` (word -> dictionary id).

    ``dim`` is the table's width; ``key`` (``embed_path``...) and ``width`` (``model.embed_dim=D``'s
    key) name the settings in the one-line errors: a missing, binary or empty file, vectors of
    another width, a malformed line (its number), a header's count the file does not hold.
    """
    rows: List[int] = []
    found: List[torch.Tensor] = []
    taken: Set[int] = set()
    count, read, file_dim = None, 0, None
    where = f"model.{key}={path}"
    with _open(path, key) as f:
        try:
            for number, line in _lines(f):
                if file_dim is None:  # the first line: word2vec's header, or GloVe's first vector
                    header = _header(line)
                    count, file_dim = header if header is not None else (None, len(line.split()) - 1)
                    _check_dim(file_dim, dim, where, width)
                    if header is not None:
                        continue
                read += 1
                word, values = _split(line, file_dim, f"{where}, line {number}")
                if word in indices and indices[word] not in taken:  # a repeated word keeps its first vector
                    taken.add(indices[word])
                    rows.append(indices[word])
                    found.append(_vector(values, f"{where}, line {number}", word))
        except (OSError, EOFError, zlib.error) as e:  # a damaged gzip stream
            raise SeqkitError(f"{where} cannot be read to its end ({type(e).__name__}: {e})") from None
    if file_dim is None:
        raise SeqkitError(f"{where} is empty: no vectors in it")
    if count is not None and count != read:
        raise SeqkitError(f"{where}: its header announces {count:,} vectors, it holds {read:,} (a truncated file?)")
    return Vectors(rows, torch.stack(found) if found else torch.zeros(0, dim), read)


def _split(line: str, dim: int, where: str) -> Tuple[Optional[str], List[str]]:
    """A vector line -> (its word, its ``dim`` value strings); the word is None for a word holding
    spaces (more fields than ``dim + 1``), which no dictionary of whitespace-split words holds."""
    if line.count(" ") == dim and "\t" not in line and "  " not in line:  # single spaces: no list of fields
        word = line[:line.index(" ")]
        return word, line[len(word) + 1:].split(" ")
    parts = line.split()  # other whitespace (tabs, runs of spaces), or a word with spaces
    if len(parts) < dim + 1:
        raise SeqkitError(f"{where}: {len(parts)} fields, expected a word and {dim} numbers")
    return (parts[0] if len(parts) == dim + 1 else None), parts[-dim:]


def _vector(values: List[str], where: str, word: str) -> torch.Tensor:
    try:
        vector = torch.tensor([float(x) for x in values], dtype=torch.float32)
    except ValueError:
        raise SeqkitError(f"{where}: not a number among the {len(values)} values of {word!r}") from None
    if not bool(torch.isfinite(vector).all()):
        raise SeqkitError(f"{where}: {word!r} has a value that is not finite")
    return vector


def _check_dim(file_dim: int, dim: int, where: str, width: str) -> None:
    if file_dim != dim:
        raise SeqkitError(f"{where} holds {file_dim}-dimensional vectors, the model's embeddings are "
                          f"{dim}-dimensional: set model.{width}={file_dim} (or give {dim}-dimensional vectors)")


# -- filling a table -------------------------------------------------------------------------------
def fill_table(weight: torch.Tensor, vectors: Vectors, pad: int, generator: torch.Generator) -> float:
    """Rows ``vectors.rows`` of ``weight`` ``(V, D)`` get their vectors, the others (pad's aside,
    left zero) U[-a, a] with the vectors' variance; returns ``a``."""
    a = math.sqrt(3.0 * float(vectors.values.var(unbiased=False))) if vectors.values.numel() else 0.0
    fresh = torch.empty(weight.shape, dtype=torch.float32).uniform_(-a, a, generator=generator)
    fresh[torch.tensor(vectors.rows, dtype=torch.long)] = vectors.values
    fresh[pad] = 0.0
    with torch.no_grad():
        weight.copy_(fresh)  # to the table's device and dtype
    return a


def word_ids(symbols: Sequence[str]) -> List[int]:
    """The ids of a dictionary's words: not its specials, not its ``madeupword`` fillers."""
    return [i for i in range(SPECIALS, len(symbols)) if not symbols[i].startswith("madeupword")]


def load_into(table: WordTable, path: str, dictionary: Any, key: str, generator: torch.Generator) -> str:
    """Fill ``table`` from ``path`` in ``dictionary``'s ids; the log line "N of V words found (x%)"."""
    symbols = dictionary.symbols
    indices = {s: i for i, s in enumerate(symbols) if i != dictionary.pad()}
    weight = table.embedding.weight
    vectors = read_vectors(path, indices, weight.size(1), key, table.width_key)
    words = word_ids(symbols)
    word_set = set(words)
    n = sum(1 for r in vectors.rows if r in word_set)
    if not vectors.rows:
        raise SeqkitError(f"model.{key}={path}: none of its {vectors.read:,} words is in the dictionary "
                          f"({len(words):,} words): vectors of another language or tokenization?")
    a = fill_table(weight, vectors, dictionary.pad(), generator)
    others = len(symbols) - 1 - len(vectors.rows)
    return (f"model.{key}: {n:,} of {len(words):,} words found in {path} ({100.0 * n / max(1, len(words)):.1f}%; "
            f"{vectors.read:,} vectors of {weight.size(1)} read); the other {others:,} rows (padding's aside) "
            f"drawn from U[-{a:.4g}, {a:.4g}], the found vectors' variance (Kim 2014)")


# -- the trainer's hook ----------------------------------------------------------------------------
def resumes(checkpoint_cfg: Any) -> bool:
    """Whether a run with these ``checkpoint.*`` settings resumes from a checkpoint of its save_dir
    (the trainer's ``maybe_resume``: checkpoint_last or an epoch checkpoint, unless ``reset``)."""
    if checkpoint_cfg.reset:
        return False
    save_dir = checkpoint_cfg.save_dir
    return os.path.isfile(os.path.join(save_dir, "checkpoint_last.pt")) or bool(epoch_checkpoints(save_dir))


def _tables(model: nn.Module, model_cfg: Any, paths: Dict[str, str]) -> Dict[str, WordTable]:
    """The tables of the given path settings; one line for a setting no table answers."""
    offered: Dict[str, WordTable] = model.word_embeddings() if hasattr(model, "word_embeddings") else {}
    first: Dict[int, str] = {}  # id(module) -> the first setting offering it
    for key, table in offered.items():
        owner = first.setdefault(id(table.embedding), key)
        if owner != key and key in paths:
            raise SeqkitError(f"model.{key}: {SIDES[key]}embeddings are {SIDES[owner]}(one shared table, "
                              f"share_all_embeddings): give model.{owner} only; drop model.{key}")
    for key in paths:
        if key not in offered:
            has = ", ".join(f"model.{k}" for k in offered) or "none"
            raise SeqkitError(f"model.{key}: model {model_cfg.name} has no word-embedding table it fills (its "
                              f"path settings: {has}); drop it")
    return {k: offered[k] for k in paths}


def apply_word_vectors(model: nn.Module, model_cfg: Any, task: Any, checkpoint_cfg: Any, seed: int) -> None:
    """The trainer's hook, right after the task builds ``model``: refuse what would be ignored, fill
    the tables of the path settings on a fresh start (not on a resume), freeze them when asked."""
    paths = {k: getattr(model_cfg, k) for k in PATH_KEYS if getattr(model_cfg, k, "")}
    freeze = bool(getattr(model_cfg, "freeze_embed", False))
    if not paths and not freeze:
        return
    if freeze and not paths:
        keys = " or ".join(f"model.{k}" for k in PATH_KEYS if hasattr(model_cfg, k))
        raise SeqkitError(f"model.freeze_embed=true: it freezes the vectors {keys} loads, and none is given; "
                          "give a file of vectors, or drop freeze_embed")
    tables = _tables(model, model_cfg, paths)
    if not resumes(checkpoint_cfg):
        if checkpoint_cfg.restore_file:
            key = next(iter(paths))
            raise SeqkitError(f"model.{key}: checkpoint.restore_file={checkpoint_cfg.restore_file}'s weights would "
                              "replace the vectors; drop one of the two")
        generator = torch.Generator().manual_seed(seed)
        for key, table in tables.items():
            dictionary = task.tgt_dict if table.target else task.src_dict
            log.info("%s", load_into(table, paths[key], dictionary, key, generator))
    else:
        log.info("%s: not read (a resumed run: the vectors are in the checkpoint's weights)",
                 ", ".join(f"model.{k}" for k in paths))
    for key, table in tables.items() if freeze else ():
        table.embedding.weight.requires_grad_(False)
        tied = "; the output layer is the same matrix (tied): fixed too" if table.tied_output else ""
        log.info("model.freeze_embed: %s's table (%s) fixed during training%s", f"model.{key}",
                 " x ".join(map(str, table.embedding.weight.shape)), tied)
