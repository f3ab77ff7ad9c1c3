"""Fine-tune a pretrained model for classification or tagging: ``model=pretrained_classifier`` /
``pretrained_tagger`` with ``model.path=`` a checkpoint of a pretraining run (task
``language_modeling``, ``masked_lm``, ``permutation_lm`` or ``denoising``).

    seqkit-preprocess task=classification vocab_from=pretrain/checkpoint_best.pt ...   # its tokenizer + dictionary
    seqkit-train task=classification model=pretrained_classifier model.path=pretrain/checkpoint_best.pt ...

The pretrained model (the *body*) is rebuilt from its checkpoint, its weights loaded whole, and its
pretraining heads dropped (the LM softmax, BERT's masked-LM/NSP/SBO heads, ELECTRA's generator).
Every pretraining model offers the same reading (its ``transfer_*`` members):

- ``transfer_features(src_tokens, src_lengths, segments)`` -> ``(B, S, C)`` contextual vectors, or
  ``(L, B, S, C)`` for a model whose ``transfer_layers`` L all serve as features (ELMo), mixed
  here by a :class:`~seqkit.models.elmo.ScalarMix` of this model's own;
- ``transfer_dim`` (C), ``transfer_pooling`` (how a sentence is read by default: ``first`` for
  BERT's ``[CLS]``, ``last`` for the final ``</s>`` of GPT, the LSTM LM, BART's decoder and XLNet,
  ``mean`` for ELMo) and ``pretraining_heads`` (the submodules fine-tuning drops).

A classifier pools the sentence and applies dense + tanh + linear (BERT's head); a tagger applies
a linear layer at every position. ``model.head=bilstm`` instead trains a task BiLSTM over
``[its own token embeddings; the body's vectors]`` at every position (Peters et al. 2018's use of
ELMo, with any body), read by concat pooling (classifier) or a linear layer per position (tagger).
The body's model config and vocabulary size are copied into ``model.body`` at the first build, so a fine-tuned checkpoint stands alone.

``model.adapt=`` chooses how the body is adapted (:mod:`seqkit.adapt`): ``full`` (the default),
``frozen``, ``adapter``, ``lora``, ``bitfit``, ``prompt`` or ``ulmfit``. A parameter-efficient run
(frozen, adapter, lora, bitfit, prompt) records ``model.path``'s sha256 in ``model.base_sha256``,
and its checkpoints hold only what it trained (:meth:`_Pretrained.checkpoint_keys`): loading one
rebuilds the body from that base and refuses a base whose sha256 differs. The base's path is
recorded absolute, so the checkpoints load from any folder (an older checkpoint's relative path is
read as given, else beside the checkpoint: :func:`resolve_base_path`). ``model.scratch=true``
trains the same architecture from random weights: the baseline a transfer run is measured against.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set, Tuple

import torch
from torch import nn

from seqkit.adapt.adapters import AdapterConfig
from seqkit.adapt.lora import LoRAConfig
from seqkit.adapt.modes import FIXED_BODY, MODES, PARAMETER_EFFICIENT, adapt_body, unused_settings
from seqkit.adapt.prompt import PromptConfig, SoftPrompt
from seqkit.adapt.ulmfit import ULMFiTConfig, layer_groups
from seqkit.core import checkpoints
from seqkit.core.config import arg, to_plain
from seqkit.core.errors import SeqkitError
from seqkit.core.io import file_sha256
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.models.base import EncoderClassifierModel
from seqkit.models.bilstm import BiLSTMEncoder, PoolingHead, TaskBiLSTMConfig, concat_pool
from seqkit.models.elmo import ScalarMix
from seqkit.models.transformer_encoder import PoolerHead, TokenHead

log = logging.getLogger("seqkit.models")

POOLINGS = ("auto", "first", "last", "mean", "max")
HEADS = ("default", "bilstm")


@dataclass
class PretrainedClassifierConfig:
    name: str = arg("pretrained_classifier", "registry name")
    path: str = arg("", "checkpoint of a pretraining run (task language_modeling, masked_lm, permutation_lm, "
                        "denoising, or a translation model with one dictionary) whose model becomes the body; read "
                        "once, at the first build")
    pooling: str = arg("auto", "how a sentence's vector is read from the body's outputs: auto (the body's own: "
                               "first for BERT/ELECTRA, last for GPT/LSTM LM/BART/XLNet, mean for ELMo), first, last, "
                               "mean, max", choices=POOLINGS)
    dropout: float = arg(0.1, "dropout in the head", ge=0, lt=1)
    head: str = arg("default", "default: dense + tanh + linear on the pooled vector (classifier), linear at every "
                               "position (tagger); bilstm: a task BiLSTM over [own token embeddings; the body's "
                               "vectors] (Peters et al. 2018), concat pooling or linear per position (model.bilstm)",
                    choices=HEADS)
    bilstm: TaskBiLSTMConfig = arg(help="model.head=bilstm: embed_dim, hidden_dim, num_layers, dropout, head_dim",
                                   factory=TaskBiLSTMConfig)
    adapt: str = arg("full", "how the body is adapted: full (every weight trains), frozen (only the head: features), "
                             "adapter (bottleneck adapters and layer norms), lora (low-rank updates of chosen "
                             "projections), bitfit (biases), prompt (k learned input vectors), ulmfit (full, with "
                             "discriminative rates and gradual unfreezing); the head always trains", choices=MODES)
    adapter: AdapterConfig = arg(help="model.adapt=adapter: placement, reduction_factor, activation",
                                 factory=AdapterConfig)
    lora: LoRAConfig = arg(help="model.adapt=lora: rank, alpha, dropout, targets", factory=LoRAConfig)
    prompt: PromptConfig = arg(help="model.adapt=prompt: length, init", factory=PromptConfig)
    ulmfit: ULMFiTConfig = arg(help="model.adapt=ulmfit: lr_decay, gradual_unfreezing", factory=ULMFiTConfig)
    scratch: bool = arg(False, "the body's architecture (read from model.path) with fresh random weights: the "
                               "from-scratch baseline of a transfer run")
    base_sha256: str = arg("", "filled at the first build of a parameter-efficient run (adapt frozen, adapter, lora, "
                               "bitfit, prompt), leave empty: model.path's sha256, which loading its checkpoints "
                               "checks; empty: checkpoints hold every weight")
    body: Dict[str, Any] = arg(help="filled at the first build, leave empty: the body's model config and vocabulary "
                                    "size (and the HuggingFace architecture it was imported from), so a fine-tuned "
                                    "checkpoint needs no model.path", factory=dict)


@dataclass
class PretrainedTaggerConfig(PretrainedClassifierConfig):
    name: str = arg("pretrained_tagger", "registry name")


def pool(x: torch.Tensor, src_tokens: torch.Tensor, src_lengths: torch.Tensor, how: str, pad: int) -> torch.Tensor:
    """``x`` ``(B, S, C)`` -> ``(B, C)``: position 0, the last real position, or the mean / max over
    the real positions."""
    if how == "first":
        return x[:, 0]
    if how == "last":
        last = (src_lengths.to(x.device) - 1).clamp(min=0)  # (B,)
        return x[torch.arange(x.size(0), device=x.device), last]
    keep = src_tokens.ne(pad).unsqueeze(-1)  # (B, S, 1)
    if how == "mean":
        return (x * keep).sum(1) / keep.sum(1).clamp(min=1)
    return x.masked_fill(~keep, torch.finfo(x.dtype).min).max(dim=1).values


def body_dictionary(src_dict: Dictionary, vocab_size: int) -> Dictionary:
    """The fine-tuning dictionary, extended to the body's vocabulary size (the pretraining task's
    own symbols after it, ``<mask>`` or sentinels, are never in fine-tuning inputs)."""
    d = Dictionary(src_dict.symbols[4:])
    for i in range(vocab_size - len(d)):
        d.add(f"<pretraining_symbol_{i}>", 0)
    return d


def needs_base(cfg: PretrainedClassifierConfig) -> bool:
    """Whether this run's checkpoints hold only what it trained, the body coming from ``model.path``."""
    return cfg.adapt in PARAMETER_EFFICIENT and not cfg.scratch


