"""Word2vec (Mikolov et al., 2013): two tables, the input vectors (the C code's ``syn0``: the
word vectors a run is for) and the output vectors (``syn1neg``: what a prediction scores);
trained by :mod:`seqkit.tasks.word2vec` with the negative-sampling loss of
:mod:`seqkit.criteria.word2vec`.

Shapes: P predictions in a batch, C input words per prediction (1 for skip-gram; CBOW: 2 x window,
``<pad>`` filling), K = 1 + negative scored words, D ``embed_dim``, V vocabulary.

Initialized as the C code: input vectors uniform in ±0.5 / D, output vectors zero. With
``sparse`` (the default) a batch's gradient holds only the rows it read, each once, so an update
costs the rows touched, not V x D: ``optimizer=sparse_adam`` (the recipe's) or ``optimizer=sgd``
(the C code's update, for small batches: docs/word-vectors.md) take such gradients;
``model.sparse=false`` trains with any optimizer.

Speed: the forward and backward passes are written out (:class:`_Hidden`, :class:`_Scores`) so
that the ``(P, K, D)`` rows of the scored words are never in memory at once: on a CPU the scores
are one sampled matrix product (:func:`sampled_scores`), and a row gets its gradient from a fused
weighted bag sum (``F.embedding_bag``) over the reads sorted by word; the gradients reach the
optimizer marked coalesced (:func:`_keep_coalesced`), so nothing sorts them again.
tests/test_word2vec.py checks both against autograd through plain lookups.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from seqkit.core import rowkernels
from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary


@dataclass
class Word2VecConfig:
    name: str = arg("word2vec", "registry name")
    embed_dim: int = arg(100, "vector size D (the C code's -size, gensim's vector_size)", gt=0)
    sparse: bool = arg(True, "sparse gradients, only the rows a batch read (optimizer=sgd or sparse_adam); false: "
                             "dense (V, D) gradients, for any optimizer")
    kernel: str = arg("auto", "the scores and their gradients: native (compiled loops, seqkit.core.rowkernels: a CPU, "
                              "float32), torch (torch ops), auto (native where it can run, else torch)",
                      choices=("auto", "native", "torch"))


@MODELS.preset("word2vec_300")
def word2vec_300() -> Word2VecConfig:
    """The published GoogleNews vectors' size: 300 dimensions."""
    return dataclasses.replace(Word2VecConfig(), embed_dim=300)


@MODELS.preset("word2vec_tiny")
def word2vec_tiny() -> Word2VecConfig:
    """For tests and smoke runs: 8 dimensions."""
    return dataclasses.replace(Word2VecConfig(), embed_dim=8)


def table_grad(ids: torch.Tensor, rows: torch.Tensor, src: torch.Tensor, weights: Optional[torch.Tensor],
               shape: torch.Size, sparse: bool) -> torch.Tensor:
    """The gradient of a table of ``shape`` that was read at ``ids`` ``(N,)``: read n adds
    ``weights[n] * src[rows[n]]`` (``weights`` None: 1) to its row. Summed per distinct id by one
    fused weighted bag sum over the reads sorted by id, so no ``(N, D)`` tensor is made; sparse:
    one row per distinct id (coalesced already), else dense ``(V, D)``."""
    small = ids.to(torch.int32) if shape[0] < 2 ** 31 else ids  # int32 sorts twice as fast on a CPU
    words, order = small.sort(stable=True)
    distinct, counts = torch.unique_consecutive(words, return_counts=True)
    distinct = distinct.long()
    sums = F.embedding_bag(rows[order], src, counts.cumsum(0) - counts, mode="sum",
                           per_sample_weights=None if weights is None else weights[order])  # (U, D)
    return _as_table_grad(distinct, sums, shape, sparse)


def _as_table_grad(ids: torch.Tensor, sums: torch.Tensor, shape: torch.Size, sparse: bool) -> torch.Tensor:
    """A table's gradient from its touched rows ``(U,)`` (increasing) and their sums ``(U, D)``:
    sparse and marked coalesced, or dense ``(V, D)``."""
    if sparse:
        return torch.sparse_coo_tensor(ids[None], sums, shape, is_coalesced=True, check_invariants=False)
    return torch.zeros(shape, dtype=sums.dtype, device=sums.device).index_add_(0, ids, sums)


