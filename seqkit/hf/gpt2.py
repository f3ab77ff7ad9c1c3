"""GPT-2 (``GPT2LMHeadModel``) <-> seqkit's ``transformer_lm``: the same network (pre-norm layers,
learned positions, a final LayerNorm, the output tied to the input embedding), so the map is names
and transposes. GPT-2 stores its projections as ``Conv1D`` (``(in, out)``, the transpose of an
``nn.Linear`` weight) and its query/key/value as one fused ``c_attn``, as seqkit's ``qkv_proj``.

Per layer i, HF ``transformer.h.i.`` -> seqkit ``layers.i.``:
``ln_1`` -> ``attn_res.norm``, ``attn.c_attn`` -> ``self_attn.qkv_proj``, ``attn.c_proj`` ->
``self_attn.out_proj``, ``ln_2`` -> ``ffn_res.norm``, ``mlp.c_fc`` -> ``ffn.fc1``, ``mlp.c_proj`` ->
``ffn.fc2``; ``transformer.wte`` -> ``embed`` (rows through the vocabulary map), ``transformer.wpe``
-> ``positions``, ``transformer.ln_f`` -> ``final_norm``, ``lm_head`` -> ``head`` (absent when tied).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch

from seqkit.core.errors import SeqkitError
from seqkit.hf.keymap import TO_HF_ACTIVATION, KeyMap, activation, refuse
from seqkit.hf.vocab import VocabMap

ARCHITECTURES = ("GPT2LMHeadModel",)
# buffers older GPT-2 files carry (the causal mask): not weights
IGNORED = (".attn.bias", ".attn.masked_bias")


def key_map(layers: int) -> KeyMap:
    """HF name -> (seqkit name, transposed)."""
    pairs: List[Tuple[str, str, bool]] = [("transformer.wte.weight", "embed.weight", False),
                                          ("transformer.wpe.weight", "positions.weight", False),
                                          ("transformer.ln_f.weight", "final_norm.weight", False),
                                          ("transformer.ln_f.bias", "final_norm.bias", False)]
    for i in range(layers):
        h, s = f"transformer.h.{i}.", f"layers.{i}."
        for hf, ours, conv in (("ln_1", "attn_res.norm", False), ("attn.c_attn", "self_attn.qkv_proj", True),
                               ("attn.c_proj", "self_attn.out_proj", True), ("ln_2", "ffn_res.norm", False),
                               ("mlp.c_fc", "ffn.fc1", True), ("mlp.c_proj", "ffn.fc2", True)):
            pairs.append((f"{h}{hf}.weight", f"{s}{ours}.weight", conv))
            pairs.append((f"{h}{hf}.bias", f"{s}{ours}.bias", False))
    return KeyMap(pairs)


def model_config(config: Dict[str, Any], vocab: VocabMap) -> Dict[str, Any]:
    """seqkit's ``transformer_lm`` settings for an HF ``GPT2Config``."""
    refuse(config, "scale_attn_by_inverse_layer_idx", False, "GPT-2 scaling attention by 1 / layer index")
    refuse(config, "scale_attn_weights", True, "GPT-2 attention without the 1 / sqrt(head dim) scale")
    refuse(config, "add_cross_attention", False, "GPT-2 with cross-attention")
    act = activation(config, "activation_function", "gelu_new")
    C = int(config["n_embd"])
    return {"name": "transformer_lm", "layers": int(config["n_layer"]), "embed_dim": C,
            "ffn_dim": int(config.get("n_inner") or 4 * C), "attention_heads": int(config["n_head"]),
            "dropout": float(config.get("resid_pdrop", 0.1)), "attention_dropout": float(config.get("attn_pdrop", 0.1)),
            "activation_dropout": 0.0, "activation": act, "normalize_before": True,
            "learned_positions": True, "max_positions": int(config["n_positions"]), "scale_embedding": False,
            "share_input_output_embed": bool(config.get("tie_word_embeddings", True)),
            "adaptive_softmax_cutoff": [], "adaptive_input": False, "output_bias": bool(vocab.absent.any()),
            "layer_norm_eps": float(config.get("layer_norm_epsilon", 1e-5))}


