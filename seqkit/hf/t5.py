"""T5 (``T5ForConditionalGeneration``: T5 v1.0's ReLU and v1.1's gated GELU, tied or not) <->
seqkit's ``transformer`` with T5's switches: pre-norm layers with RMS norms (``rms_norm``), no
biases (``bias=false``), unscaled attention scores (``scale_attention=false``), d_kv per head
(``head_dim``), relative position buckets shared by each stack's layers instead of position
embeddings (``relative_buckets``, ``relative_max_distance``), the gated feed-forward
(``gated_ffn``), the decoder starting from ``<pad>`` (``decoder_start=pad``) and, tied, the
decoder's output scaled by d_model^-0.5 (``scale_output``).

HF ``{encoder,decoder}.block.i.`` -> seqkit ``{encoder,decoder}_layers.i.``: ``layer.0.SelfAttention.
{q,k,v}`` -> one ``self_attn.qkv_proj``, ``.o`` -> ``self_attn.out_proj``, ``layer.0.layer_norm`` ->
``attn_res.norm`` / ``self_res.norm``; the decoder's ``layer.1.EncDecAttention.q`` ->
``cross_attn.q_proj``, ``{k,v}`` -> one ``cross_attn.kv_proj``, ``.o`` -> ``cross_attn.out_proj``,
``layer.1.layer_norm`` -> ``cross_res.norm``; the last sublayer's ``DenseReluDense.wi`` (or
``wi_0`` + ``wi_1``, stacked) -> ``ffn.fc1``, ``.wo`` -> ``ffn.fc2``, ``layer_norm`` ->
``ffn_res.norm``; ``block.0.layer.0.SelfAttention.relative_attention_bias`` -> ``src_rel`` /
``tgt_rel``; ``final_layer_norm`` -> ``encoder_norm`` / ``decoder_norm``; ``shared`` ->
``src_embed`` (= ``tgt_embed``), ``lm_head`` -> ``output_proj`` when untied.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import torch

from seqkit.core.errors import SeqkitError
from seqkit.hf.keymap import ACTIVATIONS, TO_HF_ACTIVATION, KeyMap
from seqkit.hf import seq2seq
from seqkit.hf.vocab import VocabMap

ARCHITECTURES = ("T5ForConditionalGeneration",)
task_state = seq2seq.task_state  # the translation task's state, as for BART and Marian
SPECIAL_IDS = (("pad_token_id", "<pad>"), ("eos_token_id", "</s>"), ("decoder_start_token_id", "<pad>"))


def _ffn(config: Dict[str, Any]) -> Tuple[str, bool]:
    """(seqkit activation, gated) of ``feed_forward_proj`` (T5's "relu", "gated-gelu", ...)."""
    proj = config.get("feed_forward_proj", "relu")
    parts = proj.split("-")
    act = "gelu_new" if proj == "gated-gelu" else parts[-1]  # T5 v1.1's gated-gelu is the tanh approximation
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated") or act not in ACTIVATIONS:
        raise SeqkitError(f"config.json: feed_forward_proj={proj!r} has no seqkit counterpart")
    return ACTIVATIONS[act], parts[0] == "gated"


def key_map(encoder_layers: int, decoder_layers: int, gated: bool) -> KeyMap:
    wi: Any = ("DenseReluDense.wi_0", "DenseReluDense.wi_1") if gated else "DenseReluDense.wi"
    pairs: List[Tuple[Any, str, bool]] = []
    for side, layers, ours in (("encoder", encoder_layers, "encoder_layers"), ("decoder", decoder_layers, "decoder_layers")):
        dec = side == "decoder"
        for i in range(layers):
            h, s = f"{side}.block.{i}.layer.", f"{ours}.{i}."
            ff = 2 if dec else 1
            pairs += [(tuple(f"{h}0.SelfAttention.{x}.weight" for x in "qkv"), f"{s}self_attn.qkv_proj.weight", False),
                      (f"{h}0.SelfAttention.o.weight", f"{s}self_attn.out_proj.weight", False),
                      (f"{h}0.layer_norm.weight", f"{s}{'self_res' if dec else 'attn_res'}.norm.weight", False),
                      ((tuple(f"{h}{ff}.{w}.weight" for w in wi) if gated else f"{h}{ff}.{wi}.weight"),
                       f"{s}ffn.fc1.weight", False),
                      (f"{h}{ff}.DenseReluDense.wo.weight", f"{s}ffn.fc2.weight", False),
                      (f"{h}{ff}.layer_norm.weight", f"{s}ffn_res.norm.weight", False)]
            if dec:
                pairs += [(f"{h}1.EncDecAttention.q.weight", f"{s}cross_attn.q_proj.weight", False),
                          ((f"{h}1.EncDecAttention.k.weight", f"{h}1.EncDecAttention.v.weight"),
                           f"{s}cross_attn.kv_proj.weight", False),
                          (f"{h}1.EncDecAttention.o.weight", f"{s}cross_attn.out_proj.weight", False),
                          (f"{h}1.layer_norm.weight", f"{s}cross_res.norm.weight", False)]
        rel = "src_rel" if side == "encoder" else "tgt_rel"
        pairs += [(f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight", f"{rel}.weight", False),
                  (f"{side}.final_layer_norm.weight", f"{'encoder' if side == 'encoder' else 'decoder'}_norm.weight", False)]
    return KeyMap(pairs)


def check(arch: str, config: Dict[str, Any]) -> None:
    _ffn(config)
    if config.get("decoder_start_token_id", config.get("pad_token_id")) != config.get("pad_token_id"):
        raise SeqkitError("config.json: decoder_start_token_id is not the pad token; seqkit's T5 starts from <pad>")


def model_config(config: Dict[str, Any], vocab: VocabMap, tied: bool) -> Dict[str, Any]:
    """``tied``: the weights hold no ``lm_head`` of its own. T5 v1.0 scales the decoder's output,
    v1.1 not (``scale_decoder_outputs``; older configs said it with ``tie_word_embeddings``)."""
    check("", config)
    activation, gated = _ffn(config)
    C, H, D = int(config["d_model"]), int(config["num_heads"]), int(config["d_kv"])
    scale = bool(config.get("scale_decoder_outputs", config.get("tie_word_embeddings", True)))
    P = int(config.get("n_positions") or 512)
    drop = float(config.get("dropout_rate", 0.1))
    return {"name": "transformer", "encoder_layers": int(config["num_layers"]),
            "decoder_layers": int(config.get("num_decoder_layers") or config["num_layers"]), "embed_dim": C,
            "ffn_dim": int(config["d_ff"]), "attention_heads": H, "head_dim": 0 if H * D == C else D,
            "dropout": drop, "attention_dropout": drop, "activation_dropout": drop, "activation": activation,
            "gated_ffn": gated, "normalize_before": True, "rms_norm": True, "bias": False, "scale_attention": False,
            "relative_buckets": int(config.get("relative_attention_num_buckets", 32)),
            "relative_max_distance": int(config.get("relative_attention_max_distance", 128)),
            "max_source_positions": P, "max_target_positions": P, "share_all_embeddings": True,
            "share_decoder_input_output_embed": tied, "scale_output": scale, "no_scale_embedding": True,
            "output_bias": bool(vocab.absent.any()), "decoder_start": "pad",
            "layer_norm_eps": float(config.get("layer_norm_epsilon", 1e-6))}


def to_seqkit(arch: str, config: Dict[str, Any], state: Dict[str, torch.Tensor],
              vocab: VocabMap) -> Tuple[Dict[str, Any], Dict[str, torch.Tensor]]:
    state = dict(state)
    found = [state.pop(n) for n in ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
             if n in state]
    if not found:
        raise SeqkitError("the weights have no token embeddings (shared.weight)")
    if any(not torch.equal(found[0], t) for t in found[1:]):
        raise SeqkitError("the weights hold different tensors for T5's tied embeddings")
    head = state.pop("lm_head.weight", None)
    tied = head is None or torch.equal(head, found[0])  # as transformers decides: untied when both differ
    cfg = model_config(config, vocab, tied)
    out = {"src_embed.weight": vocab.to_seqkit(found[0])}
    out["tgt_embed.weight"] = out["src_embed.weight"]
    if not tied:
        out["output_proj.weight"] = vocab.to_seqkit(head)
    if cfg["output_bias"]:  # the specials T5 lacks (<s>) are never predicted
        out["output_bias"] = torch.zeros(len(vocab.hf_ids)).masked_fill(vocab.absent, float("-inf"))
    out.update(key_map(cfg["encoder_layers"], cfg["decoder_layers"], cfg["gated_ffn"]).to_seqkit(state, ARCHITECTURES[0]))
    return cfg, out


def to_hf(cfg: Dict[str, Any], state: Dict[str, torch.Tensor], vocab: VocabMap,
          imported: str = "") -> Tuple[Dict[str, Any], Dict[str, torch.Tensor]]:
    """``(config.json, state dict)`` of ``T5ForConditionalGeneration`` for a seqkit Transformer with
    T5's switches (any other combination is refused, naming the switch)."""
    tied = bool(cfg["share_decoder_input_output_embed"])
    want = {"normalize_before": True, "rms_norm": True, "bias": False, "scale_attention": False,
            "no_scale_embedding": True, "share_all_embeddings": True, "embed_layer_norm": False,
            "decoder_start": "pad"}
    for key, value in want.items():
        if cfg.get(key) != value:
            raise SeqkitError(f"T5ForConditionalGeneration has no counterpart of model.{key}={cfg.get(key)} with "
                              f"relative positions (it needs {value})")
    state = dict(state)
    bias = state.pop("output_bias", None)
    if bias is not None and bool((bias[~vocab.absent] != 0).any()):
        raise SeqkitError("T5ForConditionalGeneration has no output bias, and this model's is not zero")
    shared = vocab.to_hf(state.pop("src_embed.weight"))
    state.pop("tgt_embed.weight", None)
    out = {"shared.weight": shared, "encoder.embed_tokens.weight": shared, "decoder.embed_tokens.weight": shared}
    out["lm_head.weight"] = shared if tied else vocab.to_hf(state.pop("output_proj.weight"))
    out.update(key_map(cfg["encoder_layers"], cfg["decoder_layers"], cfg["gated_ffn"]).to_hf(state))
    C, H = cfg["embed_dim"], cfg["attention_heads"]
    act = TO_HF_ACTIVATION[cfg["activation"]]
    proj = ("gated-gelu" if act == "gelu_new" else f"gated-{act}") if cfg["gated_ffn"] else act
    if act == "gelu_new" and not cfg["gated_ffn"]:
        raise SeqkitError("T5 names no ungated tanh-GELU feed-forward (model.activation=gelu_tanh needs gated_ffn=true)")
    config = {"architectures": list(ARCHITECTURES), "model_type": "t5", "vocab_size": vocab.hf_size, "d_model": C,
              "d_kv": cfg["head_dim"] or C // H, "d_ff": cfg["ffn_dim"], "num_layers": cfg["encoder_layers"],
              "num_decoder_layers": cfg["decoder_layers"], "num_heads": H,
              "relative_attention_num_buckets": cfg["relative_buckets"],
              "relative_attention_max_distance": cfg["relative_max_distance"], "dropout_rate": cfg["dropout"],
              "layer_norm_epsilon": cfg["layer_norm_eps"], "feed_forward_proj": proj, "tie_word_embeddings": tied,
              "scale_decoder_outputs": bool(cfg["scale_output"]),
              "is_encoder_decoder": True, "use_cache": True}
    return config, out


def task_settings(cfg: Dict[str, Any], arch: str = "") -> Dict[str, Any]:
    return {}
