"""Low-precision weights with fp32 master copies inside the optimizer: ``common.param_dtype=bf16|fp16``
(fairseq's ``--bf16`` with its FP16Optimizer, Megatron's mixed-precision optimizer).

Under autocast every fp32 weight is cast again at every forward and every gradient back: hundreds
of cast kernels an update. Here the model holds its weights in bf16/fp16 and the forward runs in
that dtype without autocast. The trainable parameters of each optimizer param group are views into
one contiguous low-precision buffer, their ``.grad`` views into one contiguous gradient buffer
(zeroed in place every update: autograd accumulates into an existing ``.grad`` in place), and one
fp32 master buffer per group is the single parameter the torch optimizer sees (fused on a GPU,
foreach on a CPU). An update then casts each group's gradient to fp32 once, clips, steps, and
copies each group's masters back once. fp16's loss scale works as before (``Precision``'s
GradScaler unscales the masters' fp32 gradients and skips a non-finite step on the device).

Frozen parameters (adaptation modes) and floating buffers are simply cast. Checkpoints hold the
weights in fp32 (the masters) and the optimizer state keyed by parameter names, exactly as an fp32
run saves them: generation loads them as usual, and either kind of run resumes the other's.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

import torch
from torch import nn

from seqkit.core.errors import SeqkitError

log = logging.getLogger("seqkit.train")

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# optimizers whose update is element by element, so one flat buffer per group steps exactly as its
# parameters would one by one (a factored or per-tensor-norm optimizer would not)
ELEMENTWISE_OPTIMIZERS = ("adam", "adamw", "sgd")


def resolve_param_dtype(setting: str, precision: str, device: torch.device, model: nn.Module, optimizer: str,
                        strategy: str = "ddp", world_size: int = 1) -> Optional[torch.dtype]:
    """The dtype training holds ``model``'s weights in, None for fp32 (with autocast at bf16/fp16).
    ``auto``: the precision's dtype on a GPU where everything below allows it, fp32 elsewhere (the
    CPU keeps its measured autocast path). An explicit bf16/fp16 that cannot work is refused."""
    if setting == "fp32" or (setting == "auto" and precision == "fp32"):
        return None
    if setting not in ("auto", *DTYPES):
        raise SeqkitError(f"unknown common.param_dtype {setting!r}; valid: auto, fp32, bf16, fp16")
    if setting != "auto" and setting != precision:
        raise SeqkitError(f"common.param_dtype={setting} needs common.precision={setting} (the forward computes in "
                          f"the weights' dtype), not {precision}; use common.param_dtype=auto or fp32")
    why = None
    if strategy == "fsdp" and world_size > 1:
        why = "distributed.strategy=fsdp shards the parameters itself (use its mixed precision)"
    elif any(isinstance(m, nn.RNNBase) for m in model.modules()):
        why = "the model has LSTM/GRU layers, whose cuDNN weights cannot be views of one buffer"
    elif optimizer not in ELEMENTWISE_OPTIMIZERS:
        why = f"optimizer {optimizer} may not update element by element (known to: {', '.join(ELEMENTWISE_OPTIMIZERS)})"
    if setting == "auto":
        return None if why or device.type != "cuda" else DTYPES[precision]
    if why:
        raise SeqkitError(f"common.param_dtype={setting}: {why}; use common.param_dtype=fp32")
    return DTYPES[setting]


class MasterWeights:
    """The model's trainable parameters as views of one low-precision flat buffer per optimizer
    group, and the fp32 masters the optimizer steps (``groups``: what ``OPTIMIZERS.build`` takes)."""

    def __init__(self, model: nn.Module, groups: List[Dict[str, Any]], dtype: torch.dtype):
        self.dtype = dtype
        self.params: List[List[nn.Parameter]] = [list(g["params"]) for g in groups]  # the model's, per group
        # every name of every parameter (tied ones have several); the first is the optimizer state's key
        self.names: Dict[int, List[str]] = {}
        for name, p in model.named_parameters(remove_duplicate=False):
            self.names.setdefault(id(p), []).append(name)
        self.flats: List[torch.Tensor] = []  # (n_g,) low precision: the weights the model computes with
        self.grads: List[torch.Tensor] = []  # (n_g,) low precision: the model's .grad views
        self.master_grads: List[torch.Tensor] = []  # (n_g,) fp32
        self.masters: List[nn.Parameter] = []  # (n_g,) fp32, one parameter per group for the optimizer
        with torch.no_grad():
            masters = [torch.cat([p.detach().reshape(-1).float() for p in params]) for params in self.params]
            model.to(dtype)  # frozen parameters and floating buffers: cast once
            for params, master in zip(self.params, masters):
                flat, grad = master.to(dtype), torch.zeros(master.numel(), dtype=dtype, device=master.device)
                offset = 0
                for p in params:
                    n = p.numel()
                    p.data = flat[offset : offset + n].view_as(p)
                    p.grad = grad[offset : offset + n].view_as(p)
                    offset += n
                self.flats.append(flat)
                self.grads.append(grad)
                self.master_grads.append(torch.zeros_like(master))
                self.masters.append(nn.Parameter(master))
        self.groups = [{**g, "params": [m]} for g, m in zip(groups, self.masters)]
        log.info("weights in %s with fp32 masters in the optimizer: %d flat group(s) of %s parameters; no autocast",
                 str(dtype).split(".")[-1], len(self.masters), f"{sum(m.numel() for m in self.masters):,}")

    # -- one update ------------------------------------------------------------------------------
    def zero_grad(self) -> None:
        """Zero the model's gradient buffers in place (its .grad views must stay, not become None)."""
        for grad in self.grads:
            grad.zero_()

    def grads_to_masters(self) -> None:
        """One cast per group: the accumulated low-precision gradient into the master's fp32 .grad."""
        for master, master_grad, grad in zip(self.masters, self.master_grads, self.grads):
            master_grad.copy_(grad)
            master.grad = master_grad

    @torch.no_grad()
    def masters_to_model(self) -> None:
        """One cast per group: the stepped masters back into the model's weights."""
        for flat, master in zip(self.flats, self.masters):
            flat.copy_(master)

    # -- checkpoints: fp32 weights, optimizer state keyed by parameter names -----------------------
    def _slices(self, g: int) -> List[tuple]:
        out, offset = [], 0
        for p in self.params[g]:
            out.append((p, offset, offset + p.numel()))
            offset += p.numel()
        return out

    def model_state(self, model: nn.Module) -> Dict[str, torch.Tensor]:
        """``model.state_dict()`` in fp32 on the CPU, its trainable weights exact from the masters,
        the rest cast up (a tied weight one tensor under each of its names)."""
        saved: Dict[int, torch.Tensor] = {}  # id(parameter) -> its saved tensor
        for g, master in enumerate(self.masters):
            for p, a, b in self._slices(g):
                saved[id(p)] = master.detach()[a:b].view(p.shape).to("cpu", copy=True)
        state = {}
        for k, v in model.state_dict(keep_vars=True).items():  # the parameters and buffers themselves
            if id(v) not in saved:
                dtype = torch.float32 if v.is_floating_point() else v.dtype
                saved[id(v)] = v.detach().to("cpu", dtype=dtype, copy=True)
            state[k] = saved[id(v)]
        return state

    def load_model_state(self, model: nn.Module, state: Dict[str, torch.Tensor], strict: bool = True) -> None:
        """Inverse of :meth:`model_state`: the weights cast in place, the masters exact."""
        model.load_state_dict(state, strict=strict)  # copies into the views, casting
        with torch.no_grad():
            for g, master in enumerate(self.masters):
                for p, a, b in self._slices(g):
                    name = next((n for n in self.names[id(p)] if n in state), None)
                    if name is not None:
                        master[a:b].copy_(state[name].reshape(-1))
            self.masters_to_model()

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> Dict[str, Any]:
        """The optimizer's state as an fp32 run saves it: one entry per parameter name, the group's
        ``step`` repeated for each (every other tensor holds one value per element)."""
        saved = optimizer.state_dict()
        state, groups = {}, []
        for g, group in enumerate(saved["param_groups"]):
            slices = self._slices(g)
            groups.append({**group, "params": [self.names[id(p)][0] for p, _, _ in slices]})
            flat_state = saved["state"].get(group["params"][0])
            if flat_state is None:  # never stepped (gradual unfreezing has not reached it)
                continue
            for p, a, b in slices:
                state[self.names[id(p)][0]] = {
                    k: (v if k == "step" else v[a:b].view(p.shape)).to("cpu", copy=True) if torch.is_tensor(v) else v
                    for k, v in flat_state.items()}
        return {"state": state, "param_groups": groups}

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, saved: Dict[str, Any]) -> None:
        """Inverse of :meth:`optimizer_state`; also takes an fp32 run's state (a parameter it never
        stepped counts zero moments, and the group its largest ``step``)."""
        if len(saved["param_groups"]) != len(self.masters):
            raise ValueError(f"the checkpoint's optimizer has {len(saved['param_groups'])} parameter groups, "
                             f"this run {len(self.masters)}")
        state, groups = {}, []
        for g, group in enumerate(saved["param_groups"]):
            slices = self._slices(g)
            names = [self.names[id(p)][0] for p, _, _ in slices]
            if list(group["params"]) != names:
                raise ValueError(f"parameter group {g} of the checkpoint's optimizer holds other parameters")
            groups.append({**group, "params": [g]})
            per = [saved["state"].get(name) for name in names]
            known = [(p, s) for (p, _, _), s in zip(slices, per) if s is not None]
            if not known:
                continue
            flat: Dict[str, Any] = {}
            for k, v in known[0][1].items():
                if k == "step" and torch.is_tensor(v):  # a parameter's count of steps: the group's largest
                    flat[k] = torch.stack([s[k].float().cpu().reshape(()) for _, s in known]).max().to(v.dtype)
                elif torch.is_tensor(v):  # one value per element (moments, momentum)
                    flat[k] = torch.cat([(s[k] if s is not None else torch.zeros(p.shape)).reshape(-1).float().cpu()
                                         for (p, _, _), s in zip(slices, per)])
                else:
                    flat[k] = v
            state[g] = flat
        optimizer.load_state_dict({"state": state, "param_groups": groups})

