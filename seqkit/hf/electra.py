"""ELECTRA (``ElectraForPreTraining``, the discriminator; ``ElectraForMaskedLM``, the generator,
given as ``generator=FOLDER``) <-> seqkit's ``electra``. Both networks are BERT encoders whose
embeddings are E wide and projected to their width after the embeddings' LayerNorm
(``project_embeddings=sum``); seqkit's two share one token embedding, as ELECTRA trains them, so a
generator whose word embeddings differ from the discriminator's is refused.

HF ``electra.`` -> seqkit ``encoder.`` (discriminator) or ``generator.``: the BERT names of
:mod:`seqkit.hf.bert`, plus ``embeddings_project`` -> ``embed_proj``. Heads:
``discriminator_predictions.{dense, dense_prediction}`` -> ``disc_dense``, ``disc_out``;
``generator_predictions.{dense, LayerNorm}`` + ``generator_lm_head.bias`` -> ``generator_head.{dense,
norm, bias}`` (its weight is the shared embedding).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch

from seqkit.core.errors import SeqkitError
from seqkit.hf.bert import IGNORED, _layer_pairs
from seqkit.hf.keymap import TO_HF_ACTIVATION, KeyMap, activation, refuse
from seqkit.hf.vocab import VocabMap

ARCHITECTURES = ("ElectraForPreTraining",)
GENERATOR = "ElectraForMaskedLM"
SPECIAL_IDS = (("pad_token_id", "<pad>"),)
# without a generator folder, seqkit's generator starts untrained (fine-tuning drops it)
OPTIONAL_HEADS = ("generator.", "generator_head.")


def _encoder_pairs(hf: str, ours: str, layers: int, projected: bool) -> List[Tuple[Any, str, bool]]:
    e = hf + "embeddings."
    pairs: List[Tuple[Any, str, bool]] = [
        (e + "position_embeddings.weight", ours + "embed_positions.weight", False),
        (e + "token_type_embeddings.weight", ours + "embed_segments.weight", False),
        (e + "LayerNorm.weight", ours + "embed_norm.weight", False),
        (e + "LayerNorm.bias", ours + "embed_norm.bias", False)]
    if projected:
        pairs += [(f"{hf}embeddings_project.{w}", f"{ours}embed_proj.{w}", False) for w in ("weight", "bias")]
    for i in range(layers):
        pairs += _layer_pairs(f"{hf}encoder.layer.{i}.", f"{ours}layers.{i}.", False)
    return pairs


def disc_map(layers: int, projected: bool) -> KeyMap:
    pairs = [("electra.embeddings.word_embeddings.weight", "encoder.embed_tokens.weight", False)]
    pairs += _encoder_pairs("electra.", "encoder.", layers, projected)
    for w in ("weight", "bias"):
        pairs += [(f"discriminator_predictions.dense.{w}", f"disc_dense.{w}", False),
                  (f"discriminator_predictions.dense_prediction.{w}", f"disc_out.{w}", False)]
    return KeyMap(pairs)


def gen_map(layers: int, projected: bool) -> KeyMap:
    pairs = _encoder_pairs("electra.", "generator.", layers, projected)
    for w in ("weight", "bias"):
        pairs += [(f"generator_predictions.dense.{w}", f"generator_head.dense.{w}", False),
                  (f"generator_predictions.LayerNorm.{w}", f"generator_head.norm.{w}", False)]
    return KeyMap(pairs)


def _dims(config: Dict[str, Any]) -> Tuple[int, int]:
    C = int(config["hidden_size"])
    return C, int(config.get("embedding_size") or C)


def model_config(config: Dict[str, Any], generator: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    refuse(config, "position_embedding_type", "absolute", "relative position embeddings")
    for c in [config] + ([generator] if generator else []):
        activation(c, "hidden_act", "gelu")
    C, E = _dims(config)
    out = {"name": "electra", "encoder_layers": int(config["num_hidden_layers"]), "embed_dim": C,
           "ffn_dim": int(config["intermediate_size"]), "attention_heads": int(config["num_attention_heads"]),
           "dropout": float(config.get("hidden_dropout_prob", 0.1)),
           "attention_dropout": float(config.get("attention_probs_dropout_prob", 0.1)), "activation_dropout": 0.0,
           "activation": activation(config, "hidden_act", "gelu"), "normalize_before": False,
           "learned_positions": True, "max_positions": int(config.get("max_position_embeddings", 512)),
           "num_segments": int(config.get("type_vocab_size", 2)), "no_scale_embedding": True, "embed_layer_norm": True,
           "embedding_dim": E if E != C else 0, "project_embeddings": "sum", "share_layers": False,
           "layer_norm_eps": float(config.get("layer_norm_eps", 1e-12)), "unigram_bias_init": False}
    if generator:
        Cg, Eg = _dims(generator)
        if Eg != E or generator.get("vocab_size") != config.get("vocab_size"):
            raise SeqkitError("the generator's embedding_size or vocab_size differs from the discriminator's: seqkit's "
                              "ELECTRA shares one token embedding")
        for key in ("max_position_embeddings", "type_vocab_size", "layer_norm_eps", "hidden_act"):
            if generator.get(key) != config.get(key):
                raise SeqkitError(f"the generator's {key} differs from the discriminator's: seqkit's ELECTRA takes one")
        out.update(generator_dim=Cg, generator_ffn_dim=int(generator["intermediate_size"]),
                   generator_heads=int(generator["num_attention_heads"]),
                   generator_layers=int(generator["num_hidden_layers"]))
    return out


def to_seqkit(arch: str, config: Dict[str, Any], state: Dict[str, torch.Tensor], vocab: VocabMap,
              generator: Optional[Tuple[Dict[str, Any], Dict[str, torch.Tensor]]] = None
              ) -> Tuple[Dict[str, Any], Dict[str, torch.Tensor]]:
    state = {k: v for k, v in state.items() if not k.endswith(IGNORED)}
    cfg = model_config(config, generator[0] if generator else None)
    C, E = _dims(config)
    out = disc_map(cfg["encoder_layers"], E != C).to_seqkit(state, arch)
    out["encoder.embed_tokens.weight"] = vocab.to_seqkit(out["encoder.embed_tokens.weight"])
    out["generator.embed_tokens.weight"] = out["encoder.embed_tokens.weight"]  # one module, two names
    if generator:
        gconfig, gstate = generator
        gstate = {k: v for k, v in gstate.items() if not k.endswith(IGNORED)}
        word = gstate.pop("electra.embeddings.word_embeddings.weight")
        tied = gstate.pop("generator_lm_head.weight", word)
        bias = gstate.pop("generator_lm_head.bias")
        if not torch.equal(word, state["electra.embeddings.word_embeddings.weight"]) or not torch.equal(tied, word):
            raise SeqkitError("the generator's word embeddings differ from the discriminator's: seqkit's ELECTRA "
                              "shares one token embedding")
        Cg, _ = _dims(gconfig)
        out.update(gen_map(cfg["generator_layers"], E != Cg).to_seqkit(gstate, GENERATOR))
        out["generator_head.bias"] = vocab.to_seqkit(bias)
    return cfg, out


def _hf_config(arch: str, cfg: Dict[str, Any], C: int, ffn: int, heads: int, layers: int, vocab: VocabMap) -> Dict[str, Any]:
    E = cfg.get("embedding_dim") or cfg["embed_dim"]
    return {"architectures": [arch], "model_type": "electra", "vocab_size": vocab.hf_size, "embedding_size": E,
            "hidden_size": C, "num_hidden_layers": layers, "num_attention_heads": heads, "intermediate_size": ffn,
            "hidden_act": TO_HF_ACTIVATION[cfg["activation"]], "hidden_dropout_prob": cfg["dropout"],
            "attention_probs_dropout_prob": cfg["attention_dropout"], "max_position_embeddings": cfg["max_positions"],
            "type_vocab_size": max(1, cfg["num_segments"]), "layer_norm_eps": cfg.get("layer_norm_eps", 1e-5),
            "tie_word_embeddings": True}


def to_hf(cfg: Dict[str, Any], state: Dict[str, torch.Tensor], vocab: VocabMap, imported: str = "",
          heads: bool = True) -> Tuple[Dict[str, Any], Dict[str, torch.Tensor]]:
    """The discriminator's ``(config.json, state dict)`` (``heads=False``: without its prediction
    head, a fine-tuned body); :func:`generator_to_hf` the generator's."""
    _check(cfg)
    C, E = cfg["embed_dim"], cfg.get("embedding_dim") or cfg["embed_dim"]
    disc = {k: v for k, v in state.items() if not k.startswith(OPTIONAL_HEADS)}
    out = (disc_map(cfg["encoder_layers"], E != C) if heads else body_keymap(cfg)).to_hf(disc)
    out["electra.embeddings.word_embeddings.weight"] = vocab.to_hf(out["electra.embeddings.word_embeddings.weight"])
    return _hf_config("ElectraForPreTraining", cfg, C, cfg["ffn_dim"], cfg["attention_heads"], cfg["encoder_layers"],
                      vocab), out


