"""Tokenizers: learn on a tiny corpus, round-trip through a Dictionary, save/load, frozen pieces."""

import io
import random

import pytest
import torch

from seqkit.core.registry import TOKENIZERS
from seqkit.data.dictionary import Dictionary
from seqkit.tokenizers import load_tokenizer
from seqkit.tokenizers.wordpiece import WordPieceConfig, WordPieceTokenizer, learn_wordpiece, wordpiece_split

WORDS = "Ein Mann Frau Kind Hund läuft spielt über die Straße schöne grüne Bälle Mädchen trägt Hut".split()
NAMES = ["sentencepiece_bpe", "sentencepiece_unigram", "wordpiece", "space"]


def sentences(n=300, seed=0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(2, 8))]
        if rng.random() < 0.3:
            words[-1] += rng.choice([",", "."])  # punctuation glued to a word
        out.append(" ".join(words) + rng.choice([".", "!", "?", ""]))
    return out


def trained(name, tmp_path, lines):
    path = tmp_path / "train.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    cfg = TOKENIZERS.make_config({"name": name, "vocab_size": 40} if name != "space" else {"name": name})
    tok = TOKENIZERS.build(cfg)
    tok.train([str(path)], str(tmp_path))
    return tok


@pytest.mark.parametrize("name", NAMES)
def test_roundtrip_through_dictionary(name, tmp_path):
    lines = sentences()
    tok = trained(name, tmp_path, lines)
    pieces = [tok.encode(line) for line in lines]
    from collections import Counter

    d = Dictionary.build(Counter(p for ps in pieces for p in ps))
    for line, ps in zip(lines, pieces):
        ids = d.encode(ps, append_eos=True)
        assert d.unk() not in ids
        assert tok.decode(d.string(ids)) == line
    if name != "space":  # subwords: fewer types than words in the text
        assert len({p for ps in pieces for p in ps}) <= 40


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_reload_gives_same_encodings(name, tmp_path):
    lines = sentences()
    tok = trained(name, tmp_path, lines)
    state = tok.state_dict()
    assert state["config"]["name"] == name
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    loaded = load_tokenizer(torch.load(buf, weights_only=True))  # bytes and plain data only
    assert type(loaded) is type(tok)
    text = "Ein Mädchen trägt grüne Bälle über die Straße."
    for line in lines[:50] + [text]:
        assert loaded.encode(line) == tok.encode(line)


def test_load_tokenizer_from_file(tmp_path):
    tok = trained("sentencepiece_bpe", tmp_path, sentences())
    torch.save(tok.state_dict(), tmp_path / "tok.pt")
    assert isinstance(tok.state_dict()["model_proto"], bytes)
    assert load_tokenizer(str(tmp_path / "tok.pt")).encode("Ein Hund") == tok.encode("Ein Hund")


def test_sentencepiece_training_is_deterministic(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = trained("sentencepiece_unigram", tmp_path / "a", sentences())
    b = trained("sentencepiece_unigram", tmp_path / "b", sentences())
    assert a.vocab_pieces() == b.vocab_pieces()
    assert a.state_dict()["model_proto"] == b.state_dict()["model_proto"]  # no work-folder path inside
    assert a.encode("Ein Mann") == ["▁Ein", "▁", "M", "a", "n", "n"]  # frozen (sentencepiece 0.2)


def test_sentencepiece_vocab_too_large_is_one_line_error(tmp_path):
    from seqkit.core.errors import SeqkitError

    path = tmp_path / "t.txt"
    path.write_text("ab ba\n" * 10, encoding="utf-8")
    tok = TOKENIZERS.build(TOKENIZERS.make_config({"name": "sentencepiece_unigram", "vocab_size": 500}))
    with pytest.raises(SeqkitError, match="Vocabulary size too high"):
        tok.train([str(path)], str(tmp_path))


def test_wordpiece_learning_frozen():
    # the Hugging Face course example; ties go to the lowest symbol ids (alphabet sorted first)
    counts = {"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}
    vocab = learn_wordpiece(counts, vocab_size=12, min_frequency=1, score_by="likelihood")
    assert vocab == ["##g", "##n", "##s", "##u", "b", "h", "p", "##gs", "##ug", "##un", "##ugs", "hugs"]
    # by frequency (the default): ##u ##g (20 times), ##u ##n (16), h ##ug (15), p ##un (12), p ##ug (5)
    assert learn_wordpiece(counts, vocab_size=12, min_frequency=1)[7:] == ["##ug", "##un", "hug", "pun", "pug"]


def test_wordpiece_greedy_longest_match_frozen():
    vocab = {"un", "u", "##aff", "##a", "##able", "##ab", "##le", "#", "###", "##x", "x", "Fr", "##u", "##.", "##ü"}
    cases = {
        "unaffable": ["un", "##aff", "##able"],
        "unable": ["un", "##able"],
        "Frau.": ["Fr", "##a", "##u", "##."],
        "##x": ["#", "###", "##x"],  # a word-initial piece never starts with "##"
        "unq": ["<unk>"],  # "q" is not covered: the whole word is unknown
    }
    for word, expected in cases.items():
        assert wordpiece_split(word, vocab, max_len=5) == expected
    assert wordpiece_split("u" * 101, vocab, max_len=5, max_chars=100) == ["<unk>"]

    tok = WordPieceTokenizer(WordPieceConfig())
    tok.set_vocab(sorted(vocab))
    expected = ["un", "##able", "#", "###", "##x", "Fr", "##a", "##u", "##.", "<unk>"]
    assert tok.encode(" unable  ##x Frau. unq") == expected
    assert tok.decode(tok.encode("unable ##x Frau.")) == "unable ##x Frau."


def test_wordpiece_unseen_character_is_unk(tmp_path):
    tok = trained("wordpiece", tmp_path, sentences())
    assert tok.encode("Ein Mann€ Hund") == [*tok.encode("Ein"), "<unk>", *tok.encode("Hund")]
    d = Dictionary(["Ein"])
    assert d.encode(["<unk>"], append_eos=False) == [d.unk()]


def test_registry_names_and_defaults():
    choices = TOKENIZERS.choices()
    for name in NAMES:
        assert choices[name].name == name
    assert choices["sentencepiece_bpe"].vocab_size == 8000
    assert choices["wordpiece"].max_input_chars_per_word == 100
