"""Which CUDA kernels run ``F.scaled_dot_product_attention`` (``common.attention_kernels``), and
the padding and prefix-LM masks handed to it.

On an H100 with torch 2.11, bf16/fp16 attention goes to cuDNN first, and cuDNN builds an execution
plan for every new (batch, length) shape, hundreds of milliseconds each. Token-budget batches give
almost every update a new shape, and incremental decoding gives every step one: with cuDNN's
attention off, training ran 3-5x faster and bf16 generation stopped being 10x slower than fp32.
So "auto" is flash, then efficient (memory-efficient, which takes masks), then math, cuDNN off.

The flags are torch's process-wide settings, and CPU attention reads two of them: its fused
kernel is "flash" (with it off, a CPU attention of (8, 8, 256, 64) took 117 ms against 23), its
fallback "math". So on a CPU device nothing is set: the CPU keeps torch's kernels whatever the
setting says (in a CUDA process, CPU attention follows the CUDA choice).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from seqkit.core.errors import SeqkitError

# name -> (torch.backends.cuda switch, torch.nn.attention.SDPBackend member)
KERNELS = {
    "flash": ("enable_flash_sdp", "FLASH_ATTENTION"),
    "efficient": ("enable_mem_efficient_sdp", "EFFICIENT_ATTENTION"),
    "cudnn": ("enable_cudnn_sdp", "CUDNN_ATTENTION"),
    "math": ("enable_math_sdp", "MATH"),
}
AUTO = ("flash", "efficient", "math")
SETTING = "common.attention_kernels"


def parse_attention_kernels(setting: str) -> Optional[Tuple[str, ...]]:
    """``"auto"`` -> :data:`AUTO`; ``"torch"`` -> None (torch's own choice, nothing set); a comma
    list such as ``"efficient,math"`` -> its names in priority order. Anything else is a one-line
    :class:`SeqkitError` naming the valid values."""
    valid = f"auto, torch, or a comma list of {', '.join(KERNELS)} in priority order"
    text = str(setting).strip()
    if text == "auto":
        return AUTO
    if text == "torch":
        return None
    names = tuple(part.strip() for part in text.split(","))
    for name in names:
        if name not in KERNELS:
            what = "an empty entry" if not name else f"{name!r} is not a kernel"
            raise SeqkitError(f"{SETTING}={setting!r}: {what}; use {valid}")
    if len(set(names)) < len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise SeqkitError(f"{SETTING}={setting!r} names {twice} twice; use {valid}")
    return names


def use_attention_kernels(setting: str, device: torch.device) -> str:
    """Enable exactly the kernels ``setting`` lists (:func:`parse_attention_kernels`), in its order
    where this torch can set one (``torch._C._set_sdp_priority_order``, torch >= 2.5), when
    ``device`` is CUDA; elsewhere change nothing. The setting is checked on every device. Returns
    one line for the log."""
    names = parse_attention_kernels(setting)
    if device.type != "cuda":
        return f"attention kernels: torch's {device.type} kernels ({SETTING} applies to CUDA)"
    if names is None:
        return f"attention kernels: torch's choice ({SETTING}=torch)"
    switches = torch.backends.cuda
    for name, (switch, _) in KERNELS.items():
        if hasattr(switches, switch):  # enable_cudnn_sdp: torch >= 2.3
            getattr(switches, switch)(name in names)
    off = [n for n in KERNELS if n not in names]
    order = " > ".join(names) + (f"; {', '.join(off)} off" if off else "")
    if not _set_priority(names):
        order += " (this torch keeps its own order among them)"
    return f"attention kernels: {order} ({SETTING}={setting})"


def _set_priority(names: Tuple[str, ...]) -> bool:
    """Put ``names`` first in torch's SDPA priority order (the others after them, as they were)."""
    try:
        from torch.nn.attention import SDPBackend  # torch >= 2.2
    except ImportError:
        return False
    get, put = (getattr(torch._C, f, None) for f in ("_get_sdp_priority_order", "_set_sdp_priority_order"))
    if get is None or put is None:
        return False
    first = [int(getattr(SDPBackend, KERNELS[n][1])) for n in names]
    put(first + [int(b) for b in get() if int(b) not in first])
    return True


def padding_mask(keep: torch.Tensor, padded: Optional[bool] = None) -> Optional[torch.Tensor]:
    """The attention mask ``(B, 1, 1, S)`` of ``keep`` ``(B, S)`` (True at real tokens), or None.
    ``padded`` False: the caller knows on the host that no row has padding (collation's
    ``src_padded``), so None on every device without asking.

    On CPU a batch without padding gets None, which lets SDPA take its fastest path. On CUDA the
    mask always: asking whether there is padding (``bool(keep.all())``) would make the host wait
    for the GPU at every forward, and the efficient kernel takes masks (flash takes none). Under
    ``torch.compile`` the mask always too: the question would break the graph in two."""
    if padded is False:
        return None
    if padded is None and keep.device.type != "cuda" and not torch.compiler.is_compiling() and bool(keep.all()):
        return None
    return keep[:, None, None, :]  # (B, 1, 1, S)


def prefix_lm_mask(bidirectional: torch.Tensor, T: int) -> torch.Tensor:
    """A prefix LM's self-attention mask ``(B, 1, T, T)``, True = attend: query i reads key j when
    j <= i (causal) or j < ``bidirectional[b]`` ``(B,)`` (the row's first positions, its prefix,
    read one another). An explicit mask in place of ``is_causal``: on CUDA SDPA runs it on the
    efficient or math kernel (flash takes no mask; ``auto`` lists efficient after it). Right
    padding needs nothing more: a real position reads no key after both itself and the prefix."""
    idx = torch.arange(T, device=bidirectional.device)
    causal = idx[None, :] <= idx[:, None]  # (T, T): key <= query
    prefix = idx[None, None, :] < bidirectional[:, None, None]  # (B, 1, T): key inside the row's prefix
    return (causal[None] | prefix)[:, None]  # (B, 1, T, T)
