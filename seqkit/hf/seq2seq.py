"""Encoder-decoders: ``FSMTForConditionalGeneration``, ``BartForConditionalGeneration`` and
``MarianMTModel`` <-> seqkit's ``transformer`` (the translation task; seqkit's BART and T5
denoisers are this model too).

The three HF classes are one network with different switches, each of which seqkit's Transformer
has: post-norm layers; positions from a table (FSMT: fairseq's sinusoids stored as weights, rows
from ``pad + 1``: ``position_offset``; BART: learned, from row 2; Marian: the paper's sinusoids,
recomputed, never stored: ``sinusoids=vaswani``); BART's ``layernorm_embedding``
(``embed_layer_norm``); ``final_logits_bias`` (``output_bias``); the decoder's first token (FSMT
and BART read ``</s>``, Marian ``<pad>``: ``decoder_start``). FSMT is fairseq's Transformer ported,
so a seqkit-trained Transformer exports as FSMT: its positions go into FSMT's stored table (learned
or sinusoidal, either fits) and its arithmetic is seqkit's, operation for operation.

HF ``model.{encoder,decoder}.layers.i.`` -> seqkit ``{encoder,decoder}_layers.i.``:
``self_attn.{q,k,v}_proj`` -> one ``self_attn.qkv_proj``, ``self_attn.out_proj``,
``self_attn_layer_norm`` -> ``attn_res.norm`` (encoder) / ``self_res.norm`` (decoder),
``encoder_attn.q_proj`` -> ``cross_attn.q_proj``, ``encoder_attn.{k,v}_proj`` -> one
``cross_attn.kv_proj``, ``encoder_attn.out_proj``, ``encoder_attn_layer_norm`` -> ``cross_res.norm``,
``fc1``/``fc2`` -> ``ffn.fc1``/``ffn.fc2``, ``final_layer_norm`` -> ``ffn_res.norm``. Embeddings:
``model.shared`` (BART, Marian; tied to both sides and ``lm_head``) or FSMT's
``model.{encoder,decoder}.embed_tokens`` + ``model.decoder.output_projection`` -> ``src_embed``,
``tgt_embed``, ``output_proj``; BART's ``embed_positions`` -> ``{src,tgt}_pos``,
``layernorm_embedding`` -> ``{src,tgt}_embed_norm``; ``final_logits_bias`` -> ``output_bias``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

import torch

from seqkit.core.errors import SeqkitError
from seqkit.hf.keymap import TO_HF_ACTIVATION, KeyMap, activation, refuse
from seqkit.hf.vocab import VocabMap
from seqkit.models.modules.positions import sinusoid_table

FSMT, BART, MARIAN = "FSMTForConditionalGeneration", "BartForConditionalGeneration", "MarianMTModel"
ARCHITECTURES = (FSMT, BART, MARIAN)
MODEL_TYPES = {FSMT: "fsmt", BART: "bart", MARIAN: "marian"}
SILU = "swish"  # how BART's and FSMT's configs spell SiLU (transformers reads either name)
# config.json's special ids (FSMT's decoder_start_token_id is set from decoder_start at export)
SPECIAL_IDS = (("pad_token_id", "<pad>"), ("bos_token_id", "<s>"), ("eos_token_id", "</s>"),
               ("forced_eos_token_id", "</s>"))


def _layer_pairs(side: str, i: int) -> List[Tuple[Any, str, bool]]:
    h, s = f"model.{side}.layers.{i}.", f"{side}_layers.{i}."
    enc = side == "encoder"
    names = [("self_attn.out_proj", "self_attn.out_proj"),
             ("self_attn_layer_norm", "attn_res.norm" if enc else "self_res.norm"),
             ("fc1", "ffn.fc1"), ("fc2", "ffn.fc2"), ("final_layer_norm", "ffn_res.norm")]
    if not enc:
        names += [("encoder_attn.q_proj", "cross_attn.q_proj"), ("encoder_attn.out_proj", "cross_attn.out_proj"),
                  ("encoder_attn_layer_norm", "cross_res.norm")]
    pairs: List[Tuple[Any, str, bool]] = []
    for w in ("weight", "bias"):
        pairs.append((tuple(f"{h}self_attn.{x}_proj.{w}" for x in "qkv"), f"{s}self_attn.qkv_proj.{w}", False))
        if not enc:
            pairs.append((tuple(f"{h}encoder_attn.{x}_proj.{w}" for x in "kv"), f"{s}cross_attn.kv_proj.{w}", False))
        pairs += [(f"{h}{hf}.{w}", f"{s}{ours}.{w}", False) for hf, ours in names]
    return pairs


def key_map(arch: str, encoder_layers: int, decoder_layers: int) -> KeyMap:
    """The layers' map, BART's positions and embedding LayerNorms (embeddings are mapped by hand:
    their rows go through the vocabulary map, and ties decide which names exist)."""
    pairs: List[Tuple[Any, str, bool]] = []
    for i in range(encoder_layers):
        pairs += _layer_pairs("encoder", i)
    for i in range(decoder_layers):
        pairs += _layer_pairs("decoder", i)
    if arch == BART:
        for side, ours in (("encoder", "src"), ("decoder", "tgt")):
            pairs.append((f"model.{side}.embed_positions.weight", f"{ours}_pos.weight", False))
            pairs += [(f"model.{side}.layernorm_embedding.{w}", f"{ours}_embed_norm.{w}", False) for w in ("weight", "bias")]
    return KeyMap(pairs)


def _start(config: Dict[str, Any]) -> str:
    """seqkit's ``decoder_start`` for the config's ``decoder_start_token_id``."""
    start = config.get("decoder_start_token_id")
    for name, key in (("eos", "eos_token_id"), ("pad", "pad_token_id"), ("bos", "bos_token_id")):
        if start is not None and start == config.get(key):
            return name
    raise SeqkitError(f"config.json: decoder_start_token_id={start!r} is none of the pad, bos and eos tokens: "
                      "seqkit's decoder starts from one of them")


def check(arch: str, config: Dict[str, Any]) -> None:
    """One line naming the config field seqkit's Transformer cannot represent (before anything is read)."""
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if config.get(a) != config.get(b):
            raise SeqkitError(f"config.json: {a}={config.get(a)} and {b}={config.get(b)} differ; seqkit's Transformer "
                              "has one of each for both stacks")
    if arch == MARIAN:
        refuse(config, "share_encoder_decoder_embeddings", True, "Marian with separate source and target embeddings")
        if config.get("decoder_vocab_size") not in (None, config.get("vocab_size")):
            raise SeqkitError("config.json: decoder_vocab_size differs from vocab_size (Marian with two vocabularies) "
                              "has no seqkit counterpart")
    if arch == FSMT and config.get("src_vocab_size") != config.get("tgt_vocab_size"):
        raise SeqkitError(f"config.json: src_vocab_size={config.get('src_vocab_size')} and tgt_vocab_size="
                          f"{config.get('tgt_vocab_size')} differ; seqkit imports one vocabulary for both sides")
    activation(config, "activation_function", "gelu")
    _start(config)


