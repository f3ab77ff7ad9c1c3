"""``seqkit-embed``: sentences -> vectors, and nearest-sentence queries by cosine.

    seqkit-embed path=CKPT input=sentences.txt output=vectors.npy        # one float32 row per line
    seqkit-embed path=CKPT query="a sentence ." corpus=sentences.txt k=5   # its 5 nearest lines
    seqkit-embed path=CKPT queries=queries.txt corpus=sentences.txt k=5

Every line of a file is one sentence, encoded with the checkpoint's own tokenizer and dictionary;
an empty line is refused (it would be a sentence of nothing). ``pooling`` chooses the vector:

- ``auto``: the model's own sentence vector (``sentence_vectors``: skip-thought's encoder state,
  quick-thought's ``[f(s); g(s)]``); the sentence is read as training read it, pieces then ``</s>``.
  A checkpoint whose model has none is refused, naming the two poolings that read any model.
- ``mean``: the mean of a pretraining body's contextual vectors over the sentence's positions,
  ``<s> pieces </s>`` as fine-tuning reads a sentence (GPT, the LSTM LM, BERT family, ELECTRA,
  BART/T5, a translation Transformer's decoder as denoising reads it, a fine-tuned
  ``pretrained_classifier``'s body; ELMo: the mean of its layers). Models without such vectors
  (CBOW, BiLSTM, Kim CNN classifiers, the sentence encoders here) are refused.
- ``embeddings``: the mean of the input word embeddings of the sentence's pieces (no specials),
  for any checkpoint with an input embedding table (for quick-thought: ``f``'s): the "mean of word
  embeddings" baseline.

Queries print, for query i, ``Q-i<TAB>query`` then k lines ``N-i<TAB>cosine<TAB>line<TAB>sentence``
(corpus line numbers from 1, nearest first).

Word mode (``words=``, ``analogy=``, ``analogies=``, ``export=``; one of them per run): a
checkpoint's word vectors, word2vec's above all: nearest words, analogies, accuracy on an analogy
file, export in word2vec's text format (:mod:`seqkit.analysis.word_vectors`).
"""

from __future__ import annotations

import inspect
import io
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, FrozenSet, List, Optional, Tuple

import numpy as np
import torch
from torch import nn

from seqkit.analysis.word_vectors import input_embedding, parse_analogy, run_words
from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.settings import Reads, refuse_unread

log = logging.getLogger("seqkit.embed")
POOLINGS = ("auto", "mean", "embeddings")
WORD_MODES = ("words", "analogy", "analogies", "export")  # seqkit.analysis.word_vectors


@dataclass
class EmbedConfig:
    path: str = arg("", "checkpoint (required): a skip_thought or quick_thought run's, or any other with "
                        "pooling=mean or pooling=embeddings; a word2vec run's (or any other's input word table) "
                        "for words=, analogy=, analogies= and export=")
    input: str = arg("", "text file, one sentence per line: each line's vector is written to output=")
    output: str = arg("", "with input=: the .npy file written, float32 (lines, D) in line order")
    query: str = arg("", "one query sentence: its k nearest sentences of corpus= are printed, with their cosines")
    queries: str = arg("", "text file of query sentences, one per line (instead of query=)")
    corpus: str = arg("", "with query= or queries=: the text file searched, one sentence per line")
    k: int = arg(5, "with query= or queries=: how many nearest corpus sentences each query prints; with words= "
                    "or analogy=: how many words", ge=1)
    pooling: str = arg("auto", "auto: the model's own sentence vector; mean: the mean of a pretraining body's "
                               "contextual vectors; embeddings: the mean of the input word embeddings",
                       choices=POOLINGS)
    truncate: bool = arg(False, "cut a sentence longer than the model's positions to its first pieces (keeping the "
                                "final </s>) instead of refusing it")
    batch_size: int = arg(64, "sentences encoded in one forward pass", ge=1)
    threads: int = arg(0, "CPU threads (0: torch's default)", ge=0)
    words: str = arg("", "word mode: words, space-separated, whose k nearest words are printed with their cosines")
    analogy: str = arg("", "word mode: a:b::c, a is to b as c is to ?: the k best answers (3CosAdd, as gensim's "
                           "most_similar(positive=[b, c], negative=[a]))")
    analogies: str = arg("", "word mode: a file in word2vec's questions-words.txt format (': section' lines, then "
                             "'a b c d' lines): accuracy per section, out-of-vocabulary questions counted and skipped")
    export: str = arg("", "word mode: write the word vectors to this file in word2vec's text format ('count dim', "
                          "then 'word v1 ... vd')")


