"""``seqkit-embed``'s word mode: a checkpoint's word vectors, their nearest words, analogies, and
export in word2vec's text format.

    seqkit-embed path=CKPT words="king queen" k=10             # each word's 10 nearest words
    seqkit-embed path=CKPT analogy=man:king::woman k=5        # a is to b as c is to ?
    seqkit-embed path=CKPT analogies=questions-words.txt      # accuracy per section
    seqkit-embed path=CKPT export=vectors.txt                 # word2vec's text format

The vectors are a word2vec model's input vectors (``word_vectors()``), or any other checkpoint's
input word table (``embed_tokens``, ``src_embed``, ``embed``). The vocabulary is the checkpoint's
dictionary without its specials (``<pad>``, ``<s>``, ``</s>``, ``<unk>``) and without symbols never
seen in training (count 0: ``madeupword`` padding, ``<mask>``), in dictionary order (most frequent
first). A word is matched as the dictionary writes it (case-sensitive; a sentencepiece
dictionary's words are its pieces, ``▁the``).

Similarity is the cosine. An analogy ``a:b::c`` is answered as gensim's ``most_similar(positive=
[b, c], negative=[a])`` (3CosAdd): the words nearest to ``unit(b) + unit(c) - unit(a)``, the three
query words excluded, each with its cosine to that sum. ``analogies=`` reads the format of
word2vec's ``questions-words.txt`` (``: section`` lines, then ``a b c d`` lines) and scores a
question right when its best answer is d, as gensim's ``evaluate_word_analogies`` (with
``case_insensitive=False``): a question with a word outside the vocabulary is counted as
out-of-vocabulary and skipped; accuracy is over the questions answered.

Export writes word2vec's text format: a first line ``count dim``, then ``word v1 ... vd`` per word
(9 significant digits: float32 read back exactly); :func:`read_text_vectors` reads it back, and
GloVe's format (the same lines without the first).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from seqkit.core.errors import SeqkitError

log = logging.getLogger("seqkit.embed")
SPECIALS = 4  # <pad> <s> </s> <unk>: a seqkit dictionary's first symbols
EMBEDDING_NAMES = ("embed_tokens", "src_embed", "embed")  # the input word tables of seqkit's models
ANALOGY = re.compile(r"^\s*(\S+?)\s*:\s*(\S+?)\s*::\s*(\S+?)\s*(?::\s*\?\s*)?$")
CHUNK = 512  # questions scored against the vocabulary at once


class WordVectors:
    """``words`` ``(N,)`` and their vectors ``(N, D)`` float32; ``unit``: each row of norm 1."""

    def __init__(self, words: Sequence[str], vectors: np.ndarray):
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        self.vectors = np.asarray(vectors, dtype=np.float32)
        norms = np.linalg.norm(self.vectors, axis=1, keepdims=True)
        self.unit = self.vectors / np.maximum(norms, 1e-12)  # (N, D)

    def __len__(self) -> int:
        return len(self.words)

    def id(self, word: str, where: str) -> int:
        if word not in self.index:
            raise SeqkitError(f"{where}: {word!r} is not in the checkpoint's vocabulary ({len(self)} words; a word is "
                              "matched as its dictionary writes it, case included)")
        return self.index[word]

    def ranked(self, queries: np.ndarray, exclude: List[List[int]], k: int) -> Tuple[np.ndarray, np.ndarray]:
        """Cosines and word ids ``(Q, k)`` of the k words nearest to each query vector ``(Q, D)``,
        nearest first (ties: the more frequent word), ``exclude[q]`` left out."""
        q = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
        cos = q.astype(np.float32) @ self.unit.T  # (Q, N)
        for row, ids in enumerate(exclude):
            cos[row, ids] = -np.inf
        top = np.argsort(-cos, axis=1, kind="stable")[:, :k]  # (Q, k)
        return np.take_along_axis(cos, top, axis=1), top

    def nearest(self, word: str, k: int) -> List[Tuple[str, float]]:
        """The k words nearest to ``word`` (itself excluded), with their cosines."""
        i = self.id(word, "words=")
        if k > len(self) - 1:
            raise SeqkitError(f"k={k} is above the vocabulary's {len(self) - 1} other words: at most k={len(self) - 1}")
        cos, top = self.ranked(self.unit[i : i + 1], [[i]], k)
        return [(self.words[j], float(c)) for j, c in zip(top[0], cos[0])]

    def analogy_queries(self, abc: np.ndarray) -> np.ndarray:
        """``(Q, 3)`` ids of a, b, c -> the 3CosAdd queries ``unit(b) + unit(c) - unit(a)`` ``(Q, D)``."""
        return self.unit[abc[:, 1]] + self.unit[abc[:, 2]] - self.unit[abc[:, 0]]

    def analogy(self, a: str, b: str, c: str, k: int) -> List[Tuple[str, float]]:
        """``a:b::c:?``: the k best answers with their cosines (a, b and c excluded)."""
        ids = [self.id(w, "analogy=") for w in (a, b, c)]
        others = len(self) - len(set(ids))
        if k > others:
            raise SeqkitError(f"k={k} is above the vocabulary's {others} words other than the analogy's: at most "
                              f"k={others}")
        cos, top = self.ranked(self.analogy_queries(np.array([ids])), [ids], k)
        return [(self.words[j], float(s)) for j, s in zip(top[0], cos[0])]


# -- from a checkpoint ------------------------------------------------------------------------------------
def input_embedding(model: nn.Module, what: str) -> Tuple[str, nn.Module]:
    """The model's input word table (its name, the module): the first submodule named as seqkit's
    models name theirs (``embed_tokens``, ``src_embed``, ``embed``)."""
    from seqkit.models.modules.adaptive_input import AdaptiveInput

    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in EMBEDDING_NAMES and isinstance(module, (nn.Embedding, AdaptiveInput)):
            return name, module
    raise SeqkitError(f"{what}: {type(model).__name__} has no input word embedding table seqkit knows")


def from_model(task: Any, model: nn.Module, path: str) -> WordVectors:
    """The checkpoint's word vectors: ``model.word_vectors()`` (word2vec's input vectors), else its
    input word table; the vocabulary as the module docstring says."""
    if hasattr(model, "word_vectors"):
        table = model.word_vectors()
    else:
        name, module = input_embedding(model, "word vectors")
        if not isinstance(module, nn.Embedding):
            raise SeqkitError(f"{path}: its input words are read by {type(module).__name__} ({name}), not one vector "
                              "per word: there are no word vectors to read")
        table = module.weight.detach()
    dictionary = getattr(task, "src_dict", None) or task.dictionary
    ids = [i for i in range(SPECIALS, min(len(dictionary), table.size(0))) if dictionary.counts[i] > 0]
    if not ids:
        raise SeqkitError(f"{path}: its dictionary holds no word seen in training")
    vectors = table[torch.tensor(ids)].float().numpy()
    return WordVectors([dictionary[i] for i in ids], vectors)


# -- analogies ------------------------------------------------------------------------------------------------
def parse_analogy(text: str) -> Tuple[str, str, str]:
    """``a:b::c`` (or ``a:b::c:?``) -> (a, b, c)."""
    m = ANALOGY.match(text)
    if not m:
        raise SeqkitError(f"analogy={text!r}: write it a:b::c (a is to b as c is to ?), e.g. analogy=man:king::woman")
    return m.group(1), m.group(2), m.group(3)


@dataclass
class Section:
    """One ``: section`` of an analogy file: its questions ``(line, a, b, c, d)`` and the counts."""

    name: str
    questions: List[Tuple[int, str, str, str, str]] = field(default_factory=list)
    correct: int = 0
    answered: int = 0
    oov: int = 0


def read_analogies(path: str) -> List[Section]:
    """The sections of a questions-words.txt-style file; a malformed line is one line's error."""
    from seqkit.core.io import read_lines

    sections: List[Section] = []
    for n, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        if line.startswith(":"):
            name = line[1:].strip()
            if not name:
                raise SeqkitError(f"{path}:{n}: a section line needs a name (': capital-common-countries')")
            sections.append(Section(name))
            continue
        words = line.split()
        if len(words) != 4:
            raise SeqkitError(f"{path}:{n}: expected a question 'a b c d' (4 words) or a ': section' line, got "
                              f"{len(words)} word(s)")
        if not sections:
            raise SeqkitError(f"{path}:{n}: a question before the first ': section' line; start the file with one")
        sections[-1].questions.append((n, *words))
    if not any(s.questions for s in sections):
        raise SeqkitError(f"analogies={path} holds no question ('a b c d' lines under ': section' lines)")
    return sections


