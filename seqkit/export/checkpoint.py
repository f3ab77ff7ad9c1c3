"""``seqkit-export format=checkpoint``: a fine-tuned pretrained model as an ordinary seqkit checkpoint,
LoRA merged into the weights, a parameter-efficient run's base weights included."""

from __future__ import annotations

import logging
import os

from seqkit.core.errors import SeqkitError

log = logging.getLogger("seqkit.export")


def export_checkpoint(path: str, output: str, overwrite: bool = False) -> str:
    """Write a fine-tuned pretrained model as an ordinary checkpoint that needs nothing else: LoRA
    updates merged into their Linear weights (the model becomes ``adapt=full``), the frozen base of
    any other parameter-efficient run included. Its predictions equal the source's."""
    from seqkit.adapt.lora import merge_lora
    from seqkit.adapt.modes import PARAMETER_EFFICIENT
    from seqkit.core import checkpoints
    from seqkit.core.checkpoints import load_for_inference

    if os.path.exists(output) and not overwrite:
        raise SeqkitError(f"{output} exists (pass overwrite=true to replace it)")
    state = checkpoints.load(path)
    model_cfg = dict(state["cfg"].get("model", {}))
    adapt = model_cfg.get("adapt")
    if adapt is None:
        raise SeqkitError(f"{path} holds a {model_cfg.get('name')} model, not a fine-tuned pretrained one: it is an "
                          "ordinary checkpoint already")
    if adapt not in PARAMETER_EFFICIENT and adapt != "lora":
        raise SeqkitError(f"{path} (model.adapt={adapt}) holds every weight already: nothing to merge or include")
    _, model = load_for_inference(path, state=state)
    merged = merge_lora(model) if adapt == "lora" else 0
    model_cfg.update(base_sha256="", adapt="full" if adapt == "lora" else adapt)
    out = {**state, "cfg": {**state["cfg"], "model": model_cfg}, "model": model.state_dict(), "optimizer": None}
    checkpoints.write([output], out)
    log.info("wrote %s: %s%s, %d tensors, stands alone", output, path,
             f" with {merged} LoRA update(s) merged" if merged else f" (adapt={adapt}) with its base weights",
             len(out["model"]))
    return output
