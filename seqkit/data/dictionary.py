"""Token <-> id mapping with counts, saved as fairseq-style ``token count`` text lines."""

from __future__ import annotations

from collections import Counter
from typing import Dict, Iterable, List, Sequence

from seqkit.core.errors import SeqkitError

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"


class Dictionary:
    """Symbols with fixed specials: pad=0, bos=1, eos=2, unk=3."""

    def __init__(self, symbols: Sequence[str] = (), counts: Sequence[int] | None = None):
        self.symbols: List[str] = [PAD, BOS, EOS, UNK]
        self.counts: List[int] = [0, 0, 0, 0]
        self.indices: Dict[str, int] = {s: i for i, s in enumerate(self.symbols)}
        for i, sym in enumerate(symbols):
            self.add(sym, counts[i] if counts is not None else 0)

    pad_index, bos_index, eos_index, unk_index = 0, 1, 2, 3

    def pad(self) -> int:
        return self.pad_index

    def bos(self) -> int:
        return self.bos_index

    def eos(self) -> int:
        return self.eos_index

    def unk(self) -> int:
        return self.unk_index

    def __len__(self) -> int:
        return len(self.symbols)

    def is_prefix_of(self, other: "Dictionary") -> bool:
        """Whether this dictionary's symbols are ``other``'s first ones, in order: data binarized
        with ``vocab_from=`` a checkpoint whose dictionary grew after (a masked LM's ``<mask>``)."""
        return len(self) <= len(other) and self.symbols == other.symbols[: len(self)]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Dictionary) and self.symbols == other.symbols

    def __getitem__(self, idx: int) -> str:
        return self.symbols[idx]

    def index(self, sym: str) -> int:
        return self.indices.get(sym, self.unk_index)

    def add(self, sym: str, count: int = 1) -> int:
        if sym in self.indices:
            idx = self.indices[sym]
            self.counts[idx] += count
            return idx
        idx = len(self.symbols)
        self.symbols.append(sym)
        self.counts.append(count)
        self.indices[sym] = idx
        return idx

    @classmethod
    def build(cls, counter: Counter, threshold: int = 1, nwords: int = -1, pad_to_multiple: int = 8) -> "Dictionary":
        """Most frequent first (ties by symbol), dropping symbols seen fewer than ``threshold`` times.

        The size is padded to a multiple of ``pad_to_multiple`` with never-used ``madeupwordNNNN``
        symbols, which keeps the output projection's matmul aligned (as fairseq does).
        """
        specials = {PAD, BOS, EOS, UNK}
        items = sorted(((s, c) for s, c in counter.items() if s not in specials), key=lambda x: (-x[1], x[0]))
        items = [(s, c) for s, c in items if c >= threshold]
        if nwords > 0:
            items = items[: max(0, nwords - 4)]
        d = cls([s for s, _ in items], [c for _, c in items])
        i = 0
        while pad_to_multiple > 1 and len(d) % pad_to_multiple:
            d.add(f"madeupword{i:04d}", 0)
            i += 1
        return d

    def encode(self, tokens: Iterable[str], append_eos: bool = True) -> List[int]:
        ids = [self.indices.get(t, self.unk_index) for t in tokens]
        if append_eos:
            ids.append(self.eos_index)
        return ids

    def string(self, ids: Iterable[int], strip_specials: bool = True) -> List[str]:
        """Tokens of ``ids``; stops at the first eos and drops pad/bos when ``strip_specials``."""
        if hasattr(ids, "tolist"):  # a tensor or an array
            ids = ids.tolist()
        out = []
        for i in ids:
            if strip_specials:
                if i == self.eos_index:
                    break
                if i in (self.pad_index, self.bos_index):
                    continue
            out.append(self.symbols[i])
        return out

    def save(self, path: str) -> None:
        from seqkit.core.io import atomic_write_text

        atomic_write_text(path, "".join(f"{s} {c}\n" for s, c in zip(self.symbols[4:], self.counts[4:])))

    @classmethod
    def load(cls, path: str) -> "Dictionary":
        from seqkit.core.io import read_lines

        symbols, counts = [], []
        for lineno, line in enumerate(read_lines(path), 1):
            sym, _, count = line.rpartition(" ")
            if not sym or not count.lstrip("-").isdigit():
                raise SeqkitError(f"{path}:{lineno}: bad dictionary line (expected 'token count')")
            symbols.append(sym)
            counts.append(int(count))
        return cls(symbols, counts)

    def state_dict(self) -> Dict[str, list]:
        return {"symbols": list(self.symbols[4:]), "counts": list(self.counts[4:])}

    @classmethod
    def from_state_dict(cls, state: Dict[str, list]) -> "Dictionary":
        return cls(state["symbols"], state["counts"])