def _keep_coalesced(weight: torch.Tensor) -> None:
    """After backward: autograd hands a parameter its sparse gradient without the coalesced mark
    that :func:`table_grad` set, so clipping and the optimizer would sort it again; its row ids
    strictly increasing (one read each) is the mark's meaning, so it is set again then. Summed
    gradients (update_freq > 1) repeat rows: they stay unmarked and are coalesced as before."""
    g = weight.grad
    if g is None or not g.is_sparse or g.is_coalesced() or g.sparse_dim() != 1:
        return
    ids = g._indices()[0]
    if bool((ids[1:] > ids[:-1]).all()):
        weight.grad = torch.sparse_coo_tensor(g._indices(), g._values(), g.shape, is_coalesced=True,
                                              check_invariants=False)


class _Hidden(torch.autograd.Function):
    """``context`` ``(P, C)`` -> the mean of each row's non-pad input vectors ``(P, D)``; every
    read vector gets the whole gradient of its row (the C code's CBOW gives each context word the
    full error, not a 1/C share)."""

    @staticmethod
    def forward(ctx: Any, context: torch.Tensor, weight: torch.Tensor, pad: int, sparse: bool,
                native: bool) -> torch.Tensor:
        ctx.save_for_backward(context)
        ctx.pad, ctx.sparse, ctx.shape, ctx.native = pad, sparse, weight.shape, native
        if native:
            return rowkernels.mean_rows(context, weight, pad)
        h = F.embedding_bag(context, weight, mode="sum", padding_idx=pad)  # (P, D)
        if context.size(1) > 1:
            h = h / context.ne(pad).sum(dim=1, keepdim=True).clamp(min=1)
        return h

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Any, ...]:
        (context,) = ctx.saved_tensors
        if ctx.native:
            ids, sums = rowkernels.rows_grad(context, grad, ctx.shape, skip=ctx.pad)
            return None, _as_table_grad(ids, sums, ctx.shape, ctx.sparse), None, None, None
        flat = context.reshape(-1)
        read = (flat != ctx.pad).nonzero().squeeze(1)  # (N,) positions of real words
        rows = torch.div(read, context.size(1), rounding_mode="floor")  # their predictions
        return None, table_grad(flat[read], rows, grad.contiguous(), None, ctx.shape, ctx.sparse), None, None, None


