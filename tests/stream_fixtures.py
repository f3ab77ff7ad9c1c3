"""A tiny corpus with the awkward lines a streamed preprocess must treat as the in-memory one did
(blank and whitespace-only lines, CRLF, a last line without a newline, rare characters, literal
``<unk>``/``</s>`` words), the configs it is preprocessed with, and a digest of an output folder.

``FROZEN`` in tests/test_preprocess_stream.py holds the digests that seqkit at ea5b05f (every line
in memory, each encoded twice) wrote for these configs."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
from typing import Any, Dict, List, Tuple

WORDS = {
    "Ein": "A", "Mann": "man", "Frau": "woman", "Mädchen": "girl", "läuft": "runs", "über": "across",
    "die": "the", "Straße": "street", "grüne": "green", "Bälle": "balls", "schöne": "nice", "trägt": "carries",
    "Hund": "dog", "Katze": "cat", "sieht": "sees", "Haus": "house",
}
RARE = ["ẞ", "Ω", "ø", "ç"]  # a few times each: character_coverage < 1 leaves some out of the model
# keys the tokenizer configs gained after ea5b05f (the digest leaves them out)
NEW_KEYS = {"wordpiece": ("input_sentence_size", "seed")}


def pairs(n: int, seed: int) -> Tuple[List[str], List[str]]:
    rng = random.Random(seed)
    de, en = [], []
    for i in range(n):
        words = [rng.choice(list(WORDS)) for _ in range(rng.randint(1, 8))]
        end = rng.choice([".", "!", "", "?"])
        extra = rng.choice(RARE) if rng.random() < 0.03 else ""
        de.append(" ".join(words) + end + extra)
        en.append(" ".join(WORDS[w] for w in words) + end)
    return de, en


def write(path: str, lines: List[str], gz: bool = False, last_newline: bool = True, crlf_at: int = -1) -> None:
    data = b"".join((line + ("\r\n" if i == crlf_at else "\n")).encode("utf-8") for i, line in enumerate(lines))
    if not last_newline:
        data = data[:-1]
    if gz:
        data, path = gzip.compress(data, mtime=0), path + ".gz"
    with open(path, "wb") as f:
        f.write(data)


def make_raw(root: str, gz_train: bool = False) -> str:
    """train (300 pairs, three with an empty side), valid (30, one empty pair), test (12), and
    monolingual lm.train / lm.valid with blank paragraph lines."""
    os.makedirs(root, exist_ok=True)
    de, en = pairs(300, 0)
    de[5], en[9], de[17], en[17] = "", "  ", "\u3000", "x"
    de[40] = "ein <unk> und </s> Wort"
    en[41] = "\t"
    write(os.path.join(root, "train.de"), de, gz=gz_train, last_newline=False, crlf_at=7)
    write(os.path.join(root, "train.en"), en, gz=gz_train)
    de, en = pairs(30, 1)
    de[3] = en[3] = ""
    write(os.path.join(root, "valid.de"), de)
    write(os.path.join(root, "valid.en"), en)
    de, en = pairs(12, 2)
    write(os.path.join(root, "test.de"), de)
    write(os.path.join(root, "test.en"), en)
    text, _ = pairs(200, 3)
    for i in range(0, 200, 13):
        text[i] = ""
    write(os.path.join(root, "lm.train"), text)
    write(os.path.join(root, "lm.valid"), pairs(20, 4)[0])
    return root


def configs(raw: str) -> Dict[str, Tuple[Dict[str, Any], Dict[str, Any]]]:
    """name -> (PreprocessConfig fields, tokenizer fields): each run covers another path."""
    par = dict(source_lang="de", target_lang="en", trainpref=f"{raw}/train", validpref=f"{raw}/valid",
               testpref=f"{raw}/test")
    return {
        "spm_bpe": ({**par, "workers": 2}, dict(name="sentencepiece_bpe", vocab_size=70, character_coverage=0.995)),
        "wordpiece_separate": ({**par, "joined_dictionary": False, "thresholdsrc": 2, "nwordstgt": 40},
                               dict(name="wordpiece", vocab_size=80)),
        "lm_space": (dict(task="language_modeling", trainpref=f"{raw}/lm.train", validpref=f"{raw}/lm.valid",
                          workers=2), dict(name="space")),
        "mono_unigram_special": (dict(source_lang="de", trainpref=f"{raw}/train", testpref=f"{raw}/test", workers=2),
                                 dict(name="sentencepiece_unigram", vocab_size=50, special_tokens=["Mann"])),
        "char_keep_empty": ({**par, "skip_empty": False, "nwordssrc": 30}, dict(name="char")),
    }


def _strip_new(cfg: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in cfg.items() if k not in NEW_KEYS.get(cfg.get("name"), ())}


def digest(folder: str) -> Dict[str, str]:
    """file name -> sha256 of its bytes; a tokenizer ``.pt`` (torch.save embeds a random id) by its
    loaded content (a sentencepiece model without the temporary paths it was trained from) and
    ``preprocess.json`` by its content, both without ``NEW_KEYS``."""
    import torch

    out = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.endswith(".pt"):
            state = torch.load(path, weights_only=True)
            state = {**state, "config": _strip_new(state["config"])}
            if "model_proto" in state:  # sentencepiece records the trainer's temporary file names
                from sentencepiece import sentencepiece_model_pb2

                proto = sentencepiece_model_pb2.ModelProto()
                proto.ParseFromString(state["model_proto"])
                proto.trainer_spec.ClearField("input")
                proto.trainer_spec.ClearField("model_prefix")
                state["model_proto"] = proto.SerializeToString(deterministic=True)
            data = repr(state).encode()
        elif name == "preprocess.json":
            with open(path, encoding="utf-8") as f:
                meta = json.load(f)
            meta["tokenizer"] = _strip_new(meta["tokenizer"])
            data = json.dumps(meta, indent=2, ensure_ascii=False).encode()
        else:
            with open(path, "rb") as f:
                data = f.read()
        out[name] = hashlib.sha256(data).hexdigest()[:16]
    return out


def assert_same_refusal(tmp_path, task: str, files: Dict[str, Any], over: Dict[str, Any]) -> None:
    """``files`` (name -> text or bytes) written to ``tmp_path/raw``, the training file ``train``, the
    settings ``over`` (a ``*pref`` naming a file there): the streamed preprocess refuses them with the
    in-memory reader's message (the first problem in file order), and nothing is written."""
    import pytest

    from seqkit.core.errors import SeqkitError
    from seqkit.core.registry import TOKENIZERS
    from seqkit.preprocess.labelled import preprocess_in_memory
    from seqkit.preprocess.text import PreprocessConfig, preprocess

    raw = tmp_path / "raw"
    raw.mkdir()
    for name, data in files.items():
        (raw / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    over = {k: str(raw / v) if k.endswith("pref") else v for k, v in over.items()}

    def cfg(dest):
        return PreprocessConfig(task=task, trainpref=str(raw / "train"), destdir=str(tmp_path / dest),
                                tokenizer=TOKENIZERS.make_config({"name": "space"}), **over)

    with pytest.raises(SeqkitError) as old:
        preprocess_in_memory(cfg("old"), cfg("old").tokenizer, str(tmp_path / "old"))
    with pytest.raises(SeqkitError) as new:
        preprocess(cfg("new"))
    assert str(new.value) == str(old.value)
    assert os.listdir(tmp_path) == ["raw"]