def model_config(arch: str, config: Dict[str, Any], vocab: VocabMap) -> Dict[str, Any]:
    """seqkit's ``transformer`` settings for an HF FSMT, BART or Marian config."""
    check(arch, config)
    act = activation(config, "activation_function", "gelu")
    P = int(config["max_position_embeddings"])
    return {"name": "transformer", "encoder_layers": int(config["encoder_layers"]),
            "decoder_layers": int(config["decoder_layers"]), "embed_dim": int(config["d_model"]),
            "ffn_dim": int(config["encoder_ffn_dim"]), "attention_heads": int(config["encoder_attention_heads"]),
            "dropout": float(config.get("dropout", 0.1)), "attention_dropout": float(config.get("attention_dropout", 0.0)),
            "activation_dropout": float(config.get("activation_dropout", 0.0)), "activation": act,
            "normalize_before": False, "learned_positions": arch == BART,
            "sinusoids": "vaswani" if arch == MARIAN else "tensor2tensor", "position_offset": 2 if arch == BART else 0,
            "embed_layer_norm": arch == BART, "max_source_positions": P, "max_target_positions": P,
            "share_all_embeddings": True, "share_decoder_input_output_embed": True,
            "no_scale_embedding": not config.get("scale_embedding", arch == FSMT),
            "output_bias": arch != FSMT or bool(vocab.absent.any()), "decoder_start": _start(config),
            "layer_norm_eps": 1e-5}