def sampled_scores(h: torch.Tensor, weight: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``weight[target[p, k]] . h[p]`` ``(P, K)`` for ``h`` ``(P, D)``, ``target`` ``(P, K)``: on a
    CPU one sampled matrix product (``torch.sparse.sampled_addmm``: (h @ weight.T) computed only at
    the K scored columns of each row, as a CSR pattern), which never gathers the ``(P, K, D)`` rows;
    elsewhere (a GPU) the rows gathered a chunk at a time."""
    P, K = target.shape
    if h.device.type == "cpu" and h.dtype == weight.dtype:
        crow = torch.arange(0, P * K + 1, K, device=h.device)
        with warnings.catch_warnings():  # "sparse CSR support is in beta": the one op used is exact
            warnings.simplefilter("ignore")
            pattern = torch.sparse_csr_tensor(crow, target.reshape(-1), torch.zeros(P * K, dtype=h.dtype),
                                              (P, weight.size(0)), check_invariants=False)
            return torch.sparse.sampled_addmm(pattern, h, weight.t(), beta=0.0).values().view(P, K)
    scores = torch.empty(target.shape, dtype=h.dtype, device=h.device)
    for a in range(0, P, _Scores.CHUNK):
        b = a + _Scores.CHUNK
        scores[a:b] = (F.embedding(target[a:b], weight) * h[a:b, None]).sum(-1)  # (c, K)
    return scores


class _Scores(torch.autograd.Function):
    """``h`` ``(P, D)`` and ``target`` ``(P, K)`` -> ``out[target[p, k]] . h[p]`` ``(P, K)``
    (:func:`sampled_scores`), the ``(P, K, D)`` rows never gathered in the backward pass either
    (weighted bag sums instead)."""

    CHUNK = 512  # predictions gathered at once off the CPU

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, hrow: Optional[torch.Tensor],
                sparse: bool, native: bool) -> torch.Tensor:
        ctx.sparse, ctx.native = sparse, native and h.dtype == torch.float32  # (autocast's bf16 h: torch path)
        if ctx.native:  # the scored words grouped by row (counting sort), kept for the backward pass
            ctx.reads = rowkernels.order_by_row(target, weight.size(0), hrow)
            ctx.save_for_backward(h, weight)
            return rowkernels.scores_by_row(h, weight, ctx.reads)
        if hrow is not None:
            h = h[hrow]
        ctx.save_for_backward(h, weight, target)
        return sampled_scores(h, weight, target)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Any, ...]:
        if ctx.native:
            h, weight = ctx.saved_tensors
            grad_h, ids, sums = rowkernels.scores_backward_by_row(grad, h, weight, ctx.reads)
            return grad_h, _as_table_grad(ids, sums, weight.shape, ctx.sparse), None, None, None, None
        h, weight, target = ctx.saved_tensors
        g = grad.contiguous()  # (P, K)
        grad_h = F.embedding_bag(target, weight, mode="sum", per_sample_weights=g)  # (P, D)
        rows = torch.div(torch.arange(target.numel(), device=g.device), target.size(1), rounding_mode="floor")
        grad_w = table_grad(target.reshape(-1), rows, h, g.reshape(-1), weight.shape, ctx.sparse)
        return grad_h, grad_w, None, None, None, None


@MODELS.register("word2vec", Word2VecConfig)
class Word2VecModel(nn.Module):
    """``forward(context, target)`` -> the scores ``(P, K)`` of each prediction's scored words."""

    kind = "word2vec"

    def __init__(self, cfg: Word2VecConfig, dictionary: Dictionary):
        super().__init__()
        if cfg.kernel == "native":
            rowkernels.require("model.kernel=native")
        self.cfg = cfg
        V, D, pad = len(dictionary), cfg.embed_dim, dictionary.pad()
        self.embed = nn.Embedding(V, D, padding_idx=pad, sparse=cfg.sparse)  # input vectors: the word vectors
        self.out_embed = nn.Embedding(V, D, padding_idx=pad, sparse=cfg.sparse)  # output vectors
        with torch.no_grad():
            self.embed.weight.uniform_(-0.5 / D, 0.5 / D)
            self.embed.weight[pad].zero_()  # <pad> fills CBOW's short windows: it must add nothing
            self.out_embed.weight.zero_()
        self.update_lr: Optional[float] = None  # optimizer=pair_sgd: the update's rate, set by the trainer
        for table in (self.embed, self.out_embed):
            table.weight.sparse_grad = cfg.sparse  # what the optimizers check (seqkit.optim.optimizers)
            if cfg.sparse:
                table.weight.register_post_accumulate_grad_hook(_keep_coalesced)

    def max_positions(self) -> Tuple[int, int]:
        return (1 << 30, 1 << 30)

    def native(self) -> bool:
        """Whether this forward pass runs the compiled kernels (``model.kernel``)."""
        if self.cfg.kernel == "torch":
            return False
        fits = rowkernels.fits(self.embed.weight, self.out_embed.weight)
        if self.cfg.kernel == "native" and not fits:
            raise SeqkitError("model.kernel=native runs on a CPU in float32; this model's tables are "
                              f"{self.embed.weight.dtype} on {self.embed.weight.device.type}: use model.kernel=auto")
        return fits and rowkernels.available()

    def update_in_forward(self, lr: Optional[float]) -> None:
        """From now on (``lr`` a rate; None: no more) each forward pass also trains: per-prediction
        SGD at rate ``lr`` (``optimizer=pair_sgd``: the trainer calls this around an update)."""
        if lr is not None and (self.cfg.kernel == "torch" or not self.native()):
            raise SeqkitError("optimizer=pair_sgd runs the compiled loops (model.kernel=auto or native, float32 "
                              f"tables on a CPU); this model runs model.kernel={self.cfg.kernel} on "
                              f"{self.embed.weight.device.type}: use optimizer=sgd or sparse_adam")
        self.update_lr = lr

    def forward(self, context: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """``context`` ``(P, C)``, ``target`` ``(P, K)`` -> scores ``(P, K)``: each scored word's
        output vector . the prediction's hidden vector (the context word's input vector; CBOW: the
        mean of the non-pad ones). With :meth:`update_in_forward` set, the scores are each
        prediction's before its own update, and the tables are trained as they are read."""
        if self.update_lr is not None:
            return rowkernels.pair_sgd(context, target, self.embed.weight.data, self.out_embed.weight.data,
                                       self.update_lr, self.embed.padding_idx)
        native = self.native()
        if native and context.size(1) == 1:  # skip-gram: each distinct context word's vector read once
            words, hrow = rowkernels.unique(context[:, 0], self.embed.num_embeddings)  # (U,), (P,)
            h = F.embedding(words, self.embed.weight, sparse=self.cfg.sparse)  # (U, D): stays in cache
            return _Scores.apply(h, self.out_embed.weight, target, hrow, self.cfg.sparse, native)  # (P, K)
        h = _Hidden.apply(context, self.embed.weight, self.embed.padding_idx, self.cfg.sparse, native)  # (P, D)
        return _Scores.apply(h, self.out_embed.weight, target, None, self.cfg.sparse, native)  # (P, K)

    def word_vectors(self) -> torch.Tensor:
        """``(V, D)``: the input vectors, what the C code and gensim save."""
        return self.embed.weight.detach()
