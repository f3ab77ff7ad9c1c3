"""The vanishing gradient, measured: how much the loss at a block's last position depends on the
recurrent state k steps earlier, ``||dL_T / dh_{T-k}||``, for a recurrent language model
(``lstm_lm`` with ``model.cell`` lstm, gru or rnn).

Protocol, for one block ``(B, T + 1)`` of token ids (no padding): the model, in eval mode (no
dropout), reads ``x_1 .. x_T`` one step at a time through its own recurrent layers, keeping the
state ``h_t`` ``(L, B, H)`` (every layer's ``h``; the LSTM's cell state ``c`` is carried, not
measured) after each step; ``L_T = -log p(x_{T+1} | x_1 .. x_T)``, scored from the top layer of
``h_T``. The gradient of ``sum_b L_T^(b)`` with respect to ``h_{T-k}`` has one row per sequence,
each that sequence's own gradient (the rows never mix), and its norm is taken per sequence over
layers and units. ``k = 0`` is the state the output layer reads; ``k = T - 1`` the state after the
first token. :func:`gradient_profile` averages over every sequence of every block.

For a one-unit Elman RNN at a zero state with zero input, ``h_t = tanh(w h_{t-1})`` stays 0, the
tanh's slope is 1 and ``dL_T / dh_{T-k} = w^k dL_T / dh_T`` exactly (tests/test_elman.py).
"""

from __future__ import annotations

from typing import Dict, Iterable, List

import torch
from torch import nn

from seqkit.core.errors import SeqkitError


def recurrence(model: nn.Module) -> nn.RNNBase:
    """The model's unidirectional recurrent layers (``lstm_lm``'s ``lstm``, whatever its cell)."""
    rnn = getattr(model, "lstm", None)
    if not isinstance(rnn, nn.RNNBase) or rnn.bidirectional or not hasattr(model, "head"):
        raise SeqkitError(f"gradient distances read a recurrent language model (model=lstm_lm, any model.cell), "
                          f"not {type(model).__name__}")
    return rnn


def state_gradients(model: nn.Module, block: torch.Tensor, max_distance: int) -> torch.Tensor:
    """``(K + 1, B)``: row k holds each sequence's ``||dL_T / dh_{T-k}||`` for ``block`` ``(B, T + 1)``,
    k = 0 .. ``max_distance`` (K < T). The model is put in eval mode and back."""
    rnn = recurrence(model)
    T = block.size(1) - 1
    if not 0 <= max_distance < T:
        raise SeqkitError(f"max_distance={max_distance}: a block of {T} input tokens has states at distances 0-{T - 1}")
    was_training = model.training
    model.eval()
    try:
        x = model.embed(block[:, :T])  # (B, T, E)
        state = None
        hs: List[torch.Tensor] = []
        for t in range(T):
            _, state = rnn(x[:, t : t + 1], state)
            hs.append(state[0] if isinstance(state, tuple) else state)  # h_t (L, B, H)
        # scored from the state itself: the layer's output is another tensor, which h_T would not reach
        logp = model.head.target_log_probs(model._out(hs[-1][-1]), block[:, T])  # (B,)
        grads = torch.autograd.grad(-logp.sum(), hs[T - 1 - max_distance :])  # h_{T-K} .. h_T, each (L, B, H)
    finally:
        model.train(was_training)
    return torch.stack([g.pow(2).sum(dim=(0, 2)).sqrt() for g in reversed(grads)])  # (K + 1, B)


def gradient_profile(model: nn.Module, blocks: Iterable[torch.Tensor], max_distance: int) -> Dict[str, object]:
    """Over every sequence of ``blocks`` (each ``(B, T + 1)``): the ``mean`` and ``median`` of
    ``||dL_T / dh_{T-k}||`` for k = 0 .. ``max_distance``, and how many ``sequences``."""
    norms = torch.cat([state_gradients(model, b, max_distance) for b in blocks], dim=1).double()  # (K + 1, N)
    return {"mean": norms.mean(1).tolist(), "median": norms.median(1).values.tolist(), "sequences": norms.size(1)}
