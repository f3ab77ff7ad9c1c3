"""WordPiece, learned and applied in pure Python.

Words are whitespace-separated (punctuation glued to a word stays in it, as ``##`` pieces), so
text round-trips exactly up to whitespace. Learning starts from characters (``a`` word-initial,
``##a`` inside a word) and repeatedly merges the adjacent pair with the highest score until
``vocab_size`` pieces exist: its frequency ``count(ab)`` (default; what HuggingFace's WordPiece
trainer does) or the likelihood score ``count(ab) / (count(a) * count(b))`` of Google's WordPiece.
Encoding is greedy longest-match-first per word; a word that cannot be covered becomes ``<unk>``.

Why our own and not the ``tokenizers`` trainer (issue 28 asked to measure; ``benchmarks/wordpiece.py``,
``benchmarks/results/2026-11-25_wordpiece.json``, WikiText-2, 8,000 pieces, 5 runs each): with
frequency merges this learner reaches the same pieces per validation word (1.187 against 1.189) and
learns the same vocabulary on every run, where the ``tokenizers`` trainer learned a different one in
runs of the same command (its ties fall in hash order); it is slower (3.7 s against 0.9 s), seconds
that do not matter beside a training run.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Sequence, Set, Tuple

from seqkit.core.config import arg, to_plain
from seqkit.core.io import read_lines
from seqkit.core.registry import TOKENIZERS
from seqkit.tokenizers.base import Tokenizer

UNK = "<unk>"  # the Dictionary's unknown symbol: it maps this piece to unk
CONT = "##"  # marks a piece that continues a word


@dataclass
class WordPieceConfig:
    name: str = arg("wordpiece", "registry name")
    vocab_size: int = arg(8000, "pieces to learn (every training character is kept even beyond it)", gt=0)
    min_frequency: int = arg(2, "a pair is merged only if seen at least this often", ge=1)
    max_input_chars_per_word: int = arg(100, "longer words become <unk>", ge=1)
    score: str = arg("frequency", "which pair merges next: likelihood (count(ab) / (count(a) count(b)), Google's "
                                   "WordPiece) or frequency (count(ab): HuggingFace's WordPiece trainer, BPE's rule; "
                                   "1.19 pieces per WikiText-2 word at 8,000 pieces against likelihood's 3.27, "
                                   "benchmarks/wordpiece.py)", choices=("likelihood", "frequency"))
    input_sentence_size: int = arg(1_000_000, "seqkit-preprocess learns from a seeded sample of this many training "
                                              "pairs (line numbers, in file order); 0 or a corpus no larger = every "
                                              "line. As sentencepiece's: word counts settle long before millions of "
                                              "lines", ge=0)
    seed: int = arg(1, "random seed of the sample above")


def _merged(a: str, b: str) -> str:
    return a + b[len(CONT):]  # b is always a continuation piece


def _bad_merge(a: str, b: str) -> bool:
    # A word-initial piece must not start with "##" (a word "##x" would decode ambiguously).
    return not a.startswith(CONT) and _merged(a, b).startswith(CONT)


def learn_wordpiece(word_counts: Dict[str, int], vocab_size: int, min_frequency: int = 2,
                    score_by: str = "frequency") -> List[str]:
    """Vocabulary (alphabet first, then merges in order) from word -> count. ``score_by``:
    likelihood (``count(ab) / (count(a) count(b))``, Google's WordPiece) or frequency
    (``count(ab)``, what HuggingFace's WordPiece trainer does: BPE's rule); ties go to the lowest
    symbol ids, so the result is the same on every run.

    Works on distinct words; after each merge only the words holding the merged pair are
    re-scanned, and scores go through a heap with lazy invalidation (a popped entry whose score
    is stale is re-pushed with its current score).
    """
    vocab: List[str] = []
    ids: Dict[str, int] = {}

    def sym(s: str) -> int:
        if s not in ids:
            ids[s] = len(vocab)
            vocab.append(s)
        return ids[s]

    items = sorted(word_counts.items())
    alphabet = sorted({w[0] for w, _ in items if w} | {CONT + c for w, _ in items for c in w[1:]})
    for s in alphabet:
        sym(s)
    words: List[List[int]] = [[ids[w[0]]] + [ids[CONT + c] for c in w[1:]] for w, _ in items]
    freqs = [c for _, c in items]

    sym_count: List[int] = [0] * len(vocab)
    pair_count: Dict[Tuple[int, int], int] = defaultdict(int)
    where: Dict[Tuple[int, int], Set[int]] = defaultdict(set)  # pair -> indices of words holding it
    by_sym: Dict[int, Set[Tuple[int, int]]] = defaultdict(set)  # symbol -> live pairs holding it
    for wi, (w, f) in enumerate(zip(words, freqs)):
        for s in w:
            sym_count[s] += f
        for p in zip(w, w[1:]):
            pair_count[p] += f
            where[p].add(wi)
            by_sym[p[0]].add(p)
            by_sym[p[1]].add(p)

    def score(p: Tuple[int, int]) -> float:
        if score_by == "frequency":
            return float(pair_count[p])
        return pair_count[p] / (sym_count[p[0]] * sym_count[p[1]])

    heap = [(-score(p), p) for p, c in pair_count.items() if c >= min_frequency]
    heapq.heapify(heap)
    while len(vocab) < vocab_size and heap:
        neg, p = heapq.heappop(heap)
        c = pair_count.get(p, 0)
        if c < min_frequency:
            continue
        s = score(p)
        if s != -neg:  # stale entry: requeue with the current score
            heapq.heappush(heap, (-s, p))
            continue
        a, b = p
        if _bad_merge(vocab[a], vocab[b]):
            continue
        new = sym(_merged(vocab[a], vocab[b]))
        if new == len(sym_count):
            sym_count.append(0)
        changed: Set[Tuple[int, int]] = set()
        for wi in where.pop(p):
            w, f = words[wi], freqs[wi]
            old_pairs = list(zip(w, w[1:]))
            out: List[int] = []
            i = 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(new)
                    sym_count[a] -= f
                    sym_count[b] -= f
                    sym_count[new] += f
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_pairs = list(zip(out, out[1:]))
            for q in old_pairs:
                pair_count[q] -= f
            for q in new_pairs:
                pair_count[q] += f
            for q in set(old_pairs) - set(new_pairs):
                if q != p:
                    where[q].discard(wi)
            for q in new_pairs:
                where[q].add(wi)
            changed.update(old_pairs)
            changed.update(new_pairs)
            words[wi] = out
        for q in changed:
            if pair_count[q] <= 0:
                del pair_count[q]
                where.pop(q, None)
                by_sym[q[0]].discard(q)
                by_sym[q[1]].discard(q)
            else:
                by_sym[q[0]].add(q)
                by_sym[q[1]].add(q)
                if pair_count[q] >= min_frequency:
                    heapq.heappush(heap, (-score(q), q))
        # count(a) and count(b) fell, so every other pair holding them scores higher now (likelihood)
        for q in by_sym[a] | by_sym[b] if score_by == "likelihood" else ():
            if q not in changed and pair_count[q] >= min_frequency:
                heapq.heappush(heap, (-score(q), q))
    return vocab


def wordpiece_split(word: str, vocab: Set[str], max_len: int, max_chars: int = 100) -> List[str]:
    """Greedy longest-match-first pieces of one word; ``[<unk>]`` if it cannot be covered."""
    n = len(word)
    if n > max_chars:
        return [UNK]
    pieces: List[str] = []
    start = 0
    while start < n:
        # a word-initial piece never starts with "##", so "##x..." must begin with "#" alone
        end = min(n, start + max_len, 1 if start == 0 and word.startswith(CONT) else n)
        while end > start:
            piece = word[start:end] if start == 0 else CONT + word[start:end]
            if piece in vocab:
                break
            end -= 1
        if end == start:
            return [UNK]
        pieces.append(piece)
        start = end
    return pieces


@TOKENIZERS.register("wordpiece", WordPieceConfig)
class WordPieceTokenizer(Tokenizer):
    """Greedy longest-match WordPiece over whitespace-separated words."""

    def __init__(self, cfg: Any):
        super().__init__(cfg)
        self.vocab: List[str] = []
        self._set: Set[str] = set()
        self._max_len = 0
        self._cache: Dict[str, List[str]] = {}

    def set_vocab(self, vocab: Iterable[str]) -> None:
        self.vocab = list(vocab)
        self._set = set(self.vocab)
        # longest piece in characters, not counting the "##" marker
        self._max_len = max((len(v) - (len(CONT) if v.startswith(CONT) else 0) for v in self.vocab), default=0)
        self._cache = {}

    def train(self, files: Sequence[str], work_dir: str) -> None:
        counts: Counter = Counter()
        for path in files:
            for line in read_lines(path):
                counts.update(line.split())
        counts = Counter({w: c for w, c in counts.items() if len(w) <= self.cfg.max_input_chars_per_word})
        self.set_vocab(learn_wordpiece(counts, self.cfg.vocab_size, self.cfg.min_frequency, self.cfg.score))

    def encode(self, line: str) -> List[str]:
        out: List[str] = []
        for word in line.split():
            pieces = self._cache.get(word)
            if pieces is None:
                pieces = wordpiece_split(word, self._set, self._max_len, self.cfg.max_input_chars_per_word)
                if len(self._cache) >= 200_000:  # bound memory on huge corpora
                    self._cache.clear()
                self._cache[word] = pieces
            out.extend(pieces)
        return out

    def decode(self, pieces: Sequence[str]) -> str:
        words: List[str] = []
        for p in pieces:
            if p.startswith(CONT):
                if words:
                    words[-1] += p[len(CONT):]
                else:
                    words.append(p[len(CONT):])
            else:
                words.append(p)
        return " ".join(words)

    def vocab_pieces(self) -> List[str]:
        """Every piece ``encode`` can emit besides ``<unk>``."""
        return list(self.vocab)

    def state_dict(self) -> Dict[str, Any]:
        return {"config": to_plain(self.cfg), "vocab": list(self.vocab)}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.set_vocab(state["vocab"])
