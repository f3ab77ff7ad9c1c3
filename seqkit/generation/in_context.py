"""In-context (few-shot) classification with any causal language model, no training (Brown et al.
2020): k labelled training examples in the prompt, then the example to classify, and each label's
verbalizer scored by the language model; the label whose verbalizer is most probable wins.

    seqkit-generate path=lm/checkpoint_best.pt task.data=sst2-bin gen_subset=valid \\
        icl.shots=8 'icl.verbalizers=[terrible,great]' > pred.txt      # then seqkit-score hyp=pred.txt

The classification folder is binarized in the language model's vocabulary (``seqkit-preprocess
task=classification vocab_from=lm/checkpoint_best.pt``); its labels, splits and predictions are
those of a fine-tuned classifier, so the same S-/T-/L- lines come out and ``seqkit-score`` reads
them. The prompt is built from ids, one line per filled template as the language model read its
training text (``</s>`` between lines)::

    </s> demo_1 </s> demo_2 </s> ... demo_k </s> query-with-label-left-out  verbalizer

Each example gets its own k demonstrations, drawn from the training split with ``icl.seed`` and
the example's index (as GPT-3 draws them per example). Demonstrations that do not fit the model's
positions are dropped, oldest first, and counted in the log. The probability printed on an L- line
is the softmax over the labels of the verbalizers' summed log-probabilities.

A small language model often prefers one verbalizer whatever the text (the majority of its
training text, the last demonstration's label). ``icl.calibrate=true`` is Zhao et al.'s (2021)
contextual calibration: the same demonstrations are followed by a content-free query (every column
``icl.content_free``, "N/A"), and each label's probability is divided by its probability there,
``p(label | x) / p(label | N/A)``, renormalized: twice the language model's work, no training.
"""

from __future__ import annotations

import logging
import random
import re
from typing import Any, Dict, List, Optional, Sequence

import torch

from seqkit.core.errors import SeqkitError
from seqkit.generation.classifier import Classifier
from seqkit.generation.config import InContextConfig

log = logging.getLogger("seqkit.generate")


def template_parts(template: str, columns: int) -> List[str]:
    """``"{0} It was {label} ."`` -> ``["{0}", "It was", "{label}", "."]``: placeholders and the
    literal text between them; one ``{label}``, last of the placeholders, and one ``{i}`` per column."""
    parts = [p.strip() for p in re.split(r"(\{\d+\}|\{label\})", template) if p.strip()]
    fields = [p for p in parts if p.startswith("{") and p.endswith("}")]
    wanted = [f"{{{i}}}" for i in range(columns)]
    if sorted(f for f in fields if f != "{label}") != wanted or fields.count("{label}") != 1 or fields[-1] != "{label}":
        raise SeqkitError(f"icl.template={template!r} needs {' and '.join(wanted)} (the example's "
                          f"{'columns' if columns > 1 else 'text'}) once each, then {{label}} once, after them")
    return parts