def _one(state: Dict[str, torch.Tensor], names: List[str], what: str) -> torch.Tensor:
    """The one tensor stored under any of ``names`` (tied copies must agree)."""
    found = [state.pop(n) for n in names if n in state]
    if not found:
        raise SeqkitError(f"the weights have no {what} ({' or '.join(names)})")
    if any(not torch.equal(found[0], t) for t in found[1:]):
        raise SeqkitError(f"the weights hold different tensors for the tied {what} ({', '.join(names)}): "
                          "seqkit imports tied embeddings")
    return found[0]


def _fsmt_positions(cfg: Dict[str, Any], table: torch.Tensor, pad: int) -> Optional[torch.Tensor]:
    """FSMT's stored position table -> seqkit's position settings (updated in ``cfg``); returns the
    learned table, or None when the table is fairseq's sinusoids (from row 0: fairseq's own
    checkpoints; from row ``pad + 1``: a seqkit export)."""
    first = pad + 1
    rows = table[first:]  # row of position 0 on
    full = sinusoid_table(table.size(0), table.size(1))
    for offset in (first, 0):
        if torch.allclose(rows, full[offset : offset + rows.size(0)], atol=1e-6, rtol=0):
            cfg["position_offset"] = offset
            return None
    cfg.update(learned_positions=True, position_offset=first)
    return table


def to_seqkit(arch: str, config: Dict[str, Any], state: Dict[str, torch.Tensor],
              vocab: VocabMap) -> Tuple[Dict[str, Any], Dict[str, torch.Tensor]]:
    """``(model config, state dict)`` of seqkit's ``transformer`` from an HF encoder-decoder."""
    cfg = model_config(arch, config, vocab)
    state = dict(state)
    tied = bool(config.get("tie_word_embeddings", arch != FSMT))
    out: Dict[str, torch.Tensor] = {}
    if arch == FSMT:
        pad = int(config["pad_token_id"])
        for side, ours in (("encoder", "src"), ("decoder", "tgt")):
            table = _fsmt_positions(cfg, _one(state, [f"model.{side}.embed_positions.weight"], f"{side} positions"), pad)
            if table is not None:
                out[f"{ours}_pos.weight"] = table
        # tied, FSMT stores the decoder's table alone
        tgt = _one(state, ["model.decoder.embed_tokens.weight"], "decoder embeddings")
        src = state.pop("model.encoder.embed_tokens.weight", tgt if tied else None)
        proj = state.pop("model.decoder.output_projection.weight", tgt if tied else None)
        if src is None or proj is None:
            raise SeqkitError("the weights lack model.encoder.embed_tokens or model.decoder.output_projection and "
                              "config.json says tie_word_embeddings=false")
        cfg["share_all_embeddings"] = torch.equal(src, tgt)
        cfg["share_decoder_input_output_embed"] = torch.equal(tgt, proj)
        out["src_embed.weight"] = vocab.to_seqkit(src)
        if not cfg["share_all_embeddings"]:
            out["tgt_embed.weight"] = vocab.to_seqkit(tgt)
        if not cfg["share_decoder_input_output_embed"]:
            out["output_proj.weight"] = vocab.to_seqkit(proj)
    else:
        if not tied:
            raise SeqkitError(f"config.json: tie_word_embeddings=false ({arch} with an output layer of its own) has "
                              "no seqkit counterpart here")
        names = ["model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
                 "lm_head.weight"]
        out["src_embed.weight"] = vocab.to_seqkit(_one(state, names, "token embeddings"))
        if arch == MARIAN:  # recomputed sinusoids: older files store them, newer ones not
            for side in ("encoder", "decoder"):
                state.pop(f"model.{side}.embed_positions.weight", None)
    if cfg["share_all_embeddings"]:  # one table, under both of seqkit's names
        out["tgt_embed.weight"] = out["src_embed.weight"]
    bias = state.pop("final_logits_bias", None)
    if cfg["output_bias"]:
        b = vocab.to_seqkit(bias.reshape(-1)) if bias is not None else torch.zeros(len(vocab.hf_ids))
        out["output_bias"] = b.masked_fill(vocab.absent, float("-inf"))
    out.update(key_map(arch, cfg["encoder_layers"], cfg["decoder_layers"]).to_seqkit(state, arch))
    return cfg, out