def evaluate_analogies(vectors: WordVectors, sections: List[Section]) -> List[Section]:
    """Score every question in the vocabulary (its best answer, a, b and c excluded, must be d);
    count the others as out-of-vocabulary. Returns ``sections`` with their counts."""
    for section in sections:
        known = [q for q in section.questions if all(w in vectors.index for w in q[1:])]
        section.oov = len(section.questions) - len(known)
        section.answered = len(known)
        for a in range(0, len(known), CHUNK):
            ids = np.array([[vectors.index[w] for w in q[1:]] for q in known[a : a + CHUNK]])  # (Q, 4)
            _, top = vectors.ranked(vectors.analogy_queries(ids[:, :3]), ids[:, :3].tolist(), 1)
            section.correct += int((top[:, 0] == ids[:, 3]).sum())
    return sections


def accuracy_lines(sections: List[Section]) -> List[str]:
    """A TSV table: a header, one row per section, then ``total``; accuracy in % of the answered."""
    def row(name: str, correct: int, answered: int, oov: int) -> str:
        acc = f"{100.0 * correct / answered:.2f}" if answered else "-"
        return f"{name}\t{correct}\t{answered}\t{acc}\t{oov}"

    out = ["section\tcorrect\tanswered\taccuracy\toov"]
    out += [row(s.name, s.correct, s.answered, s.oov) for s in sections]
    out.append(row("total", sum(s.correct for s in sections), sum(s.answered for s in sections),
                   sum(s.oov for s in sections)))
    return out


