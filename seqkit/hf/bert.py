"""BERT and RoBERTa (``BertForMaskedLM``, ``BertForPreTraining``, ``BertModel``,
``RobertaForMaskedLM``, ``RobertaModel``) <-> seqkit's ``bert``: post-norm encoder layers, learned
positions (RoBERTa's table starts at row 2: ``position_offset``), token-type embeddings (RoBERTa's
one type: ``num_segments=1``), an embedding LayerNorm, BERT's LayerNorm epsilon, and the masked-LM
head tied to the input embedding.

HF ``{bert,roberta}.`` -> seqkit ``encoder.``: ``embeddings.word_embeddings`` -> ``embed_tokens``
(rows through the vocabulary map), ``embeddings.position_embeddings`` -> ``embed_positions``,
``embeddings.token_type_embeddings`` -> ``embed_segments``, ``embeddings.LayerNorm`` ->
``embed_norm``; per layer i, ``encoder.layer.i.``: ``attention.self.{query,key,value}`` -> one
``self_attn.qkv_proj``, ``attention.output.dense`` -> ``self_attn.out_proj``,
``attention.output.LayerNorm`` -> ``attn_res.norm``, ``intermediate.dense`` -> ``ffn.fc1``,
``output.dense`` -> ``ffn.fc2``, ``output.LayerNorm`` -> ``ffn_res.norm``. Heads: BERT's
``cls.predictions.{transform.dense, transform.LayerNorm, bias}`` / RoBERTa's ``lm_head.{dense,
layer_norm, bias}`` -> ``mlm_head.{dense, norm, bias}``; ``bert.pooler.dense`` +
``cls.seq_relationship`` -> ``sentence_head.{dense, out}`` (next-sentence prediction).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Tuple

import torch

from seqkit.errors import SeqkitError
from seqkit.hf.keymap import KeyMap, refuse
from seqkit.hf.vocab import VocabMap

BERT = ("BertForMaskedLM", "BertForPreTraining", "BertModel")
ROBERTA = ("RobertaForMaskedLM", "RobertaModel")
ARCHITECTURES = BERT + ROBERTA
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
TO_HF_ACTIVATION = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}
IGNORED = ("embeddings.position_ids", "embeddings.token_type_ids")  # buffers, not weights
log = logging.getLogger("seqkit.hf")


def prefix_of(arch: str) -> str:
    if arch in ("BertModel", "RobertaModel"):
        return ""
    return "roberta." if arch in ROBERTA else "bert."


def key_map(arch: str, layers: int, mlm: bool, nsp: bool) -> KeyMap:
    p = prefix_of(arch)
    e = p + "embeddings."
    pairs: List[Tuple[Any, str, bool]] = [
        (e + "word_embeddings.weight", "encoder.embed_tokens.weight", False),
        (e + "position_embeddings.weight", "encoder.embed_positions.weight", False),
        (e + "token_type_embeddings.weight", "encoder.embed_segments.weight", False),
        (e + "LayerNorm.weight", "encoder.embed_norm.weight", False),
        (e + "LayerNorm.bias", "encoder.embed_norm.bias", False)]
    for i in range(layers):
        h, s = f"{p}encoder.layer.{i}.", f"encoder.layers.{i}."
        for w in ("weight", "bias"):
            pairs.append((tuple(f"{h}attention.self.{x}.{w}" for x in ("query", "key", "value")),
                          f"{s}self_attn.qkv_proj.{w}", False))
            for hf, ours in (("attention.output.dense", "self_attn.out_proj"), ("attention.output.LayerNorm", "attn_res.norm"),
                             ("intermediate.dense", "ffn.fc1"), ("output.dense", "ffn.fc2"), ("output.LayerNorm", "ffn_res.norm")):
                pairs.append((f"{h}{hf}.{w}", f"{s}{ours}.{w}", False))
    if mlm:
        head = ("lm_head.", "dense", "layer_norm") if arch in ROBERTA else ("cls.predictions.", "transform.dense", "transform.LayerNorm")
        for w in ("weight", "bias"):
            pairs.append((f"{head[0]}{head[1]}.{w}", f"mlm_head.dense.{w}", False))
            pairs.append((f"{head[0]}{head[2]}.{w}", f"mlm_head.norm.{w}", False))
    if nsp:
        for w in ("weight", "bias"):
            pairs.append((f"{p}pooler.dense.{w}", f"sentence_head.dense.{w}", False))
            pairs.append((f"cls.seq_relationship.{w}", f"sentence_head.out.{w}", False))
    return KeyMap(pairs)


def _mlm_bias_name(arch: str) -> str:
    return "lm_head.bias" if arch in ROBERTA else "cls.predictions.bias"


def _decoder(arch: str) -> str:
    return "lm_head.decoder." if arch in ROBERTA else "cls.predictions.decoder."


def model_config(arch: str, config: Dict[str, Any], nsp: bool) -> Dict[str, Any]:
    refuse(config, "position_embedding_type", "absolute", "relative position embeddings")
    refuse(config, "is_decoder", False, "a BERT used as a decoder")
    act = config.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise SeqkitError(f"config.json: hidden_act={act!r} has no seqkit counterpart (seqkit takes {', '.join(ACTIVATIONS)})")
    offset = int(config.get("pad_token_id", 1)) + 1 if arch in ROBERTA else 0
    return {"name": "bert", "encoder_layers": int(config["num_hidden_layers"]), "embed_dim": int(config["hidden_size"]),
            "ffn_dim": int(config["intermediate_size"]), "attention_heads": int(config["num_attention_heads"]),
            "dropout": float(config.get("hidden_dropout_prob", 0.1)),
            "attention_dropout": float(config.get("attention_probs_dropout_prob", 0.1)), "activation_dropout": 0.0,
            "activation": ACTIVATIONS[act], "normalize_before": False, "learned_positions": True,
            "max_positions": int(config.get("max_position_embeddings", 512)) - offset, "position_offset": offset,
            "num_segments": int(config.get("type_vocab_size", 2)), "no_scale_embedding": True, "embed_layer_norm": True,
            "embedding_dim": 0, "share_layers": False, "layer_norm_eps": float(config.get("layer_norm_eps", 1e-12)),
            "sentence_head": nsp, "span_boundary_head": False, "unigram_bias_init": False}


def to_seqkit(arch: str, config: Dict[str, Any], state: Dict[str, torch.Tensor],
              vocab: VocabMap) -> Tuple[Dict[str, Any], Dict[str, torch.Tensor]]:
    state = {k: v for k, v in state.items() if not k.endswith(IGNORED)}
    bias = state.pop(_mlm_bias_name(arch), None)
    mlm = bias is not None
    word = state[prefix_of(arch) + "embeddings.word_embeddings.weight"]
    for name, same_as in (("weight", word), ("bias", bias)):  # the tied decoder, when stored: the same numbers
        tied = state.pop(_decoder(arch) + name, None)
        if tied is not None and (same_as is None or not torch.equal(tied, same_as)):
            raise SeqkitError(f"{_decoder(arch)}{name} differs from the tensor it is tied to: seqkit ties them")
    nsp = "cls.seq_relationship.weight" in state
    pooler = [state.pop(f"{prefix_of(arch)}pooler.dense.{w}", None) for w in ("weight", "bias")] if not nsp else []
    if any(t is not None for t in pooler):  # a BertModel's pooler alone: no seqkit head keeps it
        log.warning("%s's pooler (pooler.dense) is left out: seqkit's classifiers train their own head", arch)
    cfg = model_config(arch, config, nsp)
    out = key_map(arch, cfg["encoder_layers"], mlm, nsp).to_seqkit(state, arch)
    out["encoder.embed_tokens.weight"] = vocab.to_seqkit(out["encoder.embed_tokens.weight"])
    if mlm:
        out["mlm_head.bias"] = vocab.to_seqkit(bias)
    return cfg, out


def export_architecture(cfg: Dict[str, Any], imported: str) -> str:
    if imported in ROBERTA:
        return "RobertaForMaskedLM"
    return "BertForPreTraining" if cfg.get("sentence_head") else "BertForMaskedLM"


def to_hf(cfg: Dict[str, Any], state: Dict[str, torch.Tensor], vocab: VocabMap,
          imported: str = "") -> Tuple[Dict[str, Any], Dict[str, torch.Tensor]]:
    """``(config.json, state dict)`` of an HF BERT (or RoBERTa, for an imported one) from seqkit's ``bert``."""
    checks = {"normalize_before": False, "learned_positions": True, "no_scale_embedding": True, "embed_layer_norm": True,
              "embedding_dim": 0, "share_layers": False}
    for key, want in checks.items():
        if cfg.get(key, want) != want:
            raise SeqkitError(f"BERT has no counterpart of model.{key}={cfg[key]} (it needs {want})")
    arch = export_architecture(cfg, imported)
    state = {k: v for k, v in state.items() if not k.startswith("span_head.")}  # SpanBERT's pretraining-only head
    if not cfg["num_segments"]:  # no token types: BERT's one type with a zero vector adds nothing
        state["encoder.embed_segments.weight"] = torch.zeros(1, cfg["embed_dim"])
    bias = state.pop("mlm_head.bias")
    out = key_map(arch, cfg["encoder_layers"], True, bool(cfg.get("sentence_head"))).to_hf(state)
    p = prefix_of(arch)
    out[p + "embeddings.word_embeddings.weight"] = vocab.to_hf(out[p + "embeddings.word_embeddings.weight"])
    out[_mlm_bias_name(arch)] = vocab.to_hf(bias)
    out[_decoder(arch) + "weight"] = out[p + "embeddings.word_embeddings.weight"]
    out[_decoder(arch) + "bias"] = out[_mlm_bias_name(arch)]
    config = {"architectures": [arch], "model_type": "roberta" if arch in ROBERTA else "bert",
              "vocab_size": vocab.hf_size, "hidden_size": cfg["embed_dim"], "num_hidden_layers": cfg["encoder_layers"],
              "num_attention_heads": cfg["attention_heads"], "intermediate_size": cfg["ffn_dim"],
              "hidden_act": TO_HF_ACTIVATION[cfg["activation"]], "hidden_dropout_prob": cfg["dropout"],
              "attention_probs_dropout_prob": cfg["attention_dropout"],
              "max_position_embeddings": cfg["max_positions"] + cfg.get("position_offset", 0),
              "type_vocab_size": max(1, cfg["num_segments"]), "layer_norm_eps": cfg.get("layer_norm_eps", 1e-5),
              "tie_word_embeddings": True}
    if arch in ROBERTA:
        config["pad_token_id"] = cfg.get("position_offset", 2) - 1
    elif cfg.get("position_offset", 0):
        raise SeqkitError(f"BERT has no counterpart of model.position_offset={cfg['position_offset']}")
    return config, out

# config.json's special ids
SPECIAL_IDS = (("pad_token_id", "<pad>"), ("bos_token_id", "<s>"), ("eos_token_id", "</s>"))


def task_settings(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """The masked_lm task's settings the model needs (its next-sentence head reads NSP pairs)."""
    return {"sentence_pairs": "nsp"} if cfg.get("sentence_head") else {}

# a BertModel / RobertaModel has no masked-LM head: seqkit's starts untrained
OPTIONAL_HEADS = ("mlm_head.",)