def export_architecture(cfg: Dict[str, Any], imported: str) -> str:
    """The HF class a seqkit Transformer exports as: an imported model's own, else FSMT."""
    if imported in ARCHITECTURES:
        return imported
    checks = {"normalize_before": False, "embed_layer_norm": False}
    for key, want in checks.items():
        if cfg.get(key, want) != want:
            raise SeqkitError(f"no HuggingFace encoder-decoder holds model.{key}={cfg[key]} without BART's embedding "
                              "LayerNorm (FSMT, the class with seqkit's arithmetic, is post-norm)")
    return FSMT


def _fsmt_table(cfg: Dict[str, Any], state: Dict[str, torch.Tensor], ours: str, P: int, pad: int) -> torch.Tensor:
    """FSMT's stored table ``(P + pad + 1, C)``: row ``pad + 1 + p`` holds seqkit's position p."""
    C, k, first = cfg["embed_dim"], int(cfg.get("position_offset", 0)), pad + 1
    if cfg["learned_positions"]:
        table = state.pop(f"{ours}_pos.weight")  # (k + P', C)
    else:
        table = sinusoid_table(k + P, C, cfg.get("sinusoids", "tensor2tensor"))
    out = table.new_zeros(P + first, C)
    for r in range(P + first):
        j = r - first + k  # seqkit's table row for FSMT row r
        if 0 <= j < table.size(0) and r != pad:
            out[r] = table[j]
    return out


def to_hf(cfg: Dict[str, Any], state: Dict[str, torch.Tensor], vocab: VocabMap, imported: str = "",
          src_vocab: Optional[VocabMap] = None,
          langs: Tuple[str, str] = ("src", "tgt")) -> Tuple[Dict[str, Any], Dict[str, torch.Tensor]]:
    """``(config.json, state dict)`` of the HF encoder-decoder for seqkit's ``transformer`` (``vocab``:
    the target side's map, ``src_vocab``: the source's when it differs)."""
    arch = export_architecture(cfg, imported)
    src_vocab = src_vocab or vocab
    state = dict(state)
    if cfg["sinusoids"] != ("vaswani" if arch == MARIAN else "tensor2tensor") and not cfg["learned_positions"]:
        raise SeqkitError(f"{arch} has no counterpart of model.sinusoids={cfg['sinusoids']}")
    P = max(cfg["max_source_positions"], cfg["max_target_positions"])
    bias = state.pop("output_bias", None)
    out: Dict[str, torch.Tensor] = {}
    if arch == FSMT:
        if bias is not None and bool((bias[~vocab.absent] != 0).any()):
            raise SeqkitError("FSMTForConditionalGeneration has no output bias, and this model's is not zero")
        pad = vocab.hf_id("<pad>")
        if cfg["learned_positions"] and cfg["max_source_positions"] != cfg["max_target_positions"]:
            raise SeqkitError("FSMT has one max_position_embeddings: model.max_source_positions and "
                              "max_target_positions must agree for learned positions")
        for side, ours in (("encoder", "src"), ("decoder", "tgt")):
            out[f"model.{side}.embed_positions.weight"] = _fsmt_table(cfg, state, ours, P, pad)
        src = state.pop("src_embed.weight")
        tgt = state.pop("tgt_embed.weight", src)
        proj = state.pop("output_proj.weight", tgt)
        tie = cfg["share_all_embeddings"] and cfg["share_decoder_input_output_embed"]  # FSMT ties all three or none
        # tied: stored once, under the name FSMT saves (the decoder's); else a tensor each
        out["model.decoder.embed_tokens.weight"] = vocab.to_hf(tgt)
        for name, value, v in (("model.encoder.embed_tokens.weight", src, src_vocab),
                               ("model.decoder.output_projection.weight", proj, vocab)):
            out[name] = out["model.decoder.embed_tokens.weight"] if tie else v.to_hf(value)
    else:
        for key in ("share_all_embeddings", "share_decoder_input_output_embed"):
            if not cfg[key]:
                raise SeqkitError(f"{arch} ties its embeddings and output layer; this model does not (model.{key}=false)")
        shared = vocab.to_hf(state.pop("src_embed.weight"))
        state.pop("tgt_embed.weight", None)
        for name in ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
                     "lm_head.weight"):
            out[name] = shared
        out["final_logits_bias"] = (vocab.to_hf(bias) if bias is not None else shared.new_zeros(vocab.hf_size))[None, :]
    out.update(key_map(arch, cfg["encoder_layers"], cfg["decoder_layers"]).to_hf(state))
    start = {"bos": "<s>", "eos": "</s>", "pad": "<pad>"}[cfg.get("decoder_start", "bos")]
    config = {"architectures": [arch], "model_type": MODEL_TYPES[arch], "d_model": cfg["embed_dim"],
              "encoder_layers": cfg["encoder_layers"], "decoder_layers": cfg["decoder_layers"],
              "encoder_attention_heads": cfg["attention_heads"], "decoder_attention_heads": cfg["attention_heads"],
              "encoder_ffn_dim": cfg["ffn_dim"], "decoder_ffn_dim": cfg["ffn_dim"],
              "activation_function": SILU if cfg["activation"] == "silu" else TO_HF_ACTIVATION[cfg["activation"]], "dropout": cfg["dropout"],
              "attention_dropout": cfg["attention_dropout"], "activation_dropout": cfg["activation_dropout"],
              "max_position_embeddings": P, "scale_embedding": not cfg["no_scale_embedding"],
              "decoder_start_token_id": vocab.hf_id(start), "is_encoder_decoder": True, "use_cache": True}
    if arch == FSMT:
        config.update(langs=list(langs), src_vocab_size=src_vocab.hf_size, tgt_vocab_size=vocab.hf_size,
                      tie_word_embeddings=bool(cfg["share_all_embeddings"]))
    else:
        config.update(vocab_size=vocab.hf_size, tie_word_embeddings=True)
    return config, out


