"""A family's weight-name map between HuggingFace and seqkit: one list of pairs, used both ways. A
name the map does not know is an error, never silently dropped (torchtune's and fairseq2's rule)."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import torch

from seqkit.errors import SeqkitError


class KeyMap:
    def __init__(self, pairs: List[Tuple[str, str, bool]]):
        """``pairs``: (HF name, seqkit name, transposed: HF keeps the ``(in, out)`` of a Conv1D)."""
        self.pairs = pairs

    def to_seqkit(self, state: Dict[str, torch.Tensor], what: str) -> Dict[str, torch.Tensor]:
        unknown = sorted(set(state) - {hf for hf, _, _ in self.pairs})
        if unknown:
            raise SeqkitError(f"{what} weights hold {len(unknown)} tensor(s) seqkit's model has no place for: "
                              f"{', '.join(unknown[:3])}")
        missing = [hf for hf, _, _ in self.pairs if hf not in state]
        if missing:
            raise SeqkitError(f"{what} weights lack {len(missing)} tensor(s) the config implies: {', '.join(missing[:3])}")
        return {ours: (state[hf].t() if t else state[hf]).contiguous() for hf, ours, t in self.pairs}

    def to_hf(self, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        unknown = sorted(set(state) - {ours for _, ours, _ in self.pairs})
        if unknown:
            raise SeqkitError(f"the model holds {len(unknown)} tensor(s) the HuggingFace class has no place for: "
                              f"{', '.join(unknown[:3])}")
        return {hf: (state[ours].t() if t else state[ours]).contiguous() for hf, ours, t in self.pairs}


def refuse(config: Dict[str, Any], key: str, supported: Any, what: str) -> None:
    """One line naming the config field that keeps seqkit from representing the model."""
    value = config.get(key, supported)
    if value != supported:
        raise SeqkitError(f"config.json: {key}={value!r} ({what}) has no seqkit counterpart")
