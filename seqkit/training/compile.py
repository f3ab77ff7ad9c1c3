"""The loss function the trainer calls each micro-batch: the criterion over the model, eager or
under ``torch.compile`` (``common.compile``).

What is compiled: ``criterion(model, sample)`` as one function, so the model's forward and the
loss (its backward too, through AOTAutograd) become one fused graph instead of hundreds of kernel
launches. It is compiled with ``fullgraph=True``: the built-in models and criteria trace whole
(``tests/test_compile.py`` fails on any graph break), so a break is a bug, not a slow path. Where
code dynamo cannot trace remains (a plugin model's data-dependent branch, tagging's host-side
metrics: a task method marked ``eager_under_compile = True`` runs under ``torch.compiler.disable``), the first batch says where, in one log line, and the
function is compiled again in pieces (``fullgraph=False``) that run eagerly in between. Under
``torchrun`` the hooks of a DistributedDataParallel wrapper (whose inner forward dynamo compiles
bucket by bucket) or of FSDP split the graph by design: there ``fullgraph=False`` from the start.
A criterion that keeps state of its own as it goes (distillation's teacher and per-example caches)
would be traced again and again as that state changes: for such a criterion only the model is
compiled and the criterion runs eagerly around it (see ``traceable``).

Shapes: token-budget batches come in many shapes (rows x length). The graphs are compiled with
``dynamic=True``, rows and lengths symbols, so a new shape reuses them; compiled per shape, torch's
recompile limit (8 per function) would be reached in the first epoch and the rest of training would
silently run eagerly. (A batch of one row or of length one adds a graph of its own: torch
specializes sizes 0 and 1; so does a translation batch without padding, through collation's
``src_padded``.)
``common.compile_mode=reduce-overhead`` adds CUDA graphs, one recorded per distinct graph inputs
(shapes and integer sizes): for batches of one shape, such as packed rows, whose loss takes all
rows with a weight and logs device counts, so that every batch calls the graph with the same inputs
(``tests/test_compile.py``).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Dict, Optional, Tuple

import torch

from seqkit.core.errors import SeqkitError

log = logging.getLogger("seqkit.train")

LossFn = Callable[[Dict[str, Any]], Tuple[Any, Any, Dict[str, Any]]]


def loss_function(criterion: Any, model: torch.nn.Module, compile: bool, backend: Any = "inductor",
                  mode: str = "default") -> LossFn:
    """``fn(sample) -> (loss, sample_size, logging_output)``: ``criterion(model, sample)``, compiled
    when ``compile``. ``model`` is the module the training forward runs through (DDP-wrapped or
    FSDP-sharded under torchrun: compiled with ``fullgraph=False``). ``backend`` is torch.compile's
    (tests pass a counting one), ``mode`` its mode (``common.compile_mode``: "reduce-overhead" adds
    CUDA graphs, one per shape). A ``SeqkitError`` here when torch.compile does not work on the
    model's device."""
    if not compile:
        def eager(sample: Dict[str, Any]) -> Tuple[Any, Any, Dict[str, Any]]:
            return criterion(model, sample)

        return eager
    # imported here, not with the trainer: torch._dynamo and sympy are a second and more of start-up
    # (an eager run's first optimizer call imports dynamo anyway, by then beside training/ahead.py's thread)
    import torch._dynamo
    from torch.fx.experimental import _config as fx_config
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    # what fullgraph=True raises where dynamo would break the graph (a data-dependent branch or size,
    # an unsupported call, a function under torch.compiler.disable)
    untraceable = (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError, GuardOnDataDependentSymNode)
    # a symbol for each size even where two are equal in the first batch (rows == length would
    # otherwise be assumed in its graph, and the next batch compile another)
    distinct_sizes = fx_config.patch(use_duck_shape=False)
    device = next(model.parameters()).device
    check_platform(device, backend)
    run_marked_eagerly(getattr(criterion, "task", None))
    name, whole, wrapper = type(criterion).__name__, traceable(criterion), _distributed_wrapper(model)

    def build(fullgraph: bool) -> LossFn:
        options = dict(dynamic=True, fullgraph=fullgraph, backend=backend, **_mode(mode))
        if whole:
            def both(sample: Dict[str, Any]) -> Tuple[Any, Any, Dict[str, Any]]:
                return criterion(model, sample)

            return torch.compile(both, **options)
        compiled_model = torch.compile(model, **options)  # its `training` is the model's

        def model_only(sample: Dict[str, Any]) -> Tuple[Any, Any, Dict[str, Any]]:
            return criterion(compiled_model, sample)

        return model_only

    fullgraph = wrapper is None
    run = build(fullgraph)
    how = (f"backend {_name(backend)}, dynamic shapes, "
           + ("one graph (fullgraph)" if fullgraph else f"fullgraph off: {wrapper}'s hooks split the graph"))
    if whole:
        log.info("common.compile: the model and criterion %s compiled together (torch.compile, %s); the first "
                 "update compiles", name, how)
    else:
        log.info("common.compile: criterion %s keeps modules or caches of its own and is not traced: the model is "
                 "compiled (torch.compile, %s), the criterion runs eagerly", name, how)

    def fn(sample: Dict[str, Any]) -> Tuple[Any, Any, Dict[str, Any]]:
        nonlocal run, fullgraph
        try:
            with distinct_sizes:
                return run(sample)
        except untraceable as e:
            if not fullgraph:
                raise
            # dynamo raises while tracing, before anything ran: compiling again in pieces is safe
            log.info("common.compile: %s cannot be traced whole (%s, at %s): compiled again in pieces that run "
                     "eagerly in between (fullgraph off)", name if whole else "the model", _first_line(e), _where(e))
            fullgraph, run = False, build(False)
            return fn(sample)
        except torch._dynamo.exc.BackendCompilerFailed as e:  # a later shape or branch compiles too
            raise SeqkitError(f"common.compile=true: torch.compile failed ({_first_line(e)}); "
                              "set common.compile=false") from None

    return fn


def run_marked_eagerly(task: Any) -> None:
    """Wrap each method of ``task`` marked ``eager_under_compile = True`` (host-side work such as
    tagging's chunk counts) in ``torch.compiler.disable`` on the instance: dynamo runs it eagerly,
    and marks it in one place instead of with a decorator that imports torch._dynamo with the task."""
    if task is None:
        return
    for name in dir(type(task)):
        method = getattr(type(task), name, None)
        if getattr(method, "eager_under_compile", False) and name not in vars(task):
            setattr(task, name, torch.compiler.disable(getattr(task, name)))


def _distributed_wrapper(model: torch.nn.Module) -> Optional[str]:
    """"DistributedDataParallel" or "FSDP" when ``model`` runs through one (their hooks cannot be
    traced), else None."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return "DistributedDataParallel"
    try:
        from torch.distributed.fsdp import FSDPModule  # torch >= 2.6
    except ImportError:
        return None
    return "FSDP" if isinstance(model, FSDPModule) else None


def _where(e: BaseException) -> str:
    """``file:line`` of the user code where dynamo stopped, or "unknown": seqkit's own files as
    ``seqkit/...`` wherever the package is installed, others relative to the working folder."""
    stack = getattr(e, "real_stack", None)
    if not stack:
        return "unknown"
    path = os.path.abspath(stack[-1].filename)
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../seqkit
    for root in (os.path.dirname(package) + os.sep, os.getcwd() + os.sep):
        if path.startswith(root):
            path = path[len(root):]
            break
    return f"{path}:{stack[-1].lineno}"


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
