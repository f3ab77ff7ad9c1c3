"""A family's weight-name map between HuggingFace and seqkit: one list of pairs, used both ways. A
name the map does not know is an error, never silently dropped (torchtune's and fairseq2's rule)."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple, Union

import torch

from seqkit.core.errors import SeqkitError


Names = Union[str, Tuple[str, ...]]


class KeyMap:
    def __init__(self, pairs: List[Tuple[Names, str, bool]]):
        """``pairs``: (HF name, seqkit name, transposed: HF keeps the ``(in, out)`` of a Conv1D). A
        tuple of HF names is one seqkit tensor cut along dim 0 (BERT's query, key, value -> one
        ``qkv_proj``)."""
        self.pairs = [((hf,) if isinstance(hf, str) else tuple(hf), ours, t) for hf, ours, t in pairs]

    def hf_names(self) -> List[str]:
        return [name for hf, _, _ in self.pairs for name in hf]

    def to_seqkit(self, state: Dict[str, torch.Tensor], what: str) -> Dict[str, torch.Tensor]:
        unknown = sorted(set(state) - set(self.hf_names()))
        if unknown:
            raise SeqkitError(f"{what} weights hold {len(unknown)} tensor(s) seqkit's model has no place for: "
                              f"{', '.join(unknown[:3])}")
        missing = [name for name in self.hf_names() if name not in state]
        if missing:
            raise SeqkitError(f"{what} weights lack {len(missing)} tensor(s) the config implies: {', '.join(missing[:3])}")
        out = {}
        for hf, ours, t in self.pairs:
            parts = [state[name].t() if t else state[name] for name in hf]
            out[ours] = (parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)).contiguous()
        return out

    def to_hf(self, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        unknown = sorted(set(state) - {ours for _, ours, _ in self.pairs})
        if unknown:
            raise SeqkitError(f"the model holds {len(unknown)} tensor(s) the HuggingFace class has no place for: "
                              f"{', '.join(unknown[:3])}")
        out = {}
        for hf, ours, t in self.pairs:
            for name, part in zip(hf, state[ours].chunk(len(hf), dim=0)):
                out[name] = (part.t() if t else part).contiguous()
        return out


def refuse(config: Dict[str, Any], key: str, supported: Any, what: str) -> None:
    """One line naming the config field that keeps seqkit from representing the model."""
    value = config.get(key, supported)
    if value != supported:
        raise SeqkitError(f"config.json: {key}={value!r} ({what}) has no seqkit counterpart")


# HF activation name -> seqkit's ``model.activation``: one table for every family (GPT-2's
# activation_function, BERT's hidden_act, BART's activation_function, T5's feed_forward_proj)
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "silu": "silu", "swish": "silu"}
# seqkit's activation -> the name export writes (every one is in transformers' ACT2FN)
TO_HF_ACTIVATION = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "silu": "silu"}


def activation(config: Dict[str, Any], key: str, default: str) -> str:
    """seqkit's activation for ``config[key]``, or one line naming what seqkit takes."""
    act = config.get(key, default)
    if act not in ACTIVATIONS:
        raise SeqkitError(f"config.json: {key}={act!r} has no seqkit counterpart (seqkit takes {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[act]
