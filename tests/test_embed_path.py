"""Pretrained word vectors into a model's embeddings (model.embed_path, encoder_/decoder_embed_path,
model.freeze_embed; seqkit/models/modules/pretrained_embeddings.py): both file formats, the counts,
Kim's variance-matched init of the rows a file lacks, frozen tables bit-identical after training,
a translation model's two sides, each refusal in one line, a resume that never reads the file, and a
classification task that only the planted vectors solve (sentiment words whose training labels say nothing)."""

import gzip
import json
import random
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from label_fixtures import one_line_error, train_cfg, write_tsv
from seqkit.cli.preprocess import main as preprocess
from seqkit.cli.train import main as train
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.models.modules.pretrained_embeddings import WordTable, apply_word_vectors, load_into
from seqkit.training.trainer import Trainer

VECTORS = {"good": [0.5, -1.0, 2.0], "film": [0.25, 0.0, 1.0], "zebra": [9.0, 9.0, 9.0]}


def write_vectors(path, vectors, header=True, gz=False):
    dim = len(next(iter(vectors.values())))
    lines = ([f"{len(vectors)} {dim}"] if header else []) + [
        w + " " + " ".join(repr(float(x)) for x in v) + " " for w, v in vectors.items()]  # word2vec's trailing space
    text = "\n".join(lines) + "\n"
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def small_dict():
    return Dictionary(["good", "bad", "film"])  # ids 4, 5, 6 after <pad> <s> </s> <unk>


def load(path, dim=3, seed=0):
    d = small_dict()
    emb = nn.Embedding(len(d), dim, padding_idx=d.pad())
    line = load_into(WordTable(emb), str(path), d, "embed_path", torch.Generator().manual_seed(seed))
    return emb.weight.detach(), line


# -- the reader ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("header, gz", [(True, False), (False, False), (True, True)],
                         ids=["word2vec_text", "glove", "word2vec_gz"])
def test_both_formats_fill_the_rows_of_the_dictionary_words(header, gz, tmp_path):
    path = write_vectors(tmp_path / "v.txt", VECTORS, header=header, gz=gz)
    weight, line = load(path)
    assert weight[4].tolist() == [0.5, -1.0, 2.0] and weight[6].tolist() == [0.25, 0.0, 1.0]
    assert weight[0].tolist() == [0.0, 0.0, 0.0]  # padding stays zero
    assert "2 of 3 words found" in line and "(66.7%; 3 vectors of 3 read)" in line


def test_rows_the_file_lacks_get_the_vectors_variance(tmp_path):
    words = [f"w{i}" for i in range(400)]
    d = Dictionary(words)
    g = torch.Generator().manual_seed(1)
    found = {w: (torch.randn(20, generator=g) * 0.5).tolist() for w in words[:200]}
    path = write_vectors(tmp_path / "v.txt", found)
    emb = nn.Embedding(len(d), 20, padding_idx=0)
    nn.init.normal_(emb.weight, std=0.01)  # the model's own init: not kept
    line = load_into(WordTable(emb), str(path), d, "embed_path", torch.Generator().manual_seed(0))
    w = emb.weight.detach()
    loaded = w[4:204]
    missing = torch.cat([w[1:4], w[204:]])  # specials and the 200 words not in the file
    a = (3 * loaded.var(unbiased=False)).sqrt()
    assert missing.abs().max() <= a and abs(missing.var() / loaded.var() - 1) < 0.1
    assert "200 of 400 words found" in line and f"U[-{float(a):.4g}, {float(a):.4g}]" in line


@pytest.mark.parametrize("content, fragment", [
    ("2 4\ngood 1 2 3 4\nfilm 1 2 3 4\n", "holds 4-dimensional vectors, the model's embeddings are 3-dimensional: "
                                         "set model.embed_dim=4"),
    ("good 1 2 3\nfilm 1 2\n", "line 2: 3 fields, expected a word and 3 numbers"),
    ("good 1 x 3\n", "line 1: not a number among the 3 values of 'good'"),
    ("zebra 1 2 3\nlion 3 4 5\n", "none of its 2 words is in the dictionary"),
    ("3 3\ngood 1 2 3\n", "its header announces 3 vectors, it holds 1"),
    ("", "is empty"),
])
def test_bad_files_are_one_line(content, fragment, tmp_path):
    path = tmp_path / "v.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(SeqkitError) as e:
        load(path)
    assert fragment in str(e.value) and "\n" not in str(e.value) and f"model.embed_path={path}" in str(e.value)


