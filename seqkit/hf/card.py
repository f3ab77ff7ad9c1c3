"""The model card (``README.md``) of an exported folder, written from the checkpoint's own config and
training state: what the model is, what it was trained on, how far, its best validation figure,
and the settings that reproduce it."""

from __future__ import annotations

import json
from typing import Any, Dict


def model_card(path: str, state: Dict[str, Any], config: Dict[str, Any]) -> str:
    cfg, ts = state["cfg"], state.get("train_state") or {}
    arch = config["architectures"][0]
    model = cfg.get("model", {})
    task = cfg.get("task", {})
    hf = state.get("hf") or {}
    lines = ["---", "library_name: transformers", "tags:", "- seqkit", f"- {config.get('model_type', 'custom')}",
             "---", "", f"# {arch}, exported by seqkit", ""]
    if hf.get("source") and not ts.get("num_updates"):
        lines += [f"Imported from the HuggingFace folder `{hf['source']}` ({hf['architecture']}) and written back "
                  "unchanged by `seqkit-export format=huggingface`.", ""]
    else:
        metric = cfg.get("checkpoint", {}).get("best_checkpoint_metric", "loss")
        lines += [f"A seqkit `{model.get('name')}` model trained with `seqkit-train` (task `{task.get('name')}`), "
                  f"exported from `{path}` by `seqkit-export format=huggingface`.", "",
                  "| | |", "| --- | --- |",
                  f"| training data | `{task.get('data', '')}` |",
                  f"| updates | {ts.get('num_updates', 0):,} (epoch {ts.get('epoch', 0)}) |",
                  f"| training time | {ts.get('train_seconds', 0.0) / 60:.1f} min |",
                  f"| best validation {metric} | {ts.get('best')} |"]
        if model.get("path"):
            lines.append(f"| pretrained body | `{model['path']}` (model.adapt={model.get('adapt', 'full')}) |")
        lines.append("")
    shown = {k: cfg[k] for k in ("task", "model", "criterion", "optimizer", "lr_scheduler", "optimization") if k in cfg}
    lines += ["## seqkit settings", "", "The run's own config (every field; `seqkit-train` takes them as "
              "`group.field=value`):", "", "```json", json.dumps(shown, indent=2, sort_keys=True, default=str), "```", ""]
    return "\n".join(lines)
