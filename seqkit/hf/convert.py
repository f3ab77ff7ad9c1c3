"""HuggingFace model folders in and out: ``seqkit-import`` (:func:`import_folder`) and
``seqkit-export format=huggingface`` (:func:`export_folder`).

Import reads ``config.json``, the weights and the tokenizer, picks the family by the config's
architecture, and writes an ordinary seqkit checkpoint: the family's model config and weights, the
task (its dictionary over the HF vocabulary, :mod:`seqkit.hf.vocab`, and the tokenizer as it is,
:mod:`seqkit.tokenizers.huggingface`), and an ``hf`` entry (architecture, the original config, the
vocabulary map, the tokenizer's side files) that export reads to write the same folder back.
Everything seqkit does with a checkpoint it then does with this one.

Families (one module each, the key map beside the config map): :mod:`seqkit.hf.gpt2`,
:mod:`seqkit.hf.bert` (BERT, RoBERTa, ALBERT), :mod:`seqkit.hf.electra`, :mod:`seqkit.hf.seq2seq`
(FSMT, BART, Marian), :mod:`seqkit.hf.t5`.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Dict, Optional, Tuple

from seqkit.core.config import to_plain
from seqkit.core.errors import SeqkitError
from seqkit.hf import bert, electra, gpt2, heads, seq2seq, t5
from seqkit.hf.card import model_card
from seqkit.hf.folder import read_config, read_weights, require, write_folder
from seqkit.hf.vocab import VocabMap
from seqkit.models.pretrained import body_dictionary

log = logging.getLogger("seqkit.hf")

# HF architecture -> (family module, seqkit task)
IMPORTS = {**{arch: (gpt2, "language_modeling") for arch in gpt2.ARCHITECTURES},
           **{arch: (bert, "masked_lm") for arch in bert.ARCHITECTURES},
           **{arch: (electra, "masked_lm") for arch in electra.ARCHITECTURES},
           **{arch: (seq2seq, "translation") for arch in seq2seq.ARCHITECTURES},
           **{arch: (t5, "translation") for arch in t5.ARCHITECTURES}}
# seqkit model name -> family module (a fine-tuned body's too)
EXPORTS = {**heads.FAMILIES, "transformer": seq2seq}
NO_COUNTERPART = {"lstm_lm": "an LSTM/GRU/Elman language model", "rnn": "an LSTM/GRU/Elman encoder-decoder",
                  "convs2s": "ConvS2S", "elmo": "ELMo"}
# tokenizer side files kept at import and written back at export
TOKENIZER_FILES = ("tokenizer_config.json", "special_tokens_map.json")


def read_tokenizer(folder: str) -> Tuple[Any, Dict[str, str]]:
    """The folder's tokenizer as seqkit's ``huggingface`` tokenizer (``tokenizer.json``; else the
    slow files — ``vocab.json`` + ``merges.txt``, ``vocab.txt``, ``spiece.model`` — converted by
    ``transformers``), and its side files."""
    from seqkit.tokenizers.huggingface import HFTokenizer, HFTokenizerConfig

    tok = HFTokenizer(HFTokenizerConfig())
    path = os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(path) and os.path.isfile(os.path.join(folder, "source.spm")):  # Marian's
        marian = seq2seq.MarianTokenizers(folder)
        return marian, {**_side_files(folder), **{n: marian.raw[n] for n in marian.FILES}}
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            tok.load_json(f.read(), path)
    else:
        slow = [f for f in ("vocab.json", "vocab.txt", "spiece.model", "sentencepiece.bpe.model") if os.path.isfile(os.path.join(folder, f))]
        if not slow:
            raise SeqkitError(f"{folder} has no tokenizer files (tokenizer.json, vocab.json + merges.txt, vocab.txt "
                              "or spiece.model)")
        if slow[0] == "vocab.json" and not os.path.isfile(os.path.join(folder, "merges.txt")):
            raise SeqkitError(f"{folder} has vocab.json but no merges.txt: a byte-level BPE tokenizer needs both")
        transformers = require("transformers")
        try:
            fast = transformers.AutoTokenizer.from_pretrained(folder, use_fast=True)
        except Exception as e:  # whatever the tokenizer classes raise on bad files
            raise SeqkitError(f"{folder}: transformers cannot read its tokenizer files ({str(e).splitlines()[0]})") from None
        if not getattr(fast, "is_fast", False):
            raise SeqkitError(f"{folder}: its tokenizer has no tokenizers-library form, which seqkit reads")
        tok.load_json(fast.backend_tokenizer.to_str(), folder)
    return tok, _side_files(folder)


def _side_files(folder: str) -> Dict[str, Any]:
    side = {}
    for name in TOKENIZER_FILES:
        if os.path.isfile(os.path.join(folder, name)):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                side[name] = f.read()
    return side


def token_of(tok: Any, config: Dict[str, Any], key: str) -> Optional[str]:
    """The token string of ``config[key]`` (an id), or None."""
    i = config.get(key)
    if isinstance(i, list):
        i = i[0] if i else None
    return tok.vocabulary()[i] if isinstance(i, int) and 0 <= i < len(tok.vocabulary()) else None


def _named(side: Dict[str, str], key: str, default: str) -> str:
    """A special token's string from tokenizer_config.json / special_tokens_map.json (a string or
    ``{"content": ...}``), else ``default``."""
    for name in TOKENIZER_FILES:
        try:
            value = json.loads(side[name]).get(key) if name in side else None
        except json.JSONDecodeError:
            raise SeqkitError(f"{name}: not a JSON file") from None
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            return value
    return default


def specials_of(arch: str, config: Dict[str, Any], tok: Any,
                side: Dict[str, str]) -> Tuple[Dict[str, str], Dict[str, str]]:
    """(seqkit special -> HF token, HF token -> seqkit symbol) for an architecture."""
    if arch in gpt2.ARCHITECTURES:  # one <|endoftext|> ends and starts documents: seqkit's </s>
        eos = token_of(tok, config, "eos_token_id") or token_of(tok, config, "bos_token_id")
        if eos is None:
            raise SeqkitError("config.json names no eos_token_id in the tokenizer's vocabulary")
        # a seqkit-trained GPT's export keeps seqkit's specials as tokens of their own names
        own = {s: s for s in ("<pad>", "<s>", "<unk>") if s in tok.vocabulary() and s != eos}
        return {**own, "</s>": eos}, {}
    if arch in seq2seq.ARCHITECTURES + t5.ARCHITECTURES:  # the config's ids, and the tokenizer's unknown token if it has one
        specials = {ours: token_of(tok, config, key) for ours, key in (("<pad>", "pad_token_id"), ("<s>", "bos_token_id"),
                                                                      ("</s>", "eos_token_id"))}
        if specials["<s>"] == specials["</s>"]:
            specials["<s>"] = None
        unk = _named(side, "unk_token", "<unk>")
        specials["<unk>"] = unk if unk in tok.vocabulary() else None
        for ours in ("<pad>", "</s>"):
            if specials[ours] is None:
                raise SeqkitError(f"config.json names no {'pad' if ours == '<pad>' else 'eos'}_token_id in the "
                                  "tokenizer's vocabulary")
        return {k: v for k, v in specials.items() if v is not None}, {}
    # encoders: [CLS] a [SEP] b [SEP] is seqkit's <s> a </s> b </s>
    roberta = arch in bert.ROBERTA
    names = {"<pad>": ("pad_token", "<pad>" if roberta else "[PAD]"), "<s>": ("cls_token", "<s>" if roberta else "[CLS]"),
             "</s>": ("sep_token", "</s>" if roberta else "[SEP]"), "<unk>": ("unk_token", "<unk>" if roberta else "[UNK]")}
    specials = {ours: _named(side, key, default) for ours, (key, default) in names.items()}
    return specials, {_named(side, "mask_token", "<mask>" if roberta else "[MASK]"): "<mask>"}


def parse_specials(text: str) -> Dict[str, str]:
    """``"<unk>=[UNK],<s>=<|startoftext|>"`` -> seqkit special -> HF token (seqkit-import's ``specials``)."""
    from seqkit.hf.vocab import SPECIALS

    out: Dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        ours, sep, token = part.partition("=")
        if not sep or not token or ours not in SPECIALS:
            raise SeqkitError(f"specials={text!r}: each entry is SPECIAL=TOKEN with SPECIAL one of seqkit's "
                              f"{', '.join(SPECIALS)} (got {part!r})")
        out[ours] = token
    if len(set(out.values())) < len(out):
        raise SeqkitError(f"specials={text!r}: one token plays two of seqkit's specials")
    return out


def import_folder(folder: str, output: str, overwrite: bool = False, generator: str = "", specials: str = "",
                  eos_prefix: Optional[bool] = None) -> str:
    """Write the HF model in ``folder`` as the seqkit checkpoint ``output`` (``generator``: an
    ELECTRA discriminator's generator folder; ``specials``: which HF token plays which of seqkit's
    specials, over the family's own choice, :func:`parse_specials`; ``eos_prefix``: a GPT-2 reads
    ``</s>`` before each prompt, None: as config.json says, else not)."""
    import seqkit
    from seqkit.core import checkpoints
    from seqkit.core.registry import MODELS, TASKS

    seqkit.import_builtin_components()
    if os.path.exists(output) and not overwrite:
        raise SeqkitError(f"{output} exists (pass overwrite=true to replace it)")
    chosen = parse_specials(specials)
    config = read_config(folder)
    arch = (config.get("architectures") or [""])[0]
    if arch not in IMPORTS:
        raise SeqkitError(f"{folder}: architecture {arch or '(none named)'!r} is not one seqkit imports "
                          f"(it imports {', '.join(sorted(IMPORTS))})")
    family, task_name = IMPORTS[arch]
    if hasattr(family, "check"):  # a config the family cannot represent: said before anything is read
        family.check(arch, config)
    tok, side = read_tokenizer(folder)
    weights = read_weights(folder)
    specials, rename = specials_of(arch, config, tok, side)
    if chosen:  # the user's choice over the family's: no other special on those tokens
        specials = {**{k: v for k, v in specials.items() if v not in chosen.values()}, **chosen}
    rows = int(config.get("vocab_size") or config.get("tgt_vocab_size") or 0)  # FSMT names its sides
    vocab = VocabMap.from_hf(tok.vocabulary(), rows, specials, rename, last=("<mask>",))
    if generator and family is not electra:
        raise SeqkitError(f"generator= goes with an ELECTRA discriminator, not {arch}")
    extra = {}
    if generator:
        gen_config = read_config(generator)
        if (gen_config.get("architectures") or [""])[0] != electra.GENERATOR:
            raise SeqkitError(f"{generator}: not an {electra.GENERATOR} folder (config.json names "
                              f"{(gen_config.get('architectures') or ['none'])[0]})")
        extra["generator"] = (gen_config, read_weights(generator))
    model_cfg, model_state = family.to_seqkit(arch, config, weights, vocab, **extra)
    model_cfg = to_plain(MODELS.make_config(model_cfg))
    if eos_prefix is not None and family is not gpt2:
        raise SeqkitError(f"eos_prefix= goes with a language model (GPT2LMHeadModel), not {arch}")
    settings = (gpt2.task_settings(model_cfg, arch, config, eos_prefix) if family is gpt2
                else family.task_settings(model_cfg, arch))
    task_cfg = to_plain(TASKS.make_config({"name": task_name, "data": "", **settings}))
    task_state = (family.task_state(vocab, tok, config) if hasattr(family, "task_state")
                  else {"dict": vocab.dictionary.state_dict(), "tokenizer": tok.state_dict()})
    state = {"format": checkpoints.FORMAT_VERSION,
             "cfg": {"common": {}, "task": task_cfg, "model": model_cfg},
             "task_state": task_state,
             "model": model_state, "optimizer": None, "scaler": None,
             "train_state": {"epoch": 1, "num_updates": 0, "batch_offset": 0, "best": None, "bad_validations": 0},
             "rng": None,
             "hf": {"architecture": arch, "config": config, "vocab": vocab.state_dict(), "tokenizer_files": side,
                    "source": os.path.abspath(folder)}}
    _check_loads(state, output, getattr(family, "OPTIONAL_HEADS", ()))
    checkpoints.write([output], state)
    log.info("imported %s (%s, %d tensors) into %s", folder, arch, len(model_state), output)
    return output


def _check_loads(state: Dict[str, Any], output: str, optional: Tuple[str, ...] = ()) -> None:
    """Build the model the checkpoint describes and load its weights (a mismatch is one line). A
    head in ``optional`` the HF model lacks (a ``BertModel``'s masked-LM head) keeps its fresh
    initialization, said in a warning."""
    from seqkit.core.registry import MODELS, TASKS

    task = TASKS.build(TASKS.make_config(state["cfg"]["task"]), state["task_state"])
    model = task.build_model(MODELS.make_config(state["cfg"]["model"]))
    try:
        missing, unexpected = model.load_state_dict(state["model"], strict=False)
    except RuntimeError as e:
        raise SeqkitError(f"{output}: the converted weights do not fit seqkit's model ({str(e).splitlines()[0]})") from None
    fresh = [k for k in missing if k.startswith(optional)]
    if unexpected or len(fresh) < len(missing):
        names = sorted(set(missing) - set(fresh)) + sorted(unexpected)
        raise SeqkitError(f"{output}: the converted weights do not fit seqkit's model ({', '.join(names[:3])})")
    if fresh:
        log.warning("the HuggingFace model has no %s: seqkit's starts untrained (fine-tuning drops it)",
                    ", ".join(sorted({k.split(".")[0] for k in fresh})))
        own = model.state_dict()
        state["model"].update({k: own[k] for k in fresh})


def export_folder(path: str, output: str, overwrite: bool = False, peft: bool = False) -> str:
    """Write the seqkit checkpoint ``path`` as an HF model folder ``output`` (``peft``: a LoRA run as
    a PEFT adapter folder, :mod:`seqkit.hf.lora`)."""
    from seqkit.core import checkpoints
    from seqkit.core.checkpoints import load_for_inference

    state = checkpoints.load(path)
    name = state["cfg"]["model"].get("name")
    if name in NO_COUNTERPART:
        raise SeqkitError(f"{path} holds {NO_COUNTERPART[name]}, which has no HuggingFace counterpart to export to")
    fine_tuned = name in ("pretrained_classifier", "pretrained_tagger")
    if name not in EXPORTS and not fine_tuned:
        raise SeqkitError(f"{path} holds a {name} model; HuggingFace export takes {', '.join(sorted(EXPORTS))} "
                          "and fine-tuned pretrained_classifier / pretrained_tagger models")
    task, model = load_for_inference(path, state=state)
    if getattr(model, "prefix_lm", False):
        raise SeqkitError(f"{path} is a prefix LM (task.prefix_length); transformers' GPT-2 reads every prompt "
                          "causally, so it has no HuggingFace counterpart to export to")
    model_cfg = to_plain(model.cfg)
    if model_cfg.get("pruned_heads"):
        raise SeqkitError(f"{path}: its attention heads were pruned (model.pruned_heads); HuggingFace export takes "
                          "models with the same number of heads in every layer")
    if fine_tuned and model_cfg.get("head", "default") != "default":
        raise SeqkitError(f"{path}: model.head={model_cfg['head']} (a task BiLSTM over the body) has no HuggingFace "
                          "counterpart; HuggingFace export takes the default head")
    if peft and (not fine_tuned or model_cfg.get("adapt") != "lora"):
        raise SeqkitError(f"peft=true takes a model.adapt=lora fine-tuning run; {path} holds "
                          f"{'a ' + name + ' model' if not fine_tuned else 'model.adapt=' + str(model_cfg.get('adapt'))}")
    if fine_tuned:
        hf = heads.base_hf(model_cfg)
        if peft:
            from seqkit.hf.lora import export_peft

            body_dict = body_dictionary(task.src_dict, model_cfg["body"]["vocab_size"])
            export_peft(model_cfg, model, list(task.labels), heads.body_vocab(hf, body_dict), hf.get("architecture", ""),
                        output, _tokenizer_files(task, hf, path, body_dict, _post(model_cfg["body"]["model"])),
                        overwrite)
            log.info("exported %s to %s (a PEFT LoRA adapter, its base in base/)", path, output)
            return output
        model = _merged(model, model_cfg)
        vocab = heads.body_vocab(hf, body_dictionary(task.src_dict, model_cfg["body"]["vocab_size"]))
        config, weights = heads.to_hf(model_cfg, model, list(task.labels), vocab, hf.get("architecture", ""))
        family = EXPORTS[model_cfg["body"]["model"]["name"]]
    else:
        family = EXPORTS[name]
        hf = state.get("hf") or {}
        dictionary = task.tgt_dict if family is seq2seq else task.src_dict
        vocab = VocabMap.from_state_dict(dictionary, hf["vocab"]) if hf else VocabMap.identity(dictionary)
        if family is seq2seq:  # the source side's map too, and the languages
            src_vocab = vocab if task.src_dict == dictionary else VocabMap.identity(task.src_dict)
            if model_cfg.get("relative_buckets"):  # T5's relative positions: T5's class
                if src_vocab is not vocab:
                    raise SeqkitError("T5ForConditionalGeneration has one vocabulary; this model has two dictionaries")
                family = t5
                config, weights = t5.to_hf(model_cfg, model.state_dict(), vocab, hf.get("architecture", ""))
            else:
                config, weights = family.to_hf(model_cfg, model.state_dict(), vocab, hf.get("architecture", ""),
                                               src_vocab, (getattr(task, "source_lang", "src"),
                                                           getattr(task, "target_lang", "tgt")))
        else:
            config, weights = family.to_hf(model_cfg, model.state_dict(), vocab, hf.get("architecture", ""))
    ids = {k: vocab.hf_id(s) for k, s in family.SPECIAL_IDS}
    ids = {k: i for k, i in ids.items() if i >= 0}
    if hf.get("architecture") == config["architectures"][0]:  # an imported model: its other fields as they were
        config = {**ids, **hf["config"], **config}
    else:
        config.update(ids)
    if family is gpt2 and not fine_tuned:  # what the model reads before a prompt, for seqkit-import
        config.pop(gpt2.EOS_PREFIX, None)
        if getattr(task.cfg, "eos_prefix", True):
            config[gpt2.EOS_PREFIX] = True
    config["dtype"] = "float32"
    seq2seq_model = family in (seq2seq, t5) and not fine_tuned
    files = _tokenizer_files(task, hf, path, task.src_dict if seq2seq_model else vocab.dictionary,
                             _post(model_cfg["body"]["model"] if fine_tuned else model_cfg))
    files["README.md"] = model_card(path, state, config)
    subfolders = {}
    if family is electra and not fine_tuned:  # the generator beside the discriminator, in generator/
        gen_config, gen_weights = electra.generator_to_hf(to_plain(model.cfg), model.state_dict(), vocab)
        subfolders["generator"] = ({**gen_config, **ids}, _shared_once(gen_weights))
    generation = None
    if not fine_tuned and family is gpt2:
        generation = {**ids}
    elif not fine_tuned and family in (seq2seq, t5):
        generation = {**ids, "decoder_start_token_id": config["decoder_start_token_id"]}
    write_folder(output, config, _shared_once(weights), files, overwrite, generation_config=generation,
                 subfolders=subfolders)
    log.info("exported %s to %s (%s)", path, output, config["architectures"][0])
    return output


def _post(model_cfg: Dict[str, Any]) -> str:
    """What AutoTokenizer wraps a text in for this model: nothing for a language model's prompt, ``a
    </s>`` for a translation source, ``<s> a </s>`` for an encoder's input."""
    return {"transformer_lm": "none", "transformer": "source"}.get(model_cfg.get("name", ""), "encoder")


def _tokenizer_files(task: Any, hf: Dict[str, Any], path: str, dictionary: Any = None,
                     post: str = "none") -> Dict[str, Any]:
    """tokenizer.json and its side files: an imported model's own, or seqkit's sentencepiece model
    over ``dictionary`` (:mod:`seqkit.hf.spm`; ``post``: what AutoTokenizer wraps a text in)."""
    if task.model_kind == "seq2seq":
        tok = task.tokenizer("src")
        if task.tokenizer("tgt") is not None and task.tgt_dict != task.src_dict:
            log.warning("%s: the target side's tokenizer is not written (an HF folder holds one tokenizer); "
                        "the source side's is", path)
    else:
        tok = task.tokenizer() if hasattr(task, "tokenizer") else None
    if hf.get("architecture") == seq2seq.MARIAN:  # Marian's own files, as they came
        return dict(hf.get("tokenizer_files", {}))
    if tok is not None and getattr(tok, "json", ""):
        return {"tokenizer.json": tok.json, **hf.get("tokenizer_files", {})}
    if tok is not None and (getattr(tok, "model_proto", None) or tok.cfg.name == "wordpiece") and dictionary is not None:
        from seqkit.hf.tokenizer_files import tokenizer_files

        return tokenizer_files(tok, dictionary, post)
    log.warning("%s: the tokenizer (%s) is not written: HuggingFace, sentencepiece and WordPiece tokenizers export", path,
                type(tok).__name__ if tok is not None else "none")
    return {}


def _merged(model: Any, cfg: Dict[str, Any]) -> Any:
    """A fine-tuned model with its LoRA updates merged; adapters and prompts have no HF form."""
    from seqkit.adapt.lora import merge_lora

    if cfg.get("adapt") in ("adapter", "prompt"):
        raise SeqkitError(f"a model.adapt={cfg['adapt']} model has no HuggingFace class (its added modules are not "
                          "BERT's or GPT-2's); LoRA, BitFit, frozen and full fine-tuning export")
    if cfg.get("adapt") == "lora":
        merge_lora(model)
    return model


def _shared_once(weights: Dict[str, Any]) -> Dict[str, Any]:
    """Tied weights stored once (safetensors refuses two names over one storage; HF re-ties on load)."""
    seen: Dict[int, str] = {}
    out = {}
    for k, v in weights.items():
        if id(v) in seen:
            continue
        seen[id(v)] = k
        out[k] = v
    return out