def test_tabs_runs_of_spaces_and_words_holding_spaces(tmp_path):
    """Fields split on any whitespace; a line with more fields holds a word with spaces (GloVe 840B
    has some), never a dictionary word: skipped, but counted as read."""
    path = tmp_path / "v.txt"
    path.write_text("good\t0.5 -1  2\nat home 7 7 7\nfilm 0.25 0 1\n", encoding="utf-8")
    weight, line = load(path)
    assert weight[4].tolist() == [0.5, -1.0, 2.0] and weight[6].tolist() == [0.25, 0.0, 1.0]
    assert "2 of 3 words found" in line and "3 vectors of 3 read" in line


@pytest.mark.parametrize("kind", ["missing", "binary", "zip", "damaged_gz"])
def test_files_that_are_not_text_vectors(kind, tmp_path):
    path = tmp_path / "v.bin"
    if kind == "binary":
        path.write_bytes(b"2 3\ngood \x00\x00\x80?\x00\x00\x00@")
    elif kind == "zip":
        path.write_bytes(b"PK\x03\x04rest of an archive")
    elif kind == "damaged_gz":
        data = bytearray(gzip.compress(b"".join(b"w%d 1 2 3\n" % i for i in range(3000))))
        data[len(data) // 2:len(data) // 2 + 64] = bytes(64)  # a damaged stretch of the stream
        path.write_bytes(bytes(data))
    with pytest.raises(SeqkitError, match={"missing": "no such file", "binary": "is binary", "zip": "is a zip archive",
                                           "damaged_gz": "cannot be read to its end"}[kind]):
        load(path)


# -- the hook, on models built directly -------------------------------------------------------------
def test_a_translation_model_fills_its_encoder_and_decoder_sides(tmp_path):
    src, tgt = Dictionary(["haus", "gut"]), Dictionary(["house", "good", "film"])
    enc = write_vectors(tmp_path / "de.txt", {"haus": [1.0] * 8, "gut": [2.0] * 8})
    dec = write_vectors(tmp_path / "en.txt", {"film": [3.0] * 8})
    for name in ("transformer", "rnn"):
        cfg = MODELS.make_config({"name": name, "embed_dim": 8, "encoder_embed_path": str(enc),
                                  "decoder_embed_path": str(dec), "freeze_embed": True,
                                  **({"encoder_layers": 1, "decoder_layers": 1, "ffn_dim": 8, "attention_heads": 2}
                                     if name == "transformer" else {"encoder_hidden": 4, "decoder_hidden": 8})})
        model = MODELS.build(cfg, src, tgt)
        ck = SimpleNamespace(reset=False, save_dir=str(tmp_path / "none"), restore_file=None)
        apply_word_vectors(model, cfg, SimpleNamespace(src_dict=src, tgt_dict=tgt), ck, 1)
        assert model.src_embed.weight[4].tolist() == [1.0] * 8 and model.src_embed.weight[5].tolist() == [2.0] * 8
        assert model.tgt_embed.weight[6].tolist() == [3.0] * 8
        assert not model.src_embed.weight.requires_grad and not model.tgt_embed.weight.requires_grad


@pytest.mark.parametrize("name, fields, fragment", [
    ("rnn", {"share_all_embeddings": True, "decoder_embed_path": "X"},
     "model.decoder_embed_path: the decoder's embeddings are the encoder's (one shared table, share_all_embeddings): "
     "give model.encoder_embed_path only"),
    ("kim_cnn", {"freeze_embed": True}, "model.freeze_embed=true: it freezes the vectors model.embed_path loads, and "
                                        "none is given"),
    ("transformer_lm", {"adaptive_input": True, "adaptive_softmax_cutoff": [5], "share_input_output_embed": False,
                        "layers": 1, "attention_heads": 1, "ffn_dim": 4, "embed_path": "X"},
     "model.embed_path: with model.adaptive_input=true"),
])
def test_settings_a_model_would_not_use_are_refused(name, fields, fragment, tmp_path):
    d = small_dict()
    fields = {k: (str(write_vectors(tmp_path / "v.txt", {"good": [1.0] * 4})) if v == "X" else v)
              for k, v in fields.items()}
    cfg = MODELS.make_config({"name": name, "embed_dim": 4, **fields})
    kind = getattr(MODELS.builder(name), "kind", "seq2seq")
    model = MODELS.build(cfg, d, d) if kind == "seq2seq" else MODELS.build(cfg, d, 2) if kind == "classifier" \
        else MODELS.build(cfg, d)
    ck = SimpleNamespace(reset=False, save_dir=str(tmp_path / "none"), restore_file=None)
    with pytest.raises(SeqkitError) as e:
        apply_word_vectors(model, cfg, SimpleNamespace(src_dict=d, tgt_dict=d), ck, 1)
    assert fragment in str(e.value) and "\n" not in str(e.value)


# -- training: a task only the planted vectors solve --------------------------------------------------
POS_A, NEG_A = ["good", "great", "fine", "nice"], ["bad", "awful", "poor", "dull"]  # each decides its label
POS_B, NEG_B = ["superb", "lovely", "brilliant"], ["dire", "boring", "weak"]  # in training under either label
FILLER = ["the", "film", "was", "a", "plot", "with", "its", "and", "very", "story"]


def rows(rng, n, words_of, label_of):
    """``n`` sentences: fillers around one word of ``words_of(label)``, labelled ``label_of(i, label)``."""
    out = []
    for i in range(n):
        label = rng.choice(["pos", "neg"])
        words = [rng.choice(FILLER) for _ in range(rng.randint(2, 5))]
        words.insert(rng.randint(0, len(words)), rng.choice(words_of(label)))
        out.append((" ".join(words), label_of(i, label)))
    return out


def planted(dim=16, seed=0):
    """Sentiment words at +-3 on the first axis, fillers near 0 there; every other value small noise."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for w in POS_A + POS_B + NEG_A + NEG_B + FILLER:
        v = torch.randn(dim, generator=g) * 0.3
        v[0] = 3.0 if w in POS_A + POS_B else -3.0 if w in NEG_A + NEG_B else 0.0
        out[w] = v.tolist()
    return out


@pytest.fixture(scope="module")
def words(tmp_path_factory):
    root = tmp_path_factory.mktemp("words")
    rng = random.Random(0)
    a_words = lambda label: POS_A if label == "pos" else NEG_A  # noqa: E731
    b_words = lambda label: POS_B if label == "pos" else NEG_B  # noqa: E731
    true, alternate = (lambda i, label: label), (lambda i, _: ["pos", "neg"][i % 2])
    # training: A words with their labels, B words with labels that say nothing; dev: B words, true labels
    train_rows = rows(rng, 160, a_words, true) + rows(rng, 40, b_words, alternate)
    write_tsv(root / "train.tsv", ["sentence", "label"], train_rows)
    write_tsv(root / "dev.tsv", ["sentence", "label"], rows(rng, 40, b_words, true))
    preprocess(["task=classification", f"trainpref={root}/train", f"validpref={root}/dev.tsv",
                f"destdir={root}/bin", "tokenizer=space"])
    return root, write_vectors(root / "vectors.txt", planted())


def embedding_of(trainer):
    return trainer.model.embed.weight.detach().clone()


@pytest.mark.parametrize("freeze", [True, False])
def test_frozen_vectors_stay_bit_identical_and_fine_tuned_ones_move(freeze, words, tmp_path):
    root, vectors = words
    trainer = Trainer(train_cfg(root / "bin", tmp_path / "ck", "classification", "kim_cnn_tiny",
                                f"model.embed_path={vectors}", f"model.freeze_embed={str(freeze).lower()}",
                                "optimization.max_update=2", "dataset.valid_subset=", "checkpoint.no_save=true"))
    before = embedding_of(trainer)
    good = trainer.task.src_dict.index("good")
    assert before[good].tolist() == planted()["good"]
    trainer.run()
    assert trainer.num_updates == 2
    after = embedding_of(trainer)
    assert torch.equal(before, after) if freeze else not torch.equal(before, after)


def test_a_resume_never_reads_the_file_again(words, tmp_path):
    root, vectors = words
    mine = write_vectors(tmp_path / "mine.txt", planted())
    args = [f"model.embed_path={mine}", "model.freeze_embed=true", "dataset.valid_subset="]
    Trainer(train_cfg(root / "bin", tmp_path / "ck", "classification", "kim_cnn_tiny", *args,
                      "optimization.max_update=2")).run()
    mine.write_text("not vectors at all\n", encoding="utf-8")  # read again, it would be refused
    trainer = Trainer(train_cfg(root / "bin", tmp_path / "ck", "classification", "kim_cnn_tiny", *args,
                                "optimization.max_update=3"))
    trainer.run()
    assert trainer.num_updates == 3
    assert embedding_of(trainer)[trainer.task.src_dict.index("superb")].tolist() == planted()["superb"]


def test_planted_vectors_solve_words_training_never_labelled_from_the_shell(words, run_cli, tmp_path):
    """kim_cnn_tiny, frozen planted vectors: dev sentences hold B words, whose training sentences are
    labelled half pos, half neg; their true label comes from their vectors alone (the direction the A
    words teach). With the sentiment words' rows left random (a loader that misses them: a file of the
    fillers only), the same frozen run stays near chance: the second run proves the floor."""
    root, vectors = words
    fillers = write_vectors(tmp_path / "fillers.txt", {w: v for w, v in planted().items() if w in FILLER})
    common = ["task=classification", f"task.data={root / 'bin'}", "model=kim_cnn_tiny", "criterion=cross_entropy",
              "common.threads=1", "common.log_format=json", "optimizer.lr=1e-2", "lr_scheduler=fixed",
              "dataset.max_tokens=256", "optimization.max_update=40", "checkpoint.no_epoch_checkpoints=true"]
    accuracy = {}
    for run, path in (("planted", vectors), ("rand", fillers)):
        save = tmp_path / run
        r = run_cli(train, [*common, f"checkpoint.save_dir={save}", f"model.embed_path={path}",
                            "model.freeze_embed=true"])
        assert r.code == 0, r.err
        with open(save / "train_log.jsonl", encoding="utf-8") as f:
            accuracy[run] = max(rec["accuracy"] for rec in map(json.loads, f) if rec["tag"] == "valid")
        if run == "planted":
            assert "model.embed_path: 24 of 24 words found" in r.err
    assert accuracy["planted"] >= 90 and accuracy["rand"] <= 75, accuracy


@pytest.mark.parametrize("settings, fragment", [
    (["model.freeze_embed=true"], "model.freeze_embed=true: it freezes the vectors model.embed_path loads"),
    (["model.embed_path=VEC", "model.embed_dim=8"], "set model.embed_dim=16"),
    (["model.embed_path=VEC", "checkpoint.restore_file=ANY"], "checkpoint.restore_file=ANY's weights would replace"),
    (["model=convs2s_tiny", "model.embed_path=VEC"], "model.embed_path"),
])
def test_refusals_from_the_shell_are_one_line_and_write_nothing(settings, fragment, words, run_cli, tmp_path):
    root, vectors = words
    settings = [s.replace("VEC", str(vectors)) for s in settings]
    if any(s.startswith("model=convs2s") for s in settings):  # a model without word-vector settings
        base = ["task=translation", f"task.data={root / 'bin'}"]
    else:
        base = ["task=classification", f"task.data={root / 'bin'}", "model=kim_cnn_tiny"]
    r = run_cli(train, [*base, "criterion=cross_entropy", "common.threads=1",
                        f"checkpoint.save_dir={tmp_path / 'ck'}", *settings])
    one_line_error(r, "seqkit-train", fragment, log_lines_allowed=True)
    assert not (tmp_path / "ck").exists()


def test_a_checkpoint_from_before_the_settings_resumes(words, tmp_path):
    """A checkpoint written before model.embed_path existed (its model config lacks the two keys)
    resumes: a field its config lacks counts as that field's default."""
    root, _ = words
    Trainer(train_cfg(root / "bin", tmp_path / "ck", "classification", "kim_cnn_tiny", "dataset.valid_subset=",
                      "optimization.max_update=1")).run()
    last = tmp_path / "ck" / "checkpoint_last.pt"
    state = torch.load(last, weights_only=True)
    for key in ("embed_path", "freeze_embed"):
        del state["cfg"]["model"][key]
    torch.save(state, last)
    trainer = Trainer(train_cfg(root / "bin", tmp_path / "ck", "classification", "kim_cnn_tiny",
                                "dataset.valid_subset=", "optimization.max_update=2"))
    trainer.run()
    assert trainer.num_updates == 2
