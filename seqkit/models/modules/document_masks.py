"""Document masks of packed rows (``dataset.pack``, :mod:`seqkit.data.packing`).

A packed row holds several sentences; ``segments`` ``(B, L)`` gives each token's sentence index in
its row (-1 at padding). A query attends only to keys of its own sentence (and, causal, not after
itself); cross-attention pairs the k-th target sentence with the k-th source sentence of the row.
A padding query attends to key 0 alone, so no row of scores is empty (kernels and torch versions
differ on an empty row, NaN in some); padding keys are read by no real query, and padding outputs
by no loss.

Two forms, the same mask: on CUDA a FlexAttention ``BlockMask`` (``create_block_mask`` from a
mask_mod over the segment ids: blocks of 128 x 128 that no sentence spans are skipped), elsewhere a
dense boolean ``(B, 1, Lq, Lk)`` for ``scaled_dot_product_attention``. FlexAttention takes no
attention dropout, so with dropout the dense form is used on CUDA too. ``force`` picks one (tests).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

import torch

try:  # torch >= 2.5
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention
except ImportError:  # pragma: no cover - older torch: the dense form everywhere
    BlockMask = create_block_mask = flex_attention = None  # type: ignore[assignment,misc]

IMPLS = ("auto", "flex", "dense")
_forced: Optional[str] = None
_compiled_flex: Any = None


@contextlib.contextmanager
def force(impl: str) -> Iterator[None]:
    """Within the block, document masks take the form ``impl`` (``flex`` or ``dense``) on every
    device; ``auto``: FlexAttention on CUDA without attention dropout, dense elsewhere."""
    global _forced
    if impl not in IMPLS:
        raise ValueError(f"document mask form {impl!r}: one of {', '.join(IMPLS)}")
    before, _forced = _forced, (None if impl == "auto" else impl)
    try:
        yield
    finally:
        _forced = before


def use_flex(device: torch.device, dropout: float) -> bool:
    """Whether document masks on ``device`` are FlexAttention block masks."""
    if _forced is not None:
        return _forced == "flex"
    return flex_attention is not None and device.type == "cuda" and dropout == 0.0


def document_mask(q_segments: torch.Tensor, k_segments: torch.Tensor, causal: bool, flex: bool) -> Any:
    """The mask of queries ``(B, Lq)`` over keys ``(B, Lk)`` (segment ids, -1 at padding): a
    ``BlockMask`` when ``flex``, else boolean ``(B, 1, Lq, Lk)``, True = attend."""
    B, Lq = q_segments.shape
    Lk = k_segments.size(1)
    if flex:
        def mask_mod(b: Any, h: Any, q: Any, k: Any) -> Any:
            qs, ks = q_segments[b, q], k_segments[b, k]
            same = (qs == ks) & (qs >= 0)
            if causal:
                same = same & (k <= q)
            return same | ((qs < 0) & (k == 0))

        return create_block_mask(mask_mod, B, None, Lq, Lk, device=q_segments.device)
    qs, ks = q_segments[:, :, None], k_segments[:, None, :]  # (B, Lq, 1), (B, 1, Lk)
    same = qs.eq(ks) & qs.ge(0)  # (B, Lq, Lk)
    if causal:
        same = same & torch.ones(Lq, Lk, dtype=torch.bool, device=qs.device).tril()
    first = torch.arange(Lk, device=qs.device).eq(0)  # (Lk,)
    return (same | (qs.lt(0) & first))[:, None]  # (B, 1, Lq, Lk)


def is_block_mask(mask: Any) -> bool:
    return BlockMask is not None and isinstance(mask, BlockMask)


def flex_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_mask: Any, scale: Optional[float]) -> torch.Tensor:
    """FlexAttention of ``q`` ``(B, H, T, D)`` over ``k``, ``v`` ``(B, H, S, D)`` -> ``(B, H, T, D)``.

    On CUDA outside ``torch.compile`` through a compiled flex_attention (eager FlexAttention is a
    reference implementation that builds the whole score matrix); inside a compiled model the
    model's own graph holds it."""
    fn = flex_attention
    if q.is_cuda and not torch.compiler.is_compiling():
        global _compiled_flex
        if _compiled_flex is None:
            _compiled_flex = torch.compile(flex_attention, dynamic=False)
        fn = _compiled_flex
    if not q.is_cuda:  # inductor's CPU template takes no views of the fused projections (torch 2.13)
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    return fn(q, k, v, block_mask=block_mask, scale=scale)