# -- the settings -------------------------------------------------------------------------------------
def check_settings(cfg: EmbedConfig, given: FrozenSet[str]) -> str:
    """The mode (``vectors`` or ``query``) the settings ask for; a missing, clashing or unread
    setting is one line, before anything is read."""
    if not cfg.path:
        raise SeqkitError("path=CHECKPOINT is required (a checkpoint written by seqkit-train)")
    word = [m for m in WORD_MODES if getattr(cfg, m)]
    if word:
        return check_word_mode(cfg, given, word)
    if cfg.input and (cfg.query or cfg.queries):
        raise SeqkitError(f"input= and {'query' if cfg.query else 'queries'}= ask for two things: input=FILE "
                          "output=FILE.npy writes vectors, query=/queries= with corpus= prints neighbours; give one")
    if cfg.query and cfg.queries:
        raise SeqkitError("query= and queries= both given: one sentence (query=) or a file of them (queries=)")
    common = ("path", "pooling", "truncate", "batch_size", "threads")
    if cfg.input:
        if not cfg.output:
            raise SeqkitError(f"input={cfg.input} needs output=FILE.npy, where its vectors are written")
        why = "it belongs to a query (query= or queries= with corpus=)"
        refuse_unread(given, Reads("seqkit-embed with input=", common + ("input", "output"),
                                   (("k", why), ("corpus", why))))
        return "vectors"
    if cfg.query or cfg.queries:
        if not cfg.corpus:
            raise SeqkitError(f"{'query' if cfg.query else 'queries'}= needs corpus=FILE, the sentences searched")
        refuse_unread(given, Reads("seqkit-embed with a query", common + ("query", "queries", "corpus", "k"),
                                   (("output", "a query prints its neighbours; output= is the .npy of input="),)))
        return "query"
    raise SeqkitError("nothing to do: give input=FILE output=FILE.npy (vectors), or query=TEXT (or queries=FILE) "
                      "with corpus=FILE (nearest sentences), or words=, analogy=, analogies= or export= (word vectors)")


def check_word_mode(cfg: EmbedConfig, given: FrozenSet[str], word: List[str]) -> str:
    """The word mode ``word`` asks for (one of :data:`WORD_MODES`), its settings checked."""
    other = word[1:] + [m for m in ("input", "query", "queries") if getattr(cfg, m)]
    mode = word[0]
    if other:
        raise SeqkitError(f"{mode}= and {other[0]}= ask for two things: give one per run")
    if mode == "words" and not cfg.words.split():
        raise SeqkitError("words= is empty: give one word or several, space-separated")
    if mode == "analogy":
        parse_analogy(cfg.analogy)
    sentences = "it belongs to sentence vectors (input=, query=, queries=)"
    reads = ("path", "threads", mode) + (("k",) if mode in ("words", "analogy") else ())
    refuse_unread(given, Reads(f"seqkit-embed with {mode}=", reads, (
        ("k", "k= counts the answers of words= and analogy="), ("pooling", sentences), ("truncate", sentences),
        ("batch_size", sentences), ("corpus", sentences),
        ("output", "output= is the .npy of input=; export=FILE writes word vectors"))))
    return mode


def read_sentences(path: str, what: str) -> List[str]:
    """The lines of a UTF-8 file, each one sentence; an empty file or line is one line's error."""
    from seqkit.core.io import read_all_lines

    lines = read_all_lines(path)
    if not lines:
        raise SeqkitError(f"{what}={path} is empty: one sentence per line")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            raise SeqkitError(f"{path}:{i}: empty line; every line of {what}= is one sentence: remove it")
    return lines