def load_body(cfg: PretrainedClassifierConfig, src_dict: Dictionary) -> nn.Module:
    """The body with its pretrained weights (first build, or a parameter-efficient run's base, from
    ``cfg.path``; fills ``cfg.body`` and ``cfg.base_sha256``), or an untrained body of the recorded
    shape (a checkpoint holding every weight loads them next)."""
    if cfg.body and not cfg.base_sha256:
        vocab = int(cfg.body["vocab_size"])
        if len(src_dict) > vocab:
            raise SeqkitError(f"the data's dictionary ({len(src_dict)} symbols) is larger than the pretrained "
                              f"model's ({vocab}): binarize with seqkit-preprocess vocab_from=<the pretraining checkpoint>")
        return _build(cfg.body["model"], body_dictionary(src_dict, vocab))
    if not cfg.path:
        raise SeqkitError(f"model {cfg.name} needs model.path=<checkpoint of a pretraining run>")
    sha = ""
    if cfg.base_sha256 or needs_base(cfg):
        if not os.path.isfile(cfg.path):
            where = (f" (a relative path, read from the folder seqkit runs in, {os.getcwd()})"
                     if not os.path.isabs(cfg.path) else "")
            raise SeqkitError(f"the base checkpoint {cfg.path} is not there{where}: a model.adapt={cfg.adapt} "
                              "checkpoint holds only what it trained, and needs the pretrained checkpoint it was "
                              "trained from")
        if not cfg.body:  # recorded absolute: the run's checkpoints load from any folder
            cfg.path = os.path.abspath(cfg.path)
        sha = file_sha256(cfg.path)
        if cfg.base_sha256 and sha != cfg.base_sha256:
            raise SeqkitError(f"{cfg.path} is not the base this model was trained from (its sha256 {sha[:12]}... "
                              f"differs from the recorded {cfg.base_sha256[:12]}...)")
    state = checkpoints.load(cfg.path)
    task, body = checkpoints.load_for_inference(cfg.path, state=state)
    kinds = ("lm", "masked_lm", "permutation_lm", "seq2seq")
    if task.model_kind not in kinds or not hasattr(body, "transfer_features"):
        raise SeqkitError(f"{cfg.path} holds a {task.model_kind} model ({type(body).__name__}), not a pretrained one")
    if getattr(body, "prefix_lm", False):
        raise SeqkitError(f"{cfg.path} is a prefix LM (task.prefix_length): a fine-tuned body reads its input "
                          "causally, not as the prefix it was trained on; fine-tune a causal language model")
    pretrain_dict = task.src_dict
    if not src_dict.is_prefix_of(pretrain_dict):
        raise SeqkitError(f"the data was binarized with another dictionary than {cfg.path}'s: run seqkit-preprocess "
                          f"with vocab_from={cfg.path}")
    first = not cfg.body
    cfg.body = {"model": to_plain(body.cfg), "vocab_size": len(pretrain_dict)}
    if state.get("hf"):  # an imported HuggingFace model: HF export needs model.path's vocabulary map
        cfg.body["hf_architecture"] = state["hf"]["architecture"]
    cfg.base_sha256 = sha if needs_base(cfg) else ""
    if cfg.scratch:
        log.info("%s: body %s of %s's shape, from random weights (model.scratch=true)", cfg.name,
                 cfg.body["model"]["name"], cfg.path)
        return _build(cfg.body["model"], body_dictionary(src_dict, len(pretrain_dict)))
    n_tensors = len(body.state_dict())
    _drop_heads(body)
    if first:
        log.info("%s: body %s from %s, %d of its %d tensors kept (dropped the pretraining heads: %s)", cfg.name,
                 cfg.body["model"]["name"], cfg.path, len(body.state_dict()), n_tensors,
                 ", ".join(body.pretraining_heads))
    return body


