"""Tiny synthetic classification and tagging data, and module-scoped data folders and checkpoints
built from it, shared by tests/test_classification*.py (imported there; conftest puts this folder
on sys.path)."""

import json
import random

import pytest
from omegaconf import OmegaConf

import seqkit
from seqkit.cli.common import ConfigBuilder
from seqkit.cli.preprocess import main as preprocess
from seqkit.core.registry import TASKS
from seqkit.training.config import TrainConfig
from seqkit.training.trainer import Trainer

seqkit.import_builtin_components()


# -- synthetic data ------------------------------------------------------------------------------------
# the label of a sentence is the kind of its one sentiment word, so a few updates already learn something
SENTIMENT = {"neg": ["bad", "awful", "dull", "poor"], "neu": ["okay", "average", "fine"],
             "pos": ["good", "great", "lovely", "superb"]}
FILLER = ["the", "film", "was", "a", "story", "with", "very", "plot", "actors", "and", "its"]
MRPC_HEADER = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
MRPC_COLUMNS = 'text_columns=["#1 String","#2 String"]'
# CoNLL-2003 columns: word, POS, chunk, NER tag (BIO); multi-word entities and long words that a
# small BPE vocabulary splits into many pieces
ENTITIES = [(["Peter", "Blackburn"], "PER"), (["Johannesburg"], "LOC"), (["Amsterdam"], "LOC"),
            (["Microsoft"], "ORG"), (["European", "Commission"], "ORG")]
TAG_FILLER = ["the", "said", "in", "visited", "today", "and", "met", "."]
DOCSTART = "-DOCSTART- -X- -X- O"


def sentence(rng, label):
    words = [rng.choice(FILLER) for _ in range(rng.randint(2, 6))]
    words.insert(rng.randint(0, len(words)), rng.choice(SENTIMENT[label]))
    return " ".join(words)


def single_rows(n, seed):
    rng = random.Random(seed)
    return [(sentence(rng, label), label) for label in (rng.choice(sorted(SENTIMENT)) for _ in range(n))]


def pair_rows(n, seed):
    """(first, second, quality): quality 1 when both sentences have the same polarity."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.choice(["neg", "pos"]), rng.choice(["neg", "pos"])
        rows.append((sentence(rng, a), sentence(rng, b), "1" if a == b else "0"))
    return rows


def write_tsv(path, header, rows, bom=False):
    text = "\t".join(header) + "\n" + "".join("\t".join(r) + "\n" for r in rows)
    path.write_text(("\ufeff" if bom else "") + text, encoding="utf-8")


def mrpc_rows(rows):
    return [(q, str(2 * i), str(2 * i + 1), a, b) for i, (a, b, q) in enumerate(rows)]


def tagged_sentences(n, seed):
    """[(words, tags)]: filler words around one entity."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(TAG_FILLER) for _ in range(rng.randint(2, 5))]
        tags = ["O"] * len(words)
        entity, kind = rng.choice(ENTITIES)
        at = rng.randint(0, len(words))
        words[at:at] = entity
        tags[at:at] = ["B-" + kind] + ["I-" + kind] * (len(entity) - 1)
        out.append((words, tags))
    return out


def write_conll(path, sents, columns=4, docstart_every=4):
    """CoNLL-2003 layout with -DOCSTART- lines, 4 columns (word POS chunk NER) or 1 (the words only);
    returns the line number of each sentence's first token."""
    lines, starts = [DOCSTART, ""], []
    for i, (words, tags) in enumerate(sents):
        if i and i % docstart_every == 0:
            lines += [DOCSTART, ""]
        starts.append(len(lines) + 1)
        for w, t in zip(words, tags):
            lines.append(f"{w} NN I-NP {t}" if columns == 4 else w)
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return starts


BEST_BY_ACCURACY = ["optimization.max_epoch=4", "dataset.max_tokens=64", "checkpoint.best_checkpoint_metric=accuracy"]


def spm(vocab_size=60):
    return ["tokenizer=sentencepiece_bpe", f"tokenizer.vocab_size={vocab_size}", "tokenizer.num_threads=1"]


def train_cfg(data, save_dir, task, model, *extra):
    overrides = [f"task={task}", f"task.data={data}", f"model={model}", "criterion=cross_entropy",
                 f"checkpoint.save_dir={save_dir}", "common.threads=1", "common.log_format=json",
                 "dataset.max_tokens=512", "optimizer.lr=1e-2", "lr_scheduler=fixed", *extra]
    return OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(overrides))


def valid_records(save_dir):
    with open(save_dir / "train_log.jsonl", encoding="utf-8") as f:
        return [r for r in map(json.loads, f) if r["tag"] == "valid"]


def load_task(name, data):
    return TASKS.build(TASKS.make_config({"name": name, "data": str(data)}))