def to_seqkit(arch: str, config: Dict[str, Any], state: Dict[str, torch.Tensor],
              vocab: VocabMap) -> Tuple[Dict[str, Any], Dict[str, torch.Tensor]]:
    """``(model config, state dict)`` of seqkit's ``transformer_lm`` from an HF GPT-2."""
    cfg = model_config(config, vocab)
    state = {k: v for k, v in state.items() if not k.endswith(IGNORED)}
    head = state.pop("lm_head.weight", None)
    out = key_map(cfg["layers"]).to_seqkit(state, "GPT2LMHeadModel")
    out["embed.weight"] = vocab.to_seqkit(out["embed.weight"])
    if not cfg["share_input_output_embed"]:
        if head is None:
            raise SeqkitError("the weights have no lm_head.weight but config.json says tie_word_embeddings=false")
        out["head.weight"] = vocab.to_seqkit(head)
    if cfg["output_bias"]:  # the specials GPT-2 lacks are never predicted
        out["head.bias"] = torch.zeros(len(vocab.hf_ids)).masked_fill(vocab.absent, float("-inf"))
    return cfg, out


def to_hf(cfg: Dict[str, Any], state: Dict[str, torch.Tensor], vocab: VocabMap, imported: str = "",
          heads: bool = True) -> Tuple[Dict[str, Any], Dict[str, torch.Tensor]]:
    """``(config.json, state dict)`` of an HF ``GPT2LMHeadModel`` from seqkit's ``transformer_lm``
    (``heads=False``: without ``lm_head``, a fine-tuned body)."""
    checks = {"normalize_before": True, "learned_positions": True, "scale_embedding": False,
              "adaptive_softmax_cutoff": [], "adaptive_input": False}
    for key, want in checks.items():
        if cfg.get(key, want) != want:
            raise SeqkitError(f"GPT2LMHeadModel has no counterpart of model.{key}={cfg[key]} (it needs {want})")
    state = dict(state)
    bias = state.pop("head.bias", None)
    if bias is not None and bool((bias[~vocab.absent] != 0).any()):
        raise SeqkitError("GPT2LMHeadModel has no output bias, and this model's is not zero")
    tied = bool(cfg["share_input_output_embed"])
    head = state.pop("head.weight", None)
    out = key_map(cfg["layers"]).to_hf(state)
    out["transformer.wte.weight"] = vocab.to_hf(out["transformer.wte.weight"])
    if heads:
        out["lm_head.weight"] = out["transformer.wte.weight"] if tied else vocab.to_hf(head)
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": vocab.hf_size,
              "n_positions": cfg["max_positions"], "n_embd": cfg["embed_dim"], "n_layer": cfg["layers"],
              "n_head": cfg["attention_heads"],
              "n_inner": None if cfg["ffn_dim"] == 4 * cfg["embed_dim"] else cfg["ffn_dim"],  # None: GPT-2's 4 x C
              "activation_function": TO_HF_ACTIVATION[cfg["activation"]], "resid_pdrop": cfg["dropout"],
              "embd_pdrop": cfg["dropout"], "attn_pdrop": cfg["attention_dropout"],
              "layer_norm_epsilon": cfg.get("layer_norm_eps", 1e-5), "tie_word_embeddings": tied,
              "scale_attn_weights": True, "use_cache": True}
    return config, out

# config.json's special ids: seqkit's </s> starts and ends a GPT-2 document
SPECIAL_IDS = (("bos_token_id", "</s>"), ("eos_token_id", "</s>"), ("pad_token_id", "<pad>"))
# config.json: true when the model reads </s> before every prompt (a seqkit-trained GPT's export
# writes it; transformers keeps it as an attribute and ignores it). Absent: none, as transformers
# feeds a GPT-2 the tokenizer's ids as they are.
EOS_PREFIX = "seqkit_eos_prefix"


def task_settings(cfg: Dict[str, Any], arch: str = "", config: Optional[Dict[str, Any]] = None,
                  eos_prefix: Optional[bool] = None) -> Dict[str, Any]:
    """The language-modeling task's settings: ``eos_prefix`` as given (seqkit-import's switch), else
    as ``config`` (config.json) says, else false."""
    if eos_prefix is None:
        eos_prefix = bool((config or {}).get(EOS_PREFIX, False))
    return {"eos_prefix": eos_prefix}


def body_keymap(cfg: Dict[str, Any], imported: str = "") -> KeyMap:
    """The key map of the network without its output layer (a fine-tuned body)."""
    return key_map(cfg["layers"])