def task_settings(cfg: Dict[str, Any], arch: str = "") -> Dict[str, Any]:
    """BART's sources start with <s>, as its tokenizer writes them."""
    return {"prepend_bos": True} if arch == BART else {}


def task_state(vocab: VocabMap, tok: Any, config: Dict[str, Any]) -> Dict[str, Any]:
    """The translation task's state: one dictionary and tokenizer for both sides (Marian's two
    sentencepiece models, one per side)."""
    src, tgt = tok.side_states() if hasattr(tok, "side_states") else (tok.state_dict(), tok.state_dict())
    langs = config.get("langs") or ["src", "tgt"]
    d = vocab.dictionary.state_dict()
    return {"source_lang": langs[0], "target_lang": langs[1], "src_dict": d, "tgt_dict": d,
            "src_tokenizer": src, "tgt_tokenizer": tgt}


class MarianTokenizers:
    """Marian's tokenizer files: ``source.spm`` and ``target.spm`` (sentencepiece) and ``vocab.json``
    (piece -> id), as ``MarianTokenizer`` reads them: each side's pieces from its own sentencepiece
    model, ids from the one vocabulary (a piece outside it is ``<unk>``). seqkit's sentencepiece
    tokenizer does the same with the dictionary built over ``vocab.json``."""

    FILES = ("source.spm", "target.spm", "vocab.json")

    def __init__(self, folder: str):
        from seqkit.core.config import to_plain
        from seqkit.tokenizers.sentencepiece import SentencePieceUnigramConfig

        for name in self.FILES:
            if not os.path.isfile(os.path.join(folder, name)):
                raise SeqkitError(f"{folder} has source.spm but no {name}: Marian's tokenizer needs "
                                  f"{', '.join(self.FILES)}")
        self.raw = {}
        for name in self.FILES:
            with open(os.path.join(folder, name), "rb") as f:
                self.raw[name] = f.read()
        try:
            ids = json.loads(self.raw["vocab.json"].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise SeqkitError(f"{folder}/vocab.json is not a JSON file") from None
        self.tokens: List[Optional[str]] = [None] * (max(ids.values()) + 1 if ids else 0)
        for piece, i in ids.items():
            self.tokens[i] = piece
        # MarianTokenizer keeps its special tokens whole where a text spells them
        specials = [t for t in ("</s>", "<unk>", "<pad>") if t in ids]
        config = {**to_plain(SentencePieceUnigramConfig()), "special_tokens": specials}
        self.states = tuple({"config": config, "model_proto": self.raw[name]} for name in self.FILES[:2])
        from seqkit.tokenizers import load_tokenizer

        for state, name in zip(self.states, self.FILES):
            try:
                load_tokenizer(dict(state))
            except Exception as e:  # sentencepiece's own parse error
                raise SeqkitError(f"{folder}/{name}: sentencepiece cannot read it ({str(e).splitlines()[0]})") from None

    def vocabulary(self) -> List[Optional[str]]:
        return self.tokens

    def side_states(self) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        return self.states[0], self.states[1]