def resolve_base_path(model_values: Dict[str, Any], checkpoint: str) -> Dict[str, Any]:
    """``model_values`` (a checkpoint's model config) with the base path found: as recorded when it
    is there (checkpoints since the path is recorded absolute; older ones run from the folder they
    were trained in), else relative to the folder of ``checkpoint``, the file holding the config."""
    path = model_values.get("path") or ""
    if not model_values.get("base_sha256") or os.path.isabs(path) or os.path.isfile(path):
        return model_values
    beside = os.path.join(os.path.dirname(os.path.abspath(checkpoint)), path)
    return {**model_values, "path": beside} if os.path.isfile(beside) else model_values


def _build(model_values: Dict[str, Any], d: Dictionary) -> nn.Module:
    model_cfg = MODELS.make_config(dict(model_values))
    builder = MODELS.builder(model_cfg.name)
    body = MODELS.build(model_cfg, d, d) if getattr(builder, "kind", "seq2seq") == "seq2seq" else MODELS.build(model_cfg, d)
    _drop_heads(body)
    return body


def _drop_heads(body: nn.Module) -> None:
    for name in body.pretraining_heads:
        if getattr(body, name, None) is not None:
            setattr(body, name, None)


class _Pretrained(EncoderClassifierModel):
    # a checkpoint loader's hook: the recorded base path found beside the checkpoint (older runs)
    resolve_paths = staticmethod(resolve_base_path)

    def __init__(self, cfg: PretrainedClassifierConfig, src_dict: Dictionary):
        super().__init__()
        self.cfg, self.pad = cfg, src_dict.pad()
        first_build = not cfg.body
        if first_build and unused_settings(cfg):
            log.warning("%s: %s not used: model.adapt=%s (a mode's settings, model.<mode>.*, are read by that mode "
                        "alone)", cfg.name, " ".join(unused_settings(cfg)), cfg.adapt)
        self.body = load_body(cfg, src_dict)
        positions = self.body.max_positions()[0]
        if cfg.adapt == "prompt" and cfg.prompt.length >= positions:
            raise SeqkitError(f"model.prompt.length={cfg.prompt.length} leaves no position for the input: the "
                              f"{type(self.body).__name__} body reads at most {positions} positions, the prompt's "
                              "vectors included")
        self.pooling = self.body.transfer_pooling if cfg.pooling == "auto" else cfg.pooling
        # ELMo's layers all serve: a mix of this model's own (Peters et al. 2018, eq. 1)
        layers = getattr(self.body, "transfer_layers", 0)
        self.mix = ScalarMix(layers) if layers else None
        refusal = getattr(self.body, "adapt_refusal", None)  # a body that cannot take this mode says why (XLNet)
        if refusal is not None and refusal(cfg):
            raise SeqkitError(refusal(cfg))
        added = adapt_body(self.body, cfg.adapt, cfg)
        self.prompt: Optional[SoftPrompt] = None
        if cfg.adapt == "prompt":
            first_symbol = len(Dictionary())  # after <pad> <s> </s> <unk>
            dim = self.body.transfer_embed(torch.tensor([first_symbol])).size(-1)
            self.prompt = SoftPrompt(cfg.prompt.length, dim)
            if first_build:  # a checkpoint's vectors are loaded next
                self.prompt.init_from(self.body, first_symbol, len(src_dict), cfg.prompt.init)
        if first_build and added:
            log.info("%s: adapt=%s on %d module(s): %s", cfg.name, cfg.adapt, len(added), ", ".join(added[:4])
                     + (", ..." if len(added) > 4 else ""))
        # model.head=bilstm: the task's own BiLSTM reads the body's vectors beside its embeddings
        self.rnn = (BiLSTMEncoder(cfg.bilstm, src_dict, self.max_positions()[0], extra_dim=self.body.transfer_dim)
                    if cfg.head == "bilstm" else None)

    def train(self, mode: bool = True) -> "_Pretrained":
        super().train(mode)
        if self.cfg.adapt in FIXED_BODY:
            self.body.eval()  # frozen features and prompt tuning: no dropout inside the body
        return self

    def max_positions(self) -> Tuple[int, int]:
        k = self.prompt.vectors.size(0) if self.prompt is not None else 0
        return self.body.max_positions()[0] - k, 1 << 30

    def features(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                 segments: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The body's contextual vectors ``(B, S, C)``."""
        prefix = self.prompt(src_tokens.size(0)) if self.prompt is not None else None  # (B, k, C)
        x = self.body.transfer_features(src_tokens, src_lengths, segments, prefix=prefix)
        return self.mix(x) if self.mix is not None else x

    # -- what checkpoints and optimizers see ------------------------------------------------------------
    def checkpoint_keys(self) -> Optional[Set[str]]:
        """The state entries a checkpoint holds: all (None), or for a parameter-efficient run what
        it trains and everything outside the body (the frozen body comes from ``model.path``)."""
        if not self.cfg.base_sha256:
            return None
        trained = {n for n, p in self.named_parameters() if p.requires_grad}
        return {k for k in self.state_dict() if not k.startswith("body.") or k in trained}

    def param_groups(self) -> List[Dict[str, Any]]:
        """Groups with their own learning-rate scale and first epoch (ULMFiT), the prompt's vectors
        at their own rate (prompt tuning), else one group."""
        if self.cfg.adapt == "ulmfit":
            return layer_groups(self, self.body, self.cfg.ulmfit)
        if self.prompt is not None:
            rest = [p for n, p in self.named_parameters() if not n.startswith("prompt.")]
            return [{"name": "prompt", "params": list(self.prompt.parameters()), "lr_scale": self.cfg.prompt.lr_scale},
                    {"name": "rest", "params": rest}]
        return [{"name": "all", "params": list(self.parameters())}]


@MODELS.register("pretrained_classifier", PretrainedClassifierConfig)
class PretrainedClassifier(_Pretrained):
    """Pretrained body, pooled -> dense + tanh -> linear K: logits ``(B, K)``."""

    kind = "classifier"

    def __init__(self, cfg: PretrainedClassifierConfig, src_dict: Dictionary, num_labels: int):
        super().__init__(cfg, src_dict)
        rnn = cfg.bilstm
        self.head = (PoolerHead(self.body.transfer_dim, num_labels, cfg.dropout) if self.rnn is None
                     else PoolingHead(6 * rnn.hidden_dim, rnn.head_dim, num_labels, rnn.dropout))

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                segments: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = self.features(src_tokens, src_lengths, segments)  # (B, S, C)
        if self.rnn is not None:
            out, final = self.rnn(src_tokens, src_lengths, extra=x)  # (B, S, 2H), (B, 2H)
            return self.head(concat_pool(out, final, src_tokens, self.pad))  # (B, K)
        return self.head(pool(x, src_tokens, src_lengths, self.pooling, self.pad))  # (B, K)


@MODELS.register("pretrained_tagger", PretrainedTaggerConfig)
class PretrainedTagger(_Pretrained):
    """Pretrained body -> dropout -> linear K at every position: logits ``(B, S, K)``."""

    kind = "tagger"

    def __init__(self, cfg: PretrainedTaggerConfig, src_dict: Dictionary, num_labels: int):
        super().__init__(cfg, src_dict)
        width = self.body.transfer_dim if self.rnn is None else 2 * cfg.bilstm.hidden_dim
        self.head = TokenHead(width, num_labels, cfg.dropout if self.rnn is None else cfg.bilstm.dropout)

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                segments: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = self.features(src_tokens, src_lengths, segments)  # (B, S, C)
        if self.rnn is not None:
            x, _ = self.rnn(src_tokens, src_lengths, extra=x)  # (B, S, 2H)
        return self.head(x)  # (B, S, K)