class InContextClassifier(Classifier):
    """A causal language model classifying a classification task's examples from k demonstrations.
    Built on the task's folder (labels, splits, tokenizer) and the language model."""

    def __init__(self, task: Any, lm: torch.nn.Module, device: torch.device, cfg: InContextConfig,
                 precision: str = "fp32", eos_prefix: bool = True):
        super().__init__(task, lm, device, precision)
        # the language model's own task.eos_prefix: seqkit's LMs read </s> before a prompt, an
        # imported GPT-2 reads its tokenizer's ids as they are (nothing before the first demonstration)
        self.eos_prefix = eos_prefix
        if getattr(lm, "bidirectional", False):
            raise SeqkitError(f"in-context classification needs a left-to-right language model; "
                              f"{type(lm).__name__} reads both ways")
        if len(cfg.verbalizers) != len(self.labels):
            raise SeqkitError(f"icl.verbalizers has {len(cfg.verbalizers)} word(s) for the {len(self.labels)} labels "
                              f"of {task.cfg.data} ({', '.join(self.labels)}, in that order)")
        self.cfg = cfg
        d = task.src_dict
        self.eos, self.pad = d.eos(), d.pad()
        self.parts = template_parts(cfg.template, 2 if task.pairs else 1)
        self.literals = {p: self._encode(p) for p in self.parts if not p.startswith("{")}
        self.verbalizers = [self._encode(v) for v in cfg.verbalizers]
        if any(not v for v in self.verbalizers):
            raise SeqkitError("icl.verbalizers: an empty verbalizer")
        for word, ids in zip(cfg.verbalizers, self.verbalizers):
            if d.unk() in ids:  # every label's <unk> would score alike: the choice would mean nothing
                raise SeqkitError(f"icl.verbalizers: {word!r} is not in the language model's vocabulary "
                                  f"({len(d)} types; it would be scored as <unk>): pick words the model knows")
        self.pool: List[List[int]] = []
        self.pool_labels: List[int] = []
        if cfg.shots:
            train = task.load_dataset("train")
            if train.labels is None:
                raise SeqkitError(f"{task.cfg.data} has no labelled train split to draw demonstrations from")
            self.pool = [train.src[i].tolist() for i in range(len(train))]
            self.pool_labels = [int(train.labels[i][0]) for i in range(len(train))]
        self.dropped = 0
        # the calibration query: the template over content-free columns, up to its label
        columns = 2 if task.pairs else 1
        self.content_free = self._fill([d.bos()] + (self._encode(cfg.content_free) + [self.eos]) * columns, None)
        log.info("in-context: %d demonstration(s) an example, template %r, verbalizers %s%s", cfg.shots, cfg.template,
                 ", ".join(f"{label}={word}" for label, word in zip(self.labels, cfg.verbalizers)),
                 f", calibrated on {cfg.content_free!r}" if cfg.calibrate else "")

    def _encode(self, text: str) -> List[int]:
        tok = self.task.tokenizer()
        return self.task.src_dict.encode(tok.encode(text), append_eos=False)

    def _columns(self, ids: Sequence[int]) -> List[List[int]]:
        """``<s> a </s> [b </s>]`` -> ``[a, b]``."""
        out, cur = [], []
        for t in list(ids)[1:]:
            if t == self.eos:
                out.append(cur)
                cur = []
            else:
                cur.append(t)
        return out

    def _fill(self, ids: Sequence[int], label: Optional[int]) -> List[int]:
        """The template over an example's columns, with ``label``'s verbalizer (or up to it: None)."""
        cols, out = self._columns(ids), []
        for p in self.parts:
            if p == "{label}":
                if label is None:
                    break  # the query stops where its verbalizer would go
                out += self.verbalizers[label]
            elif p.startswith("{"):
                out += cols[int(p[1:-1])]
            else:
                out += self.literals[p]
        return out

    def prompt(self, index: int, ids: Sequence[int]) -> List[int]:
        """``</s> demo </s> ... </s> query`` (ids), the query's template up to its label (without
        the first ``</s>`` for a language model trained without ``eos_prefix``)."""
        return self.prompts(index, ids)[0]

    def prompts(self, index: int, ids: Sequence[int]) -> List[List[int]]:
        """Example ``index``'s prompt, and with ``icl.calibrate`` the content-free prompt after the
        same demonstrations (those that fit beside the longer of the two queries)."""
        rng = random.Random(self.cfg.seed * 1_000_003 + index)
        chosen = rng.sample(range(len(self.pool)), min(self.cfg.shots, len(self.pool))) if self.pool else []
        demos = [self._fill(self.pool[j], self.pool_labels[j]) + [self.eos] for j in chosen]
        queries = [self._fill(ids, None)] + ([self.content_free] if self.cfg.calibrate else [])
        longest = max(len(q) for q in queries)
        room = self.model.max_positions()[0] - longest - max(len(v) for v in self.verbalizers) - 1
        while demos and sum(len(d) for d in demos) > room:
            demos.pop(0)
            self.dropped += 1
        if room < 0:
            raise SeqkitError(f"example {index}: {longest} tokens leave no room in the model's "
                              f"{self.model.max_positions()[0]} positions")
        context = ([self.eos] if self.eos_prefix else []) + [t for d in demos for t in d]
        return [context + q for q in queries]

    @torch.inference_mode()
    def label_scores(self, prompts: Sequence[List[int]]) -> torch.Tensor:
        """``(N, K)``: each label's verbalizer log-probability after each prompt."""
        pairs = [(p, v) for p in prompts for v in self.verbalizers]  # N x K sequences: prompt + verbalizer
        T = max(len(p) + len(v) for p, v in pairs)
        tokens = torch.full((len(pairs), T), self.pad, dtype=torch.long)
        for i, (p, v) in enumerate(pairs):
            tokens[i, : len(p) + len(v)] = torch.tensor(p + v)
        lengths = torch.tensor([len(p) + len(v) for p, v in pairs])
        with self._autocast():
            logits = self.model(tokens.to(self.device), lengths).float().cpu()  # (N * K, T, V): t predicts t + 1
        scores = torch.empty(len(pairs))
        for i, (p, v) in enumerate(pairs):  # the log-softmax at the verbalizer's positions only
            at = torch.arange(len(p) - 1, len(p) - 1 + len(v))
            scores[i] = torch.log_softmax(logits[i, at], dim=-1)[torch.arange(len(v)), torch.tensor(v)].sum()
        return scores.view(len(prompts), len(self.verbalizers))

    def predict_ids(self, examples: Sequence[List[int]], word_starts: Optional[Sequence[Sequence[int]]] = None,
                    batch_size: int = 64, topk: int = 1) -> List[Dict[str, Any]]:
        out: List[Dict[str, Any]] = []
        k = max(1, min(topk, len(self.labels)))
        per_example = 2 if self.cfg.calibrate else 1
        step = max(1, batch_size // (len(self.verbalizers) * max(1, self.cfg.shots) * per_example))  # prompts are long
        for start in range(0, len(examples), step):
            prompts = [p for i, ids in enumerate(examples[start : start + step]) for p in self.prompts(start + i, ids)]
            scores = self.label_scores(prompts).view(-1, per_example, len(self.verbalizers))  # (n, 1 or 2, K)
            logp = scores[:, 0].log_softmax(dim=-1)  # (n, K)
            if self.cfg.calibrate:  # p(label | x) / p(label | content-free), renormalized
                logp = logp - scores[:, 1].log_softmax(dim=-1)
            probs = logp.softmax(dim=-1)  # (n, K)
            for row in probs:
                p, idx = row.topk(k)
                top = [(self.labels[j], float(q)) for j, q in zip(idx.tolist(), p.tolist())]
                out.append({"label": top[0][0], "prob": top[0][1], "topk": top})
        if self.dropped:
            log.warning("in-context: %d demonstration(s) did not fit the model's positions and were left out",
                        self.dropped)
        return out
