"""The loss function the trainer calls each micro-batch: the criterion over the model, eager or
under ``torch.compile`` (``common.compile``).

What is compiled: ``criterion(model, sample)`` as one function, so the model's forward and the
loss (its backward too, through AOTAutograd) become a few fused graphs instead of hundreds of
kernel launches. Code dynamo cannot put in a graph splits it there and runs eagerly between
compiled pieces: a data-dependent branch in a model (``if bool(mask.all())``), the hooks of a
DistributedDataParallel wrapper (whose inner forward dynamo compiles bucket by bucket) or of FSDP.
A criterion that keeps state of its own as it goes (distillation's teacher and per-example caches)
would be traced again and again as that state changes: for such a criterion only the model is
compiled and the criterion runs eagerly around it (see ``traceable``).

Shapes: token-budget batches come in many shapes (rows x length). The graphs are compiled with
``dynamic=True``, rows and lengths symbols, so a new shape reuses them; compiled per shape, torch's
recompile limit (8 per function) would be reached in the first epoch and the rest of training would
silently run eagerly. (A batch of one row or length one may still add a specialized graph.)
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Tuple

import torch

from seqkit.core.errors import SeqkitError

log = logging.getLogger("seqkit.train")

LossFn = Callable[[Dict[str, Any]], Tuple[Any, Any, Dict[str, Any]]]


def loss_function(criterion: Any, model: torch.nn.Module, compile: bool, backend: Any = "inductor",
                  mode: str = "default") -> LossFn:
    """``fn(sample) -> (loss, sample_size, logging_output)``: ``criterion(model, sample)``, compiled
    when ``compile``. ``model`` is the module the training forward runs through (DDP-wrapped or
    FSDP-sharded under torchrun). ``backend`` is torch.compile's (tests pass a counting one), ``mode``
    its mode (``common.compile_mode``: "reduce-overhead" adds CUDA graphs, one per shape). A
    ``SeqkitError`` here when torch.compile does not work on the model's device."""
    if not compile:
        def eager(sample: Dict[str, Any]) -> Tuple[Any, Any, Dict[str, Any]]:
            return criterion(model, sample)

        return eager
    device = next(model.parameters()).device
    check_platform(device, backend)
    name = type(criterion).__name__
    if traceable(criterion):
        def whole(sample: Dict[str, Any]) -> Tuple[Any, Any, Dict[str, Any]]:
            return criterion(model, sample)

        run = torch.compile(whole, dynamic=True, backend=backend, **_mode(mode))
        log.info("common.compile: the model and criterion %s compiled together (torch.compile, backend %s, "
                 "dynamic shapes); the first updates compile", name, _name(backend))
    else:
        compiled_model = torch.compile(model, dynamic=True, backend=backend, **_mode(mode))  # its `training` is the model's

        def run(sample: Dict[str, Any]) -> Tuple[Any, Any, Dict[str, Any]]:
            return criterion(compiled_model, sample)

        log.info("common.compile: criterion %s keeps modules or caches of its own and is not traced: the model is "
                 "compiled (torch.compile, backend %s, dynamic shapes), the criterion runs eagerly", name,
                 _name(backend))

    def fn(sample: Dict[str, Any]) -> Tuple[Any, Any, Dict[str, Any]]:
        try:
            return run(sample)
        except torch._dynamo.exc.BackendCompilerFailed as e:  # a later shape or branch compiles too
            raise SeqkitError(f"common.compile=true: torch.compile failed ({_first_line(e)}); "
                              "set common.compile=false") from None

    return fn


def traceable(criterion: Any) -> bool:
    """Whether ``criterion(model, sample)`` is compiled as a whole. A criterion says so with a
    ``traceable`` attribute; without one, a criterion holding modules (a teacher) or containers it
    may fill as it goes (caches) is not: dynamo would guard on their contents and recompile as they
    change, then give up at the recompile limit."""
    declared = getattr(criterion, "traceable", None)
    if declared is not None:
        return bool(declared)
    state = getattr(criterion, "__dict__", {}).values()
    return not any(isinstance(v, (torch.nn.Module, dict, list, set)) for v in state)


def _probe(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def check_platform(device: torch.device, backend: Any = "inductor") -> None:
    """Compile and run a one-line function on ``device``: a ``SeqkitError`` where torch.compile
    cannot build code here (a Python dynamo does not support, no C++ compiler for the CPU, no
    Triton for the GPU), before training starts rather than at its first batch."""
    try:
        torch.compile(_probe, dynamic=False, backend=backend)(torch.ones(8, device=device))
    except Exception as e:  # noqa: BLE001  (whatever the platform lacks: one line, not a compiler's log)
        raise SeqkitError(f"common.compile=true, but torch.compile does not work on {device.type} here "
                          f"({_first_line(e)}); set common.compile=false") from None


def _first_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__


def _mode(mode: str) -> Dict[str, Any]:
    """torch.compile's ``mode`` keyword: none for "default" (so any backend is accepted)."""
    return {} if mode == "default" else {"mode": mode}


def _name(backend: Any) -> str:
    return backend if isinstance(backend, str) else getattr(backend, "__name__", type(backend).__name__)
