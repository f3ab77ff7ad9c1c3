"""Teacher-forced token accuracy, the metric of the tasks that train a decoder on a corrupted
input (``denoising``: BART, T5; ``mass``): the scored target tokens whose argmax is right."""

from __future__ import annotations

from typing import Any, Dict, List

import torch


class TokenAccuracy:
    """count_metrics / metric_names / reduce_metrics for a task with ``ignore_index`` on its targets."""

    ignore_index: int

    def count_metrics(self, logits: torch.Tensor, sample: Dict[str, Any]) -> Dict[str, Any]:
        """Teacher-forced target tokens predicted right (argmax), of the scored ones (a 0-d tensor)."""
        target = sample["target"]  # (B, T)
        keep = target.ne(self.ignore_index)
        return {"tokens_correct": (logits.detach().argmax(-1).eq(target) & keep).sum()}

    def metric_names(self) -> List[str]:
        return ["loss", "nll_loss", "ppl", "accuracy"]

    def reduce_metrics(self, sums: Dict[str, float]) -> Dict[str, float]:
        if not sums.get("sample_size"):
            return {}
        return {"accuracy": round(100.0 * sums.get("tokens_correct", 0.0) / sums["sample_size"], 2)}