# -- the text format ----------------------------------------------------------------------------------------
def write_text_vectors(path: str, vectors: WordVectors) -> None:
    """word2vec's text format: ``count dim``, then ``word v1 ... vd`` per word."""
    from seqkit.core.io import atomic_write_text

    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise SeqkitError(f"export={path}: no folder {folder}")
    count, dim = vectors.vectors.shape
    row = " ".join(["%.9g"] * dim)
    lines = [f"{count} {dim}"] + [f"{w} " + row % tuple(v) for w, v in zip(vectors.words, vectors.vectors.tolist())]
    atomic_write_text(path, "\n".join(lines) + "\n")


def read_text_vectors(path: str) -> Tuple[List[str], np.ndarray]:
    """(words, vectors ``(N, D)`` float32) of a word2vec text file, or a GloVe one (no first line)."""
    from seqkit.core.io import read_lines

    words: List[str] = []
    rows: List[List[float]] = []
    header = None
    for n, line in enumerate(read_lines(path), 1):
        parts = line.rstrip().split(" ")
        if n == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
            header = (int(parts[0]), int(parts[1]))
            continue
        try:
            values = [float(x) for x in parts[1:]]
        except ValueError:
            raise SeqkitError(f"{path}:{n}: expected 'word v1 ... vd' with numbers after the word") from None
        if not values or (rows and len(values) != len(rows[0])) or (header and len(values) != header[1]):
            raise SeqkitError(f"{path}:{n}: {len(values)} numbers after the word, expected "
                              f"{header[1] if header else len(rows[0]) if rows else 'at least 1'}")
        words.append(parts[0])
        rows.append(values)
    if header is not None and header[0] != len(words):
        raise SeqkitError(f"{path}: the first line announces {header[0]} words, the file holds {len(words)}")
    return words, np.array(rows, dtype=np.float32)


# -- the mode ------------------------------------------------------------------------------------------------
def run_words(cfg: Any, mode: str, task: Any, model: nn.Module, write: Callable[[str], Any]) -> Dict[str, Any]:
    """``seqkit-embed``'s word modes (``words``, ``analogy``, ``analogies``, ``export``) on a loaded
    checkpoint; printed lines go to ``write``. Returns what was computed, for callers in Python."""
    vectors = from_model(task, model, cfg.path)
    if mode == "export":
        write_text_vectors(cfg.export, vectors)
        log.info("wrote %s: %d words, %d dimensions (word2vec text format)", cfg.export, *vectors.vectors.shape)
        return {"words": len(vectors)}
    if mode == "analogies":
        sections = evaluate_analogies(vectors, read_analogies(cfg.analogies))
        for line in accuracy_lines(sections):
            write(line)
        return {"sections": sections}
    if mode == "analogy":
        a, b, c = parse_analogy(cfg.analogy)
        queries = [(f"{a}:{b}::{c}:?", vectors.analogy(a, b, c, cfg.k))]
    else:
        words = cfg.words.split()
        queries = [(w, vectors.nearest(w, cfg.k)) for w in words]  # every word checked before a line is printed
    for i, (query, hits) in enumerate(queries):
        write(f"Q-{i}\t{query}")
        for word, cos in hits:
            write(f"N-{i}\t{cos:.4f}\t{word}")
    return {"queries": queries}
