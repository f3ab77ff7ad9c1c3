"""Fill ``<mask>`` (or ``[MASK]``) slots with a masked-LM checkpoint: the cloze demo.

    from seqkit.generation.cloze import Cloze
    cloze = Cloze.from_checkpoint("wt2/bert/checkpoint_best.pt")
    cloze.fill(["The game was released in <mask> 2010 ."], topk=5)
    # -> [[[("March", 0.21), ("November", 0.12), ...]]]   one list per slot, best first

``seqkit-generate`` on a masked-LM checkpoint reads such lines from stdin (``input=-``) and prints
``S-`` (the line) and one ``M-`` line per slot: the slot's number, then filler and probability pairs.
"""

from __future__ import annotations

import logging
import re
from typing import Any, List, Sequence, Tuple

import torch

from seqkit.core.checkpoints import load_for_inference
from seqkit.core.errors import SeqkitError
from seqkit.data.pair_dataset import pad_right
from seqkit.models.modules.kernels import use_attention_kernels

log = logging.getLogger("seqkit.generate")
SLOT = re.compile(r"<mask>|\[MASK\]")


class Cloze:
    def __init__(self, task: Any, model: torch.nn.Module, device: torch.device):
        self.task, self.model, self.device = task, model.eval(), device
        d = task.dictionary
        # fillers are real symbols: no specials, no <mask>, no padding symbols
        self.banned = torch.tensor([i for i, s in enumerate(d.symbols)
                                    if i < 4 or i == task.mask_idx or s.startswith("madeupword")])

    @classmethod
    def from_checkpoint(cls, path: str, device: str = "cpu", attention_kernels: str = "auto") -> "Cloze":
        """``attention_kernels``: ``common.attention_kernels`` (process-wide; CUDA only)."""
        dev = torch.device(device)
        kernels = use_attention_kernels(attention_kernels, dev)
        task, model = load_for_inference(path)
        log.info("%s", kernels)
        if getattr(task, "model_kind", None) != "masked_lm":
            raise SeqkitError(f"{path} holds a {getattr(task, 'model_kind', 'seq2seq')} model; the cloze needs a "
                              "masked language model (task masked_lm)")
        return cls(task, model.to(dev), dev)

    def encode(self, line: str) -> List[int]:
        """``<s> pieces </s>``, each ``<mask>``/``[MASK]`` one mask symbol."""
        d, tok = self.task.dictionary, self.task.tokenizer()
        parts = SLOT.split(line)
        if len(parts) < 2:
            raise SeqkitError(f"no <mask> in {line!r}: write <mask> (or [MASK]) where a word is missing")
        ids = [d.bos()]
        for k, part in enumerate(parts):
            if part.strip():
                ids += d.encode(tok.encode(part.strip()) if tok is not None else part.split(), append_eos=False)
            if k < len(parts) - 1:
                ids.append(self.task.mask_idx)
        return ids + [d.eos()]

    def _show(self, symbol: str) -> str:
        return symbol.replace("\u2581", "") or symbol

    @torch.inference_mode()
    def fill(self, lines: Sequence[str], topk: int = 5, batch_size: int = 32) -> List[List[List[Tuple[str, float]]]]:
        """For each line, for each slot, the ``topk`` fillers with their probabilities."""
        out: List[List[List[Tuple[str, float]]]] = []
        limit = self.model.max_positions()[0]
        for start in range(0, len(lines), batch_size):
            ids = [self.encode(line) for line in lines[start : start + batch_size]]
            if max(len(x) for x in ids) > limit:
                raise SeqkitError(f"a line of {max(len(x) for x in ids)} tokens exceeds the model's {limit} positions")
            src = pad_right([torch.tensor(x) for x in ids], self.task.dictionary.pad()).to(self.device)  # (B, S)
            masked = src.eq(self.task.mask_idx)
            logits = self.model(src, torch.tensor([len(x) for x in ids]), masked_tokens=masked)["mlm"]  # (N, V)
            logits[:, self.banned.to(logits.device)] = float("-inf")
            probs, best = logits.float().softmax(-1).topk(topk, dim=-1)  # (N, k)
            slots = iter(zip(probs.tolist(), best.tolist()))
            for row in masked.tolist():
                out.append([[(self._show(self.task.dictionary[i]), p) for p, i in zip(*next(slots))]
                            for _ in range(sum(row))])
        return out

    def format(self, sid: int, line: str, slots: List[List[Tuple[str, float]]]) -> str:
        lines = [f"S-{sid}\t{line}"]
        for k, fillers in enumerate(slots):
            lines.append(f"M-{sid}\t{k}\t" + "\t".join(f"{w}\t{p:.4f}" for w, p in fillers))
        return "\n".join(lines) + "\n"