def generator_to_hf(cfg: Dict[str, Any], state: Dict[str, torch.Tensor],
                    vocab: VocabMap) -> Tuple[Dict[str, Any], Dict[str, torch.Tensor]]:
    _check(cfg)
    Cg, E = cfg["generator_dim"], cfg.get("embedding_dim") or cfg["embed_dim"]
    layers = cfg.get("generator_layers") or cfg["encoder_layers"]
    gen = {k: v for k, v in state.items() if k.startswith("generator.") or k in ("generator_head.dense.weight",
           "generator_head.dense.bias", "generator_head.norm.weight", "generator_head.norm.bias")}
    gen.pop("generator.embed_tokens.weight", None)
    out = gen_map(layers, E != Cg).to_hf(gen)
    word = vocab.to_hf(state["encoder.embed_tokens.weight"])
    out.update({"electra.embeddings.word_embeddings.weight": word, "generator_lm_head.weight": word,
                "generator_lm_head.bias": vocab.to_hf(state["generator_head.bias"])})
    return _hf_config(GENERATOR, cfg, Cg, cfg["generator_ffn_dim"], cfg["generator_heads"], layers, vocab), out


def _check(cfg: Dict[str, Any]) -> None:
    checks = {"normalize_before": False, "learned_positions": True, "no_scale_embedding": True,
              "embed_layer_norm": True, "share_layers": False, "position_offset": 0}
    if cfg.get("embedding_dim"):
        checks["project_embeddings"] = "sum"
    for key, want in checks.items():
        if cfg.get(key, want) != want:
            raise SeqkitError(f"ELECTRA has no counterpart of model.{key}={cfg[key]} (it needs {want})")


def task_settings(cfg: Dict[str, Any], arch: str = "") -> Dict[str, Any]:
    return {}


def body_keymap(cfg: Dict[str, Any], imported: str = "") -> KeyMap:
    """The discriminator's key map without its prediction head (a fine-tuned body)."""
    C, E = cfg["embed_dim"], cfg.get("embedding_dim") or cfg["embed_dim"]
    pairs = disc_map(cfg["encoder_layers"], E != C).pairs
    return KeyMap([p for p in pairs if not p[1].startswith(("disc_dense.", "disc_out."))])