# -- checkpoint -> a function from sentences to vectors -------------------------------------------------
def _tokenizer(task: Any) -> Any:
    """The task's (source) tokenizer, whatever its method's signature, or None."""
    fn = getattr(task, "tokenizer", None)
    if fn is None:
        return None
    return fn("src") if "side" in inspect.signature(fn).parameters else fn()


def _contextual(model: nn.Module) -> Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    """``(src_tokens, src_lengths) -> (B, S, C)`` contextual vectors of a pretraining body, or None."""
    if hasattr(model, "body") and hasattr(model, "features"):  # a fine-tuned pretrained_classifier
        return lambda s, n: model.features(s, n)
    if hasattr(model, "transfer_features"):
        return lambda s, n: model.transfer_features(s, n)
    return None


class SentenceEncoder:
    """A checkpoint's task and model, read as one ``pooling``: :meth:`ids` of a sentence, and
    :meth:`vectors` of a batch of them."""

    def __init__(self, task: Any, model: nn.Module, pooling: str, path: str):
        self.task, self.model, self.pooling = task, model.eval(), pooling
        self.dictionary = getattr(task, "src_dict", None) or task.dictionary
        self.pad = self.dictionary.pad()
        self.tok = _tokenizer(task)
        own = hasattr(model, "sentence_vectors")
        kind = f"{path} holds {task.describe() if hasattr(task, 'describe') else type(model).__name__}"
        if pooling == "auto" and not own:
            raise SeqkitError(f"{kind}, whose model has no sentence vectors of its own (skip_thought and quick_thought "
                              "models have): pooling=mean reads a pretraining body's contextual vectors, "
                              "pooling=embeddings any model's input word embeddings")
        self.context = _contextual(model) if pooling == "mean" else None
        if pooling == "mean" and (self.context is None or own):
            hint = "pooling=auto gives its own sentence vectors" if own else "pooling=embeddings reads any model"
            raise SeqkitError(f"pooling=mean reads a pretraining body's contextual vectors; {kind}, which has none: "
                              f"{hint}")
        self.table = None
        if pooling == "embeddings":
            name, self.table = input_embedding(model, "pooling=embeddings")
            log.info("pooling=embeddings: the mean of %s's vectors", name)
        self.limit = min(model.max_positions()) if pooling != "embeddings" else 0

    def ids(self, line: str) -> List[int]:
        if self.pooling == "auto":
            return self.task.encode_sentence(line)
        pieces = self.tok.encode(line) if self.tok is not None else line.split()
        words = self.dictionary.encode(pieces, append_eos=False)
        if self.pooling == "mean":
            return [self.dictionary.bos()] + words + [self.dictionary.eos()]
        return words

    @torch.no_grad()
    def vectors(self, batch: List[List[int]]) -> torch.Tensor:
        """Sentences' ids -> their vectors ``(B, D)`` float32."""
        from seqkit.data.pair_dataset import collate_raw
        from seqkit.models.pretrained import pool

        net = collate_raw(batch, self.pad)
        src, lengths = net["src_tokens"], net["src_lengths"]  # (B, S), (B,)
        if self.pooling == "auto":
            return self.model.sentence_vectors(src, lengths).float()
        if self.pooling == "embeddings":
            return pool(self.table(src).float(), src, lengths, "mean", self.pad)  # (B, E)
        x = self.context(src, lengths).float()
        if x.dim() == 4:  # ELMo's layers (L, B, S, C): their mean
            x = x.mean(0)
        return pool(x, src, lengths, "mean", self.pad)  # (B, C)

    def encode(self, lines: List[str], path: str, batch_size: int, truncate: bool = False) -> np.ndarray:
        """Every line's vector ``(N, D)`` float32, in line order (batches of similar lengths); a line
        longer than the model's positions is cut to them (``truncate``, its final ``</s>`` kept) or refused."""
        ids = [self.ids(line) for line in lines]
        for i, s in enumerate(ids, 1):
            if self.limit and len(s) > self.limit and truncate:
                ids[i - 1] = s[: self.limit - 1] + s[-1:]
            elif self.limit and len(s) > self.limit:
                raise SeqkitError(f"{path}:{i}: {len(s)} tokens, above the model's {self.limit} positions: shorten "
                                  "it, or set truncate=true")
            if not s:
                raise SeqkitError(f"{path}:{i}: no piece of this line is in the checkpoint's vocabulary")
        order = np.argsort([len(s) for s in ids], kind="stable")
        out: List[Optional[torch.Tensor]] = [None] * len(ids)
        for a in range(0, len(order), batch_size):
            rows = order[a : a + batch_size]
            for r, v in zip(rows, self.vectors([ids[r] for r in rows])):
                out[r] = v
        return torch.stack(out).numpy()  # type: ignore[arg-type]


