"""BERT, RoBERTa and ALBERT (``BertForMaskedLM``, ``BertForPreTraining``, ``BertModel``,
``RobertaForMaskedLM``, ``RobertaModel``, ``AlbertForMaskedLM``, ``AlbertForPreTraining``,
``AlbertModel``) <-> seqkit's ``bert``: post-norm encoder layers, learned
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
ALBERT: the embeddings are E wide and ``encoder.embedding_hidden_mapping_in`` -> ``embed_proj``
(``project_embeddings=sum``); its one layer ``albert_layer_groups.0.albert_layers.0.`` ->
``layers.0.`` (``share_layers``): ``attention.{query,key,value}``, ``attention.dense``,
``attention.LayerNorm``, ``ffn``, ``ffn_output``, ``full_layer_layer_norm``; heads ``predictions.*``
and ``albert.pooler`` + ``sop_classifier.classifier`` (sentence order).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Tuple

import torch

from seqkit.core.errors import SeqkitError
from seqkit.hf.keymap import TO_HF_ACTIVATION, KeyMap, activation, refuse
from seqkit.hf.vocab import VocabMap

BERT = ("BertForMaskedLM", "BertForPreTraining", "BertModel")
ROBERTA = ("RobertaForMaskedLM", "RobertaModel")
ALBERT = ("AlbertForMaskedLM", "AlbertForPreTraining", "AlbertModel")
ARCHITECTURES = BERT + ROBERTA + ALBERT
IGNORED = ("embeddings.position_ids", "embeddings.token_type_ids")  # buffers, not weights
log = logging.getLogger("seqkit.hf")
# per variant: the masked-LM head's (prefix, dense, LayerNorm), the sentence head's (pooler, classifier)
HEADS = {"bert": (("cls.predictions.", "transform.dense", "transform.LayerNorm"), ("pooler.dense", "cls.seq_relationship")),
         "roberta": (("lm_head.", "dense", "layer_norm"), None),
         "albert": (("predictions.", "dense", "LayerNorm"), ("pooler", "sop_classifier.classifier"))}


def variant(arch: str) -> str:
    return "roberta" if arch in ROBERTA else "albert" if arch in ALBERT else "bert"


def prefix_of(arch: str) -> str:
    return "" if arch.endswith("Model") else variant(arch) + "."


def _layer_pairs(h: str, s: str, albert: bool) -> List[Tuple[Any, str, bool]]:
    """One layer's HF names under ``h`` -> seqkit's under ``s``."""
    att = "attention." if albert else "attention.self."
    names = ((("attention.dense", "self_attn.out_proj"), ("attention.LayerNorm", "attn_res.norm"), ("ffn", "ffn.fc1"),
              ("ffn_output", "ffn.fc2"), ("full_layer_layer_norm", "ffn_res.norm")) if albert else
             (("attention.output.dense", "self_attn.out_proj"), ("attention.output.LayerNorm", "attn_res.norm"),
              ("intermediate.dense", "ffn.fc1"), ("output.dense", "ffn.fc2"), ("output.LayerNorm", "ffn_res.norm")))
    pairs: List[Tuple[Any, str, bool]] = []
    for w in ("weight", "bias"):
        pairs.append((tuple(f"{h}{att}{x}.{w}" for x in ("query", "key", "value")), f"{s}self_attn.qkv_proj.{w}", False))
        pairs += [(f"{h}{hf}.{w}", f"{s}{ours}.{w}", False) for hf, ours in names]
    return pairs


def key_map(arch: str, layers: int, mlm: bool, nsp: bool) -> KeyMap:
    p, v = prefix_of(arch), variant(arch)
    e = p + "embeddings."
    pairs: List[Tuple[Any, str, bool]] = [
        (e + "word_embeddings.weight", "encoder.embed_tokens.weight", False),
        (e + "position_embeddings.weight", "encoder.embed_positions.weight", False),
        (e + "token_type_embeddings.weight", "encoder.embed_segments.weight", False),
        (e + "LayerNorm.weight", "encoder.embed_norm.weight", False),
        (e + "LayerNorm.bias", "encoder.embed_norm.bias", False)]
    if v == "albert":  # one shared layer, after the E -> C projection
        pairs += [(f"{p}encoder.embedding_hidden_mapping_in.{w}", f"encoder.embed_proj.{w}", False) for w in ("weight", "bias")]
        pairs += _layer_pairs(f"{p}encoder.albert_layer_groups.0.albert_layers.0.", "encoder.layers.0.", True)
    for i in range(layers if v != "albert" else 0):
        pairs += _layer_pairs(f"{p}encoder.layer.{i}.", f"encoder.layers.{i}.", False)
    mlm_names, sentence = HEADS[v]
    for w in ("weight", "bias"):
        if mlm:
            pairs.append((f"{mlm_names[0]}{mlm_names[1]}.{w}", f"mlm_head.dense.{w}", False))
            pairs.append((f"{mlm_names[0]}{mlm_names[2]}.{w}", f"mlm_head.norm.{w}", False))
        if nsp and sentence:
            pairs.append((f"{p}{sentence[0]}.{w}", f"sentence_head.dense.{w}", False))
            pairs.append((f"{sentence[1]}.{w}", f"sentence_head.out.{w}", False))
    return KeyMap(pairs)


def _mlm_bias_name(arch: str) -> str:
    return HEADS[variant(arch)][0][0] + "bias"


def _decoder(arch: str) -> str:
    return HEADS[variant(arch)][0][0] + "decoder."


def model_config(arch: str, config: Dict[str, Any], nsp: bool) -> Dict[str, Any]:
    refuse(config, "position_embedding_type", "absolute", "relative position embeddings")
    refuse(config, "is_decoder", False, "a BERT used as a decoder")
    albert = variant(arch) == "albert"
    if albert:
        refuse(config, "num_hidden_groups", 1, "ALBERT with several layer groups")
        refuse(config, "inner_group_num", 1, "ALBERT with several layers per group")
    act = activation(config, "hidden_act", "gelu_new" if albert else "gelu")
    offset = int(config.get("pad_token_id", 1)) + 1 if arch in ROBERTA else 0
    C, E = int(config["hidden_size"]), int(config.get("embedding_size", 0)) if albert else 0
    return {"name": "bert", "encoder_layers": int(config["num_hidden_layers"]), "embed_dim": C,
            "ffn_dim": int(config["intermediate_size"]), "attention_heads": int(config["num_attention_heads"]),
            "dropout": float(config.get("hidden_dropout_prob", 0.0 if albert else 0.1)),
            "attention_dropout": float(config.get("attention_probs_dropout_prob", 0.0 if albert else 0.1)),
            "activation_dropout": 0.0, "activation": act, "normalize_before": False,
            "learned_positions": True, "max_positions": int(config.get("max_position_embeddings", 512)) - offset,
            "position_offset": offset, "num_segments": int(config.get("type_vocab_size", 2)), "no_scale_embedding": True,
            "embed_layer_norm": True, "embedding_dim": E if E != C else 0, "project_embeddings": "sum",
            "share_layers": albert, "layer_norm_eps": float(config.get("layer_norm_eps", 1e-12)),
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
    sentence = HEADS[variant(arch)][1]
    nsp = sentence is not None and f"{sentence[1]}.weight" in state
    pooler = [state.pop(f"{prefix_of(arch)}{sentence[0]}.{w}", None) for w in ("weight", "bias")] if sentence and not nsp else []
    if any(t is not None for t in pooler):  # a BertModel's pooler alone: no seqkit head keeps it
        log.warning("%s's pooler is left out: seqkit's classifiers train their own head", arch)
    cfg = model_config(arch, config, nsp)
    out = key_map(arch, cfg["encoder_layers"], mlm, nsp).to_seqkit(state, arch)
    out["encoder.embed_tokens.weight"] = vocab.to_seqkit(out["encoder.embed_tokens.weight"])
    if mlm:
        out["mlm_head.bias"] = vocab.to_seqkit(bias)
    return cfg, out


def export_architecture(cfg: Dict[str, Any], imported: str) -> str:
    if imported in ROBERTA:
        return "RobertaForMaskedLM"
    if cfg.get("share_layers"):
        return "AlbertForPreTraining" if cfg.get("sentence_head") else "AlbertForMaskedLM"
    return "BertForPreTraining" if cfg.get("sentence_head") else "BertForMaskedLM"


def to_hf(cfg: Dict[str, Any], state: Dict[str, torch.Tensor], vocab: VocabMap, imported: str = "",
          heads: bool = True) -> Tuple[Dict[str, Any], Dict[str, torch.Tensor]]:
    """``(config.json, state dict)`` of an HF BERT or ALBERT (RoBERTa, for an imported one) from
    seqkit's ``bert`` (``heads=False``: the encoder alone, under the same names: a fine-tuned body)."""
    arch = export_architecture(cfg, imported)
    albert = variant(arch) == "albert"
    checks = {"normalize_before": False, "learned_positions": True, "no_scale_embedding": True, "embed_layer_norm": True}
    if cfg.get("embedding_dim"):
        checks["project_embeddings"] = "sum"
    if not albert:
        checks["embedding_dim"] = 0
    for key, want in checks.items():
        if cfg.get(key, want) != want:
            raise SeqkitError(f"{arch} has no counterpart of model.{key}={cfg[key]} (it needs {want})")
    state = {k: v for k, v in state.items() if not k.startswith("span_head.")}  # SpanBERT's pretraining-only head
    E = cfg.get("embedding_dim") or cfg["embed_dim"]
    if not cfg["num_segments"]:  # no token types: BERT's one type with a zero vector adds nothing
        state["encoder.embed_segments.weight"] = torch.zeros(1, E)
    if albert and not cfg.get("embedding_dim"):  # E = C: ALBERT still maps, by the identity
        state["encoder.embed_proj.weight"] = torch.eye(E)
        state["encoder.embed_proj.bias"] = torch.zeros(E)
    bias = state.pop("mlm_head.bias", None)
    out = key_map(arch, cfg["encoder_layers"], heads, heads and bool(cfg.get("sentence_head"))).to_hf(state)
    p = prefix_of(arch)
    out[p + "embeddings.word_embeddings.weight"] = vocab.to_hf(out[p + "embeddings.word_embeddings.weight"])
    if heads:
        out[_mlm_bias_name(arch)] = vocab.to_hf(bias)
        out[_decoder(arch) + "weight"] = out[p + "embeddings.word_embeddings.weight"]
        out[_decoder(arch) + "bias"] = out[_mlm_bias_name(arch)]
    config = {"architectures": [arch], "model_type": variant(arch),
              "vocab_size": vocab.hf_size, "hidden_size": cfg["embed_dim"], "num_hidden_layers": cfg["encoder_layers"],
              "num_attention_heads": cfg["attention_heads"], "intermediate_size": cfg["ffn_dim"],
              "hidden_act": TO_HF_ACTIVATION[cfg["activation"]], "hidden_dropout_prob": cfg["dropout"],
              "attention_probs_dropout_prob": cfg["attention_dropout"],
              "max_position_embeddings": cfg["max_positions"] + cfg.get("position_offset", 0),
              "type_vocab_size": max(1, cfg["num_segments"]), "layer_norm_eps": cfg.get("layer_norm_eps", 1e-5),
              "tie_word_embeddings": True}
    if albert:
        config.update(embedding_size=E, num_hidden_groups=1, inner_group_num=1)
    if arch in ROBERTA:
        config["pad_token_id"] = cfg.get("position_offset", 2) - 1
    elif cfg.get("position_offset", 0):
        raise SeqkitError(f"{arch} has no counterpart of model.position_offset={cfg['position_offset']}")
    return config, out


# config.json's special ids
SPECIAL_IDS = (("pad_token_id", "<pad>"), ("bos_token_id", "<s>"), ("eos_token_id", "</s>"))
# a BertModel / RobertaModel / AlbertModel has no masked-LM head: seqkit's starts untrained
OPTIONAL_HEADS = ("mlm_head.",)


def task_settings(cfg: Dict[str, Any], arch: str = "") -> Dict[str, Any]:
    """The masked_lm task's settings the model needs (its sentence head reads NSP or SOP pairs)."""
    if not cfg.get("sentence_head"):
        return {}
    return {"sentence_pairs": "sop" if cfg.get("share_layers") else "nsp"}


def body_keymap(cfg: Dict[str, Any], imported: str = "") -> KeyMap:
    """The key map of the encoder without its heads (a fine-tuned body)."""
    return key_map(export_architecture(cfg, imported), cfg["encoder_layers"], False, False)
