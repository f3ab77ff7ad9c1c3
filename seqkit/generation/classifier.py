"""Load a classification or tagging checkpoint once, then predict labels with probabilities.

    from seqkit.generation.classifier import Classifier
    clf = Classifier.from_checkpoint("checkpoints/checkpoint_best.pt")
    clf.predict(["a charming and often affecting journey ."])
    # -> [{"label": "1", "prob": 0.97, "topk": [("1", 0.97)]}]
    clf.predict([("A man sleeps.", "A person rests.")], topk=2)       # sentence pairs
    tagger = Classifier.from_checkpoint("ner/checkpoint_best.pt")
    tagger.predict(["EU rejects German call"])                       # words split on spaces
    # -> [{"words": ["EU", ...], "tags": ["I-ORG", "O", "I-MISC", "O"], "probs": [...]}]
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

from seqkit.core.checkpoints import load_for_inference
from seqkit.core.errors import SeqkitError
from seqkit.data.labelled_dataset import collate_inputs
from seqkit.models.modules.kernels import use_attention_kernels

log = logging.getLogger("seqkit.generate")
Example = Union[str, Sequence[str]]


class Classifier:
    """A classifier or tagger model with its task (dictionary, labels, tokenizer)."""

    def __init__(self, task: Any, model: torch.nn.Module, device: torch.device, precision: str = "fp32"):
        self.task, self.model, self.device = task, model.eval(), device
        self.labels: List[str] = task.labels
        self.per_token: bool = task.per_token
        self.autocast_dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]

    @classmethod
    def from_checkpoint(cls, path: str, device: str = "cpu", precision: str = "fp32",
                        task_overrides: Optional[Dict[str, Any]] = None, quantize: str = "none",
                        attention_kernels: str = "auto") -> "Classifier":
        """``quantize="int8"``: Linear and LSTM weights in int8 (CPU, fp32 precision; see
        :mod:`seqkit.generation.quantize`); ``attention_kernels``: ``common.attention_kernels``
        (process-wide; CUDA only)."""
        from seqkit.generation.config import check_quantize
        from seqkit.generation.quantize import quantize_int8

        dev = torch.device(device)
        check_quantize(quantize, dev.type, "seqkit", precision)
        kernels = use_attention_kernels(attention_kernels, dev)
        task, model = load_for_inference(path, task_overrides)
        log.info("%s", kernels)
        if getattr(task, "model_kind", "seq2seq") not in ("classifier", "tagger"):
            raise SeqkitError(f"{path} holds a {getattr(task, 'model_kind', 'seq2seq')} model: use "
                              "seqkit.generation.translator.Translator")
        if quantize == "int8":
            model = quantize_int8(model)
        return cls(task, model.to(dev), dev, precision)

    def _autocast(self) -> Any:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    # -- ids in, probabilities out -------------------------------------------------------------------
    def predict_ids(self, examples: Sequence[List[int]], word_starts: Optional[Sequence[Sequence[int]]] = None,
                    batch_size: int = 64, topk: int = 1) -> List[Dict[str, Any]]:
        """Encoded examples (``<s> ... </s>`` ids) -> one result per example, in input order:
        classification ``{"label", "prob", "topk": [(label, prob), ...]}``; tagging (``word_starts``
        gives each example's first-piece positions) ``{"tags", "probs"}``, one per word."""
        if self.per_token and word_starts is None:
            raise ValueError("tagging needs the word starts of every example")
        max_len = self.model.max_positions()[0]
        for i, ids in enumerate(examples):
            if len(ids) > max_len:
                raise SeqkitError(f"example {i} has {len(ids)} tokens but the model accepts at most {max_len}")
        order = sorted(range(len(examples)), key=lambda i: -len(examples[i]))  # little padding per batch
        out: List[Dict[str, Any]] = [{} for _ in examples]
        k = max(1, min(topk, len(self.labels)))
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            net_input = collate_inputs([list(examples[i]) for i in chunk], self.task.src_dict, self.task.pairs)
            net_input = {name: t.to(self.device) for name, t in net_input.items()}
            with torch.inference_mode(), self._autocast():
                probs = self.model(**net_input).float().softmax(dim=-1).cpu()  # (B, K) or (B, S, K)
            for row, i in enumerate(chunk):
                if self.per_token:
                    p, tag = probs[row, list(word_starts[i])].max(dim=-1)  # (words,)
                    out[i] = {"tags": [self.labels[t] for t in tag.tolist()], "probs": p.tolist()}
                else:
                    p, idx = probs[row].topk(k)
                    top = [(self.labels[j], float(q)) for j, q in zip(idx.tolist(), p.tolist())]
                    out[i] = {"label": top[0][0], "prob": top[0][1], "topk": top}
        return out

    # -- text in ------------------------------------------------------------------------------------------
    def _as_texts(self, example: Example) -> Tuple[str, ...]:
        if isinstance(example, str):
            return tuple(example.split()) if self.per_token else tuple(example.split("\t"))
        return tuple(example)

    def encode(self, examples: Sequence[Example]) -> Tuple[List[List[int]], List[List[int]], List[Tuple[str, ...]]]:
        """Raw examples -> ids, word starts (tagging) and the texts (words for tagging)."""
        ids, starts, texts = [], [], []
        for n, ex in enumerate(examples):
            t = self._as_texts(ex)
            if not t or not all(x.strip() for x in t):
                raise SeqkitError(f"example {n}: empty {'sentence' if self.per_token or len(t) < 2 else 'text'}")
            i, s = self.task.encode_example(t)
            ids.append(i)
            starts.append(s)
            texts.append(t)
        return ids, starts, texts

    def predict(self, examples: Sequence[Example], batch_size: int = 64, topk: int = 1) -> List[Dict[str, Any]]:
        """Classification: a sentence, a ``"first<TAB>second"`` string or a (first, second) pair
        per example. Tagging: a sentence (words split on whitespace) or a list of words; each
        result also holds its ``words``."""
        ids, starts, texts = self.encode(examples)
        results = self.predict_ids(ids, starts if self.per_token else None, batch_size, topk)
        if self.per_token:
            for r, words in zip(results, texts):
                r["words"] = list(words)
        return results