def one_line_error(r, prog, *fragments, log_lines_allowed=False):
    """Exit 1, no traceback, one ``prog: error:`` line holding every fragment (after log lines, if allowed)."""
    assert r.code == 1, f"exit code {r.code}; stderr:\n{r.err}"
    assert "Traceback" not in r.err, r.err
    lines = r.messages if log_lines_allowed else r.err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{r.err}"
    assert lines[0].startswith(f"{prog}: error: ") and r.err.strip().splitlines()[-1] == lines[0], r.err
    for f in fragments:
        assert f in lines[0], f"{f!r} not in {lines[0]!r}"
    return lines[0]


# -- shared data folders and checkpoints (module scope: built once, read-only) ---------------------------
@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """Single sentences, 3 labels; test.tsv has no label column (GLUE's test layout)."""
    root = tmp_path_factory.mktemp("single")
    rows = {"train": single_rows(90, 0), "dev": single_rows(15, 1), "test": single_rows(6, 2)}
    write_tsv(root / "train.tsv", ["sentence", "label"], rows["train"])
    write_tsv(root / "dev.tsv", ["sentence", "label"], rows["dev"])
    write_tsv(root / "test.tsv", ["index", "sentence"], [(str(i), s) for i, (s, _) in enumerate(rows["test"])])
    preprocess(["task=classification", f"trainpref={root}/train", f"validpref={root}/dev.tsv",
                f"testpref={root}/test", f"destdir={root}/bin", *spm()])
    return root, rows


@pytest.fixture(scope="module")
def single_ckpt(single):
    """cbow_tiny, 4 epochs of 17 updates, checkpoint_best by validation accuracy (which here goes
    up, then down in the last epoch)."""
    root, _ = single
    save_dir = root / "ck"
    Trainer(train_cfg(root / "bin", save_dir, "classification", "cbow_tiny", *BEST_BY_ACCURACY,
                      "checkpoint.maximize_best_checkpoint_metric=true")).run()
    return save_dir


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """MRPC's layout: a BOM before the header, label column Quality, text in '#1 String'/'#2 String'."""
    root = tmp_path_factory.mktemp("pairs")
    rows = {"train": pair_rows(60, 0), "dev": pair_rows(12, 1), "test": pair_rows(5, 2)}
    write_tsv(root / "train.tsv", MRPC_HEADER, mrpc_rows(rows["train"]), bom=True)
    write_tsv(root / "dev.tsv", MRPC_HEADER, mrpc_rows(rows["dev"]), bom=True)
    write_tsv(root / "test.tsv", ["index"] + MRPC_HEADER[1:], mrpc_rows(rows["test"]), bom=True)  # no Quality
    preprocess(["task=classification", f"trainpref={root}/train", f"validpref={root}/dev", f"testpref={root}/test",
                f"destdir={root}/bin", MRPC_COLUMNS, "label_column=Quality", *spm()])
    return root, rows


@pytest.fixture(scope="module")
def pairs_ckpt(pairs):
    """transformer_classifier_tiny (it reads the segments), a few updates."""
    root, _ = pairs
    save_dir = root / "ck"
    Trainer(train_cfg(root / "bin", save_dir, "classification", "transformer_classifier_tiny",
                      "optimization.max_update=6", "model.dropout=0")).run()
    return save_dir


@pytest.fixture(scope="module")
def tagged(tmp_path_factory):
    """CoNLL-2003 columns; test.conll holds the words only (a split to predict)."""
    root = tmp_path_factory.mktemp("tagged")
    sents = {"train": tagged_sentences(60, 0), "dev": tagged_sentences(8, 1), "test": tagged_sentences(4, 2)}
    write_conll(root / "train.conll", sents["train"])
    write_conll(root / "dev.conll", sents["dev"])
    write_conll(root / "test.conll", sents["test"], columns=1)
    preprocess(["task=tagging", f"trainpref={root}/train", f"validpref={root}/dev", f"testpref={root}/test",
                f"destdir={root}/bin", *spm(40)])
    return root, sents


@pytest.fixture(scope="module")
def tagged_ckpt(tagged):
    root, _ = tagged
    save_dir = root / "ck"
    Trainer(train_cfg(root / "bin", save_dir, "tagging", "bilstm_tagger_tiny", "optimization.max_epoch=3",
                      "dataset.max_tokens=128", "optimizer.lr=3e-2", "checkpoint.best_checkpoint_metric=f1",
                      "checkpoint.maximize_best_checkpoint_metric=true")).run()
    return save_dir


def tiny_translation(data, save_dir, tiny_train_args, *extra):
    """checkpoint_last.pt of one update of the tiny Transformer (or ``extra``'s model) on ``data``."""
    Trainer(OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(
        [f"task.data={data}", f"checkpoint.save_dir={save_dir}", "optimization.max_update=1",
         "dataset.valid_subset=", *tiny_train_args, *extra]))).run()
    return save_dir / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def translation_ckpt(toy_data, tmp_path_factory, tiny_train_args):
    return tiny_translation(toy_data[1], tmp_path_factory.mktemp("mt") / "ck", tiny_train_args)