# -- the two modes ----------------------------------------------------------------------------------------
def nearest(queries: np.ndarray, corpus: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """Cosines ``(Q, k)`` and corpus rows ``(Q, k)`` of each query's k nearest corpus vectors,
    nearest first (ties: the earlier row)."""
    def unit(x: np.ndarray) -> np.ndarray:
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)

    cos = unit(queries.astype(np.float64)) @ unit(corpus.astype(np.float64)).T  # (Q, N)
    rows = np.argsort(-cos, axis=1, kind="stable")[:, :k]  # (Q, k)
    return np.take_along_axis(cos, rows, axis=1), rows


def save_npy(path: str, vectors: np.ndarray) -> None:
    from seqkit.core.io import atomic_write_bytes

    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise SeqkitError(f"output={path}: no folder {folder}")
    buf = io.BytesIO()
    np.save(buf, vectors.astype(np.float32))
    atomic_write_bytes(path, buf.getvalue())


def run(cfg: EmbedConfig, given: FrozenSet[str], write: Callable[[str], Any] = print) -> Optional[np.ndarray]:
    """``seqkit-embed``: the vectors of ``input=`` (written to ``output=`` and returned), or each
    query's nearest corpus sentences (lines given to ``write``)."""
    from seqkit.core import checkpoints

    mode = check_settings(cfg, given)
    if mode in WORD_MODES:
        return run_word_mode(cfg, mode, write)
    if mode == "vectors":
        texts = {"input": read_sentences(cfg.input, "input")}
    else:
        queries = [cfg.query] if cfg.query else read_sentences(cfg.queries, "queries")
        if cfg.query and not cfg.query.strip():
            raise SeqkitError("query= is empty: give a sentence")
        texts = {"queries": queries, "corpus": read_sentences(cfg.corpus, "corpus")}
        if cfg.k > len(texts["corpus"]):
            raise SeqkitError(f"k={cfg.k} is above corpus={cfg.corpus}'s {len(texts['corpus'])} sentences: "
                              f"at most k={len(texts['corpus'])}")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    state = checkpoints.load(cfg.path)
    task, model = checkpoints.load_for_inference(cfg.path, state=state)
    encoder = SentenceEncoder(task, model, cfg.pooling, cfg.path)
    where = {"input": cfg.input, "queries": cfg.queries or "query=", "corpus": cfg.corpus}
    vecs = {name: encoder.encode(lines, where[name], cfg.batch_size, cfg.truncate) for name, lines in texts.items()}
    if mode == "vectors":
        save_npy(cfg.output, vecs["input"])
        log.info("wrote %s: %d vectors of %d dimensions (pooling=%s)", cfg.output, *vecs["input"].shape, cfg.pooling)
        return vecs["input"]
    cos, rows = nearest(vecs["queries"], vecs["corpus"], cfg.k)
    corpus = texts["corpus"]
    for i, q in enumerate(texts["queries"]):
        write(f"Q-{i}\t{q}")
        for c, r in zip(cos[i], rows[i]):
            write(f"N-{i}\t{c:.4f}\t{r + 1}\t{corpus[r]}")
    return None


def run_word_mode(cfg: EmbedConfig, mode: str, write: Callable[[str], Any]) -> None:
    """Load the checkpoint and run word mode ``mode`` (:func:`seqkit.analysis.word_vectors.run_words`)."""
    from seqkit.core import checkpoints

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    task, model = checkpoints.load_for_inference(cfg.path)
    run_words(cfg, mode, task, model.eval(), write)
    return None
