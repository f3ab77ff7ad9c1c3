"""Fine-tuned classifiers and taggers (``pretrained_classifier`` / ``pretrained_tagger``) as HF
``*ForSequenceClassification`` / ``*ForTokenClassification``: the body through its family's map
(heads left out), the task head onto the HF class's own.

seqkit's classifier head is BERT's: the first position's vector -> dense + tanh -> dropout ->
linear K, which is ``{bert,albert}.pooler`` + ``classifier`` and RoBERTa's ``classifier.dense`` +
``classifier.out_proj``. ELECTRA's HF head uses GELU there and GPT-2's reads the last token with no
dense layer: those classifiers are refused in one line. The tagger head (dropout -> linear K at
every position) is every family's ``classifier``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import torch

from seqkit.core.errors import SeqkitError
from seqkit.hf import bert, electra, gpt2
from seqkit.hf.vocab import VocabMap

FAMILIES = {"bert": bert, "electra": electra, "transformer_lm": gpt2}  # seqkit model name -> family module


def body_variant(body_cfg: Dict[str, Any], imported: str) -> str:
    """bert, roberta, albert, electra or gpt2: the HF class family the body exports as."""
    name = body_cfg["name"]
    if name == "bert":
        return bert.variant(bert.export_architecture(body_cfg, imported))
    return {"electra": "electra", "transformer_lm": "gpt2"}[name]


def head_names(variant: str, tagger: bool) -> List[Tuple[str, str]]:
    """(HF module, seqkit module) of the task head."""
    if tagger:
        return [("classifier", "head.out")]
    if variant == "roberta":
        return [("classifier.dense", "head.dense"), ("classifier.out_proj", "head.out")]
    if variant in ("bert", "albert"):
        return [(f"{variant}.pooler" + (".dense" if variant == "bert" else ""), "head.dense"), ("classifier", "head.out")]
    why = {"electra": "ElectraForSequenceClassification's head applies GELU where seqkit's applies tanh",
           "gpt2": "GPT2ForSequenceClassification reads the last token through one linear layer, seqkit's head has "
                   "a dense + tanh layer first"}[variant]
    raise SeqkitError(f"this classifier has no HuggingFace class: {why} (a tagger on this body exports)")


def to_hf(cfg: Dict[str, Any], model: torch.nn.Module, labels: List[str], vocab: VocabMap, imported: str,
          lora: str = "merged") -> Tuple[Dict[str, Any], Dict[str, torch.Tensor]]:
    """``(config.json, state dict)`` of a fine-tuned ``model`` (``lora``: merged already, or
    ``drop``: the body without its updates, the base of a PEFT adapter)."""
    tagger = cfg["name"] == "pretrained_tagger"
    body_cfg = cfg["body"]["model"]
    if body_cfg["name"] not in FAMILIES:
        raise SeqkitError(f"a {body_cfg['name']} body has no HuggingFace counterpart to export to")
    variant = body_variant(body_cfg, imported)
    names = head_names(variant, tagger)
    if not tagger and model.pooling != "first":
        raise SeqkitError(f"HuggingFace's {variant} classifiers read the first position; this one pools "
                          f"'{model.pooling}' (model.pooling)")
    if getattr(model, "mix", None) is not None:
        raise SeqkitError("a scalar mix of the body's layers has no HuggingFace counterpart")
    family = FAMILIES[body_cfg["name"]]
    body = {k: v for k, v in model.body.state_dict().items() if not (lora == "drop" and ".lora." in k)}
    config, out = family.to_hf(body_cfg, body, vocab, imported, heads=False)
    state = model.state_dict()
    for hf, ours in names:
        for w in ("weight", "bias"):
            out[f"{hf}.{w}"] = state[f"{ours}.{w}"]
    base = {"bert": "Bert", "roberta": "Roberta", "albert": "Albert", "electra": "Electra", "gpt2": "GPT2"}[variant]
    config.update(architectures=[f"{base}For{'Token' if tagger else 'Sequence'}Classification"],
                  id2label={str(i): label for i, label in enumerate(labels)},
                  label2id={label: i for i, label in enumerate(labels)}, classifier_dropout=cfg.get("dropout", 0.1))
    if variant == "albert":
        config["classifier_dropout_prob"] = cfg.get("dropout", 0.1)
    if variant == "gpt2":
        config.pop("tie_word_embeddings", None)
    return config, out


def base_hf(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """The ``hf`` entry of an imported base (read from ``model.path``), or ``{}`` for a seqkit-trained one."""
    imported = cfg["body"].get("hf_architecture", "")
    if not imported:
        return {}
    from seqkit.core import checkpoints

    path = cfg.get("path", "")
    try:
        hf = checkpoints.load(path).get("hf") or {}
    except SeqkitError:
        hf = {}
    if hf.get("architecture") != imported:
        raise SeqkitError(f"the base checkpoint {path!r} (model.path, imported from {imported}) is needed for its "
                          "HuggingFace vocabulary map")
    return hf


def body_vocab(hf: Dict[str, Any], body_dict: Any) -> VocabMap:
    """The body's vocabulary map: an imported base's, else seqkit's own ids."""
    if not hf:
        return VocabMap.identity(body_dict)
    ids = hf["vocab"]["hf_ids"]
    if len(ids) != len(body_dict):
        raise SeqkitError("model.path is not the base this model was fine-tuned from (its vocabulary differs)")
    return VocabMap(body_dict, list(ids), int(hf["vocab"]["hf_size"]))
