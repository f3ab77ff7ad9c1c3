"""Looking inside a recurrent unit (Karpathy, Johnson & Fei-Fei, 2015): the activation of each
hidden unit of a character-level LSTM language model over a passage, and a search for the units
that track a property of the text by their correlation with it.

``seqkit-plot activations path=CK text_file=PASSAGE`` reads the passage as the model reads its
training stream (each line's characters, then ``</s>``), records one layer's cell state ``c`` (or
its output ``h``) after every character, correlates every unit with each property below, logs the
best units, and draws the passage coloured by one unit (the one given, or the best for ``property``).

Properties, one value per character:
    quotes         1 inside double quotes (after an opening ``"``, up to its closing one)
    brackets       1 inside round, square or curly brackets (any depth)
    line_position  characters since the line started (the LM's lines: since the last ``</s>``)
    word_position  characters since the last space
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
import torch
from torch import nn

from seqkit.core.errors import SeqkitError

PROPERTIES = ("quotes", "brackets", "line_position", "word_position")


def read_passage(path: str, max_chars: int) -> List[str]:
    """The lines of ``path`` as the character tokenizer reads them (stripped), up to ``max_chars``
    characters with one per line end; a passage with no character to read is an error."""
    from seqkit.core.io import read_lines

    lines: List[str] = []
    total = 0
    for line in read_lines(path):
        if total >= max_chars:
            break
        line = line.strip()[: max_chars - total]
        lines.append(line)
        total += len(line) + 1
    if not any(lines):
        raise SeqkitError(f"{path} has no text ({'only blank lines' if lines else 'an empty file'}): give a passage of "
                          "a few lines for the model to read")
    return lines


def property_signals(lines: List[str]) -> Dict[str, np.ndarray]:
    """Each property's value at every character of ``lines``, ``</s>`` after each line (as a newline)."""
    out: Dict[str, List[float]] = {p: [] for p in PROPERTIES}
    in_quote, depth = False, 0
    for line in lines:
        column = word = 0
        for ch in line + "\n":
            if ch == '"':
                in_quote = not in_quote
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth = max(depth - 1, 0)
            out["quotes"].append(float(in_quote and ch != '"'))
            out["brackets"].append(float(depth > 0 and ch not in "([{"))
            out["line_position"].append(float(column))
            out["word_position"].append(float(word))
            column += 1
            word = 0 if ch.isspace() else word + 1
    return {p: np.asarray(v) for p, v in out.items()}


def _lstm(model: nn.Module) -> nn.LSTM:
    lstm = getattr(model, "lstm", None)
    if isinstance(lstm, (nn.GRU, nn.RNN)):  # lstm_lm with model.cell=gru or rnn: h alone, no cell state
        raise SeqkitError(f"unit activations read an LSTM's layers; this language model has model.cell="
                          f"{model.cfg.cell}: give a checkpoint trained with model.cell=lstm")
    if not isinstance(lstm, nn.LSTM) or lstm.bidirectional:
        raise SeqkitError(f"unit activations read an LSTM language model (model=lstm_lm), not {type(model).__name__}")
    return lstm


@torch.no_grad()
def unit_activations(model: nn.Module, ids: torch.Tensor, layer: int, state: str) -> torch.Tensor:
    """``(T, H)``: layer ``layer``'s cell state (``state="cell"``) or output (``"hidden"``) after
    each of the ``ids`` ``(T,)`` the LSTM language model reads."""
    lstm = _lstm(model)
    if not 0 <= layer < lstm.num_layers:
        raise SeqkitError(f"layer={layer}: this LSTM has layers 0-{lstm.num_layers - 1}")
    from seqkit.analysis.probe import _lstm_layers

    x = model.embed(ids[None])  # (1, T, E)
    inputs = _lstm_layers(lstm, x)[layer]  # what the layer reads: the embeddings or the layer below's output
    cell = nn.LSTMCell(inputs.size(-1), lstm.hidden_size)
    for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        getattr(cell, kind).data = getattr(lstm, f"{kind}_l{layer}").data
    h = c = torch.zeros(1, lstm.hidden_size)
    out = []
    for t in range(inputs.size(1)):
        h, c = cell(inputs[:, t], (h, c))
        out.append(c[0] if state == "cell" else h[0])
    return torch.stack(out)  # (T, H)


def correlations(acts: np.ndarray, signal: np.ndarray) -> np.ndarray:
    """Pearson correlation of each unit ``acts`` ``(T, H)`` with ``signal`` ``(T,)`` -> ``(H,)`` (0 for a constant)."""
    a = acts - acts.mean(0)
    s = signal - signal.mean()
    denom = np.sqrt((a * a).sum(0) * (s * s).sum())
    return np.divide((a * s[:, None]).sum(0), denom, out=np.zeros(acts.shape[1]), where=denom > 0)


def search(acts: np.ndarray, signals: Dict[str, np.ndarray], top: int = 5) -> Dict[str, List[Tuple[int, float]]]:
    """The ``top`` units (index, correlation) of each property, by absolute correlation."""
    out = {}
    for name, signal in signals.items():
        r = correlations(acts, signal)
        best = np.argsort(-np.abs(r))[:top]
        out[name] = [(int(u), round(float(r[u]), 3)) for u in best]
    return out
