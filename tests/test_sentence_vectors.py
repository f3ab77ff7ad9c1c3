"""Sentence vectors from context (issue 61): WikiText sentence splitting, the sentence-order data
(neighbours never cross a document), the skip-thought and quick-thought losses on tiny batches,
seqkit-embed end to end after a skip-thought run from the shell (nearest sentences of a corpus
with obvious topics), its poolings on another checkpoint, and its refusals, each one line with
nothing written."""

import math
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import seqkit
from seqkit.analysis.sentence_vectors import EmbedConfig
from seqkit.cli.embed import main as embed
from seqkit.core.checkpoints import load_for_inference
from seqkit.criteria.sentence_vectors import quick_thought_terms
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.data.sentence_order import QuickThoughtDataset, SkipThoughtDataset, wikitext_sentences
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers.space import SpaceConfig

from label_fixtures import one_line_error
from transfer_fixtures import trainer_for

seqkit.import_builtin_components()
TOPICS = {"animals": "cat dog bird fish".split(), "colours": "red blue green pink".split(),
          "numbers": "one two three four".split()}


def topic_documents(n_docs, seed):
    """Documents of 3-6 sentences, each document's words from one topic (topics in turn)."""
    rng = random.Random(seed)
    docs = []
    for i in range(n_docs):
        words = list(TOPICS.values())[i % 3]
        docs.append([" ".join(rng.choice(words) for _ in range(rng.randint(3, 6))) + " ."
                     for _ in range(rng.randint(3, 6))])
    return docs


def write_docs(path, docs):
    path.write_text("\n\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")


def binarize(root, train_docs, valid_docs=None):
    write_docs(root / "train.txt", train_docs)
    valid = None
    if valid_docs is not None:
        write_docs(root / "valid.txt", valid_docs)
        valid = str(root / "valid.txt")
    preprocess(PreprocessConfig(task="language_modeling", trainpref=str(root / "train.txt"), validpref=valid,
                                destdir=str(root / "bin"), tokenizer=SpaceConfig()))
    return root / "bin"


@pytest.fixture(scope="module")
def topics(tmp_path_factory):
    """A folder of 45 topic documents (valid: 6), its sentences one per line (the corpus searched)."""
    root = tmp_path_factory.mktemp("topics")
    train = topic_documents(45, seed=1)
    binarize(root, train, topic_documents(6, seed=2))
    (root / "sentences.txt").write_text("\n".join(s for d in train[:12] for s in d) + "\n", encoding="utf-8")
    return root


def train_run(data, save, task, *extra):
    trainer_for([f"task={task}", f"task.data={data}", f"model={task}_tiny", f"criterion={task}",
                 f"checkpoint.save_dir={save}", "optimizer.lr=0.01", *extra]).run()
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def checkpoints(topics, tmp_path_factory):
    """Two-update skip-thought, quick-thought and GPT runs on the topic folder."""
    out = {task: train_run(topics / "bin", tmp_path_factory.mktemp(task), task, "optimization.max_update=2")
           for task in ("skip_thought", "quick_thought")}
    save = tmp_path_factory.mktemp("gpt")
    trainer_for(["task=language_modeling", "model=gpt_tiny", f"task.data={topics / 'bin'}", "task.tokens_per_sample=24",
                 "optimization.max_update=1", f"checkpoint.save_dir={save}"]).run()
    out["gpt"] = save / "checkpoint_last.pt"
    return out


# -- text and data ------------------------------------------------------------------------------------
def test_wikitext_sentences_cut_at_sentence_ends_and_articles():
    lines = [" ", " = Valkyria = ", " ", " The game began in 2010 . It sold 1 @.@ 5 million ! Why ? ", " ",
             " = = Plot = = ", " ", " The U.S. story runs on . No end", " Key : W ", " = Wins ; L = ", " Losses . ",
             " ", " = Tower = ", " ", " Built in 1889 . "]
    assert list(wikitext_sentences(lines)) == [
        "The game began in 2010 .", "It sold 1 @.@ 5 million !", "Why ?", "The U.S. story runs on .", "No end",
        "Key : W", "= Wins ; L =", "Losses .",  # a table legend between lines of text is text, not a title
        "", "Built in 1889 ."]


@pytest.fixture(scope="module")
def boundaries(tmp_path_factory):
    """Documents a (3 sentences), b (2), then two empty lines, c (4): sentence positions 0-8."""
    root = tmp_path_factory.mktemp("boundaries")
    (root / "train.txt").write_text("a1 .\na2 .\na3 .\n\nb1 .\nb2 .\n\n\nc1 .\nc2 .\nc3 .\nc4 .\n", encoding="utf-8")
    preprocess(PreprocessConfig(task="language_modeling", trainpref=str(root / "train.txt"),
                                destdir=str(root / "bin"), tokenizer=SpaceConfig()))
    return IndexedDataset(str(root / "bin" / "train.text")), Dictionary.load(str(root / "bin" / "dict.text.txt"))


def words(d, row):
    return " ".join(d.string(row))


def test_skip_thought_triples_stay_inside_documents(boundaries):
    data, d = boundaries
    ds = SkipThoughtDataset(data, d)
    sample = ds.collate(range(len(ds)))
    triples = [(words(d, t[0]), words(d, s), words(d, t[1]))
               for s, t in zip(sample["net_input"]["src_tokens"], sample["target"])]
    assert triples == [("a1 .", "a2 .", "a3 ."), ("c1 .", "c2 .", "c3 ."), ("c2 .", "c3 .", "c4 .")]
    prev = sample["net_input"]["prev_output_tokens"]  # (B, 2, T): <s> then the target shifted right
    target = sample["target"]
    assert prev.shape == target.shape == (3, 2, 3)
    assert (prev[:, :, 0] == d.bos()).all() and torch.equal(prev[:, :, 1:], target[:, :, :-1])
    assert (target[:, :, -1] == d.eos()).all() and sample["ntokens"] == 18


def test_quick_thought_targets_are_neighbours_in_one_document(boundaries):
    data, d = boundaries
    ds = QuickThoughtDataset(data, d)
    sample = ds.collate([1, 2, 3, 4, 5])  # a2 a3 | b1 b2 | c1
    assert sample["target"].int().tolist() == [[0, 1, 0, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 1, 0],
                                               [0, 0, 1, 0, 0], [0, 0, 0, 0, 0]]
    assert sample["sample_size"] == 4
    runs = ds.batches(max_tokens=1000, max_sentences=4, shuffle=False, exclude=np.array([2]))
    assert [r.tolist() for r in runs] == [[0, 1, 3, 4], [5, 6, 7, 8]]
    assert not ds.targets(np.array([1, 3]))[0, 1]  # a2 and b1 are adjacent in the batch, not in the text
    assert sorted(np.concatenate(ds.batches(1000, 4, seed=1, epoch=1)).tolist()) == list(range(9))


# -- the losses ----------------------------------------------------------------------------------------
def test_skip_thought_loss_is_both_decoders_cross_entropy(boundaries):
    from seqkit.criteria.sentence_vectors import SkipThoughtCriterion, SkipThoughtLossConfig
    from seqkit.models.skip_thought import SkipThoughtModel, skip_thought_tiny
    from seqkit.tasks.sentence_order import SkipThoughtTask

    data, d = boundaries
    torch.manual_seed(0)
    model = SkipThoughtModel(skip_thought_tiny(), d).eval()
    task = SkipThoughtTask.__new__(SkipThoughtTask)
    task.dictionary = d
    sample = SkipThoughtDataset(data, d).collate([0, 1, 2])
    loss, n, logs = SkipThoughtCriterion(SkipThoughtLossConfig(), task)(model, sample)
    with torch.no_grad():
        logits = model(**sample["net_input"])  # (B, 2, T, V)
    by_side = [F.cross_entropy(logits[:, i].reshape(-1, len(d)), sample["target"][:, i].reshape(-1),
                               ignore_index=d.pad(), reduction="sum") for i in range(2)]
    loss = float(loss.detach())
    assert loss == pytest.approx(float(sum(by_side)), rel=1e-6)
    assert float(logs["prev_nll"]) == pytest.approx(float(by_side[0]), rel=1e-6)
    assert n == 18 and int(logs["prev_tokens"]) == int(logs["next_tokens"]) == 9
    assert len(d) == 16 and loss == pytest.approx(49.8981, abs=1e-3)  # frozen: seed 0, skip_thought_tiny
    net = sample["net_input"]
    assert model.sentence_vectors(net["src_tokens"], net["src_lengths"]).shape == (3, 24)  # both directions of 12


def test_quick_thought_loss_by_hand():
    f = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    g = torch.tensor([[0.5, 0.0], [1.0, 2.0], [0.0, -1.0]])
    target = torch.tensor([[0, 1, 0], [1, 0, 1], [0, 1, 0]], dtype=torch.bool)  # a chain 0 - 1 - 2
    nll, correct, rows = quick_thought_terms(f, g, target)
    s = (f @ g.t()).tolist()  # the scores; a sentence is never its own candidate

    def logp(r, c):
        return s[r][c] - math.log(sum(math.exp(s[r][j]) for j in range(3) if j != r))

    assert float(nll) == pytest.approx(-(logp(0, 1) + logp(1, 0) + logp(1, 2) + logp(2, 1)), rel=1e-6)
    # scores [[., 1, 0], [0, ., -1], [0.5, 3, .]]: 0.3133 + (0.3133 + 1.3133) + 0.0789
    assert float(nll) == pytest.approx(2.018675, abs=1e-5)
    # the best candidate of each row (1; 0; 1) is a neighbour
    assert (int(correct), int(rows)) == (3, 3)
    nll, correct, rows = quick_thought_terms(f[:1], g[:1], torch.zeros(1, 1, dtype=torch.bool))
    assert float(nll) == 0 and int(rows) == 0  # a batch of one sentence: no candidate, nothing scored, finite


# -- seqkit-embed ---------------------------------------------------------------------------------------
def test_skip_thought_from_the_shell_then_nearest_sentences(topics, tmp_path, run_cli):
    from seqkit.cli.train import main as train

    save = tmp_path / "st"
    r = run_cli(train, ["task=skip_thought", f"task.data={topics / 'bin'}", "model=skip_thought_tiny",
                        "criterion=skip_thought", f"checkpoint.save_dir={save}", "optimization.max_update=6",
                        "optimizer.lr=0.01", "lr_scheduler=fixed", "dataset.max_tokens=256", "common.threads=1",
                        "common.log_format=json"])
    assert r.code == 0, r.err
    ck = save / "checkpoint_last.pt"
    r = run_cli(embed, [f"path={ck}", f"input={topics / 'sentences.txt'}", f"output={tmp_path / 'v.npy'}"])
    assert r.code == 0, r.err
    vectors = np.load(tmp_path / "v.npy")
    lines = (topics / "sentences.txt").read_text(encoding="utf-8").splitlines()
    assert vectors.shape == (len(lines), 24) and vectors.dtype == np.float32
    queries = tmp_path / "queries.txt"
    queries.write_text(f"{lines[4]}\ndog cat cat fish bird .\npink red red green .\nfour one three one .\n",
                       encoding="utf-8")
    r = run_cli(embed, [f"path={ck}", f"queries={queries}", f"corpus={topics / 'sentences.txt'}", "k=3"])
    assert r.code == 0, r.err
    out = [line.split("\t") for line in r.out.splitlines()]
    assert [row[0] for row in out] == ["Q-0"] + ["N-0"] * 3 + ["Q-1"] + ["N-1"] * 3 + ["Q-2"] + ["N-2"] * 3 + \
        ["Q-3"] + ["N-3"] * 3
    assert out[1][1:] == ["1.0000", "5", lines[4]]  # a corpus sentence finds itself first
    for q, topic in ((1, "animals"), (2, "colours"), (3, "numbers")):
        hits = out[4 * q + 1: 4 * q + 4]
        scores = [float(h[1]) for h in hits]
        assert scores == sorted(scores, reverse=True)
        assert all(set(h[3].split()[:-1]) <= set(TOPICS[topic]) for h in hits), (topic, hits)
        assert all(lines[int(h[2]) - 1] == h[3] for h in hits)


def test_quick_thought_vector_is_f_then_g(checkpoints, topics, tmp_path, run_cli):
    r = run_cli(embed, [f"path={checkpoints['quick_thought']}", f"input={topics / 'sentences.txt'}",
                        f"output={tmp_path / 'q.npy'}", "batch_size=5"])
    assert r.code == 0, r.err
    task, model = load_for_inference(str(checkpoints["quick_thought"]))
    first = (topics / "sentences.txt").read_text(encoding="utf-8").splitlines()[0]
    ids = torch.tensor([task.encode_sentence(first)])
    with torch.no_grad():
        out = model.eval()(ids, torch.tensor([ids.size(1)]))
    want = torch.cat([out["f"], out["g"]], dim=1)[0].numpy()  # (2D,)
    assert np.allclose(np.load(tmp_path / "q.npy")[0], want, atol=1e-6)


def test_embeddings_and_mean_pooling_of_a_language_model(checkpoints, topics, tmp_path, run_cli):
    ck = checkpoints["gpt"]
    task, model = load_for_inference(str(ck))
    model.eval()
    sentence = "red blue blue ."
    (tmp_path / "in.txt").write_text(sentence + "\n", encoding="utf-8")
    for pooling in ("embeddings", "mean"):
        r = run_cli(embed, [f"path={ck}", f"input={tmp_path / 'in.txt'}", f"output={tmp_path / pooling}.npy",
                            f"pooling={pooling}"])
        assert r.code == 0, r.err
    d = task.dictionary
    ids = torch.tensor([d.index(w) for w in sentence.split()])
    with torch.no_grad():
        table = model.embed(ids).mean(0)  # the mean of the pieces' input embeddings, no specials
        full = torch.tensor([[d.bos(), *ids.tolist(), d.eos()]])
        ctx = model.transfer_features(full, torch.tensor([full.size(1)]))[0].mean(0)
    assert np.allclose(np.load(tmp_path / "embeddings.npy")[0], table.numpy(), atol=1e-6)
    assert np.allclose(np.load(tmp_path / "mean.npy")[0], ctx.numpy(), atol=1e-5)


def _files(tmp_path):
    (tmp_path / "ok.txt").write_text("cat dog .\nred blue .\n", encoding="utf-8")
    (tmp_path / "blank.txt").write_text("cat dog .\n\nred .\n", encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 .\n".encode("latin-1"))


@pytest.mark.parametrize("ck, settings, fragments", [
    (None, ["input=ok.txt", "output=out.npy"], ["path=CHECKPOINT is required"]),
    ("skip_thought", [], ["nothing to do"]),
    ("skip_thought", ["input=ok.txt"], ["needs output=FILE.npy"]),
    ("skip_thought", ["input=ok.txt", "output=out.npy", "query=cat ."], ["input= and query="]),
    ("skip_thought", ["query=cat .", "queries=ok.txt", "corpus=ok.txt"], ["query= and queries= both given"]),
    ("skip_thought", ["query=cat ."], ["query= needs corpus=FILE"]),
    ("skip_thought", ["input=ok.txt", "output=out.npy", "k=3"], ["k: seqkit-embed with input= does not read it"]),
    ("skip_thought", ["query=cat .", "corpus=ok.txt", "output=out.npy"], ["output: seqkit-embed with a query"]),
    ("skip_thought", ["input=missing.txt", "output=out.npy"], ["file not found", "missing.txt"]),
    ("skip_thought", ["input=latin1.txt", "output=out.npy"], ["latin1.txt:1: not valid UTF-8"]),
    ("skip_thought", ["input=blank.txt", "output=out.npy"], ["blank.txt:2: empty line"]),
    ("skip_thought", ["query=cat .", "corpus=ok.txt", "k=3"], ["k=3 is above", "2 sentences", "at most k=2"]),
    ("skip_thought", ["input=ok.txt", "output=out.npy", "pooling=mean"], ["pooling=mean", "pooling=auto gives"]),
    ("gpt", ["input=ok.txt", "output=out.npy"], ["no sentence vectors of its own", "pooling=embeddings"]),
])
def test_refusals(ck, settings, fragments, checkpoints, tmp_path, run_cli, monkeypatch):
    _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    path = [f"path={checkpoints[ck]}"] if ck else []
    r = run_cli(embed, [*path, *settings])
    one_line_error(r, "seqkit-embed", *fragments, log_lines_allowed=True)
    assert not (tmp_path / "out.npy").exists() and not r.out


def test_settings_used_or_refused(checkpoints, tmp_path, run_cli, monkeypatch):
    """Every setting of seqkit-embed, walked in both modes: read, or refused in one line naming it."""
    from test_settings_walk import walk

    _files(tmp_path)
    ck = checkpoints["skip_thought"]
    for base in ([f"path={ck}", f"input={tmp_path / 'ok.txt'}", f"output={tmp_path / 'out.npy'}"],
                 [f"path={ck}", "query=cat .", f"corpus={tmp_path / 'ok.txt'}", "k=2"]):
        assert walk(run_cli, monkeypatch, embed, "seqkit-embed", "embed", EmbedConfig, base, tmp_path) == []


def test_a_sentence_past_the_positions_is_refused_or_truncated(checkpoints, tmp_path, run_cli):
    ck = checkpoints["skip_thought"]  # skip_thought_tiny: 256 positions, the final </s> included
    words = ["cat", "dog", "bird", "fish"] * 80  # 320 words
    (tmp_path / "long.txt").write_text(" ".join(words) + "\n" + " ".join(words[:255]) + "\n", encoding="utf-8")
    r = run_cli(embed, [f"path={ck}", f"input={tmp_path / 'long.txt'}", f"output={tmp_path / 'v.npy'}"])
    one_line_error(r, "seqkit-embed", "long.txt:1: 321 tokens, above the model's 256 positions", "truncate=true",
                   log_lines_allowed=True)
    assert not (tmp_path / "v.npy").exists()
    r = run_cli(embed, [f"path={ck}", f"input={tmp_path / 'long.txt'}", f"output={tmp_path / 'v.npy'}",
                        "truncate=true"])
    assert r.code == 0, r.err
    v = np.load(tmp_path / "v.npy")
    assert np.allclose(v[0], v[1], atol=1e-6)  # the first 255 words and </s>, as the second line reads


@pytest.mark.parametrize("task", ["sst2", "rte"])
def test_frozen_eval_chooses_on_the_carve_and_scores_dev(task, checkpoints, tmp_path, capsys):
    import importlib.util
    import json
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "examples" / "sentence_vectors" / "frozen_eval.py"
    spec = importlib.util.spec_from_file_location("frozen_eval", script)
    frozen_eval = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(frozen_eval)
    rng = random.Random(5)

    def sentence(topic):
        return " ".join(rng.choice(TOPICS[topic]) for _ in range(rng.randint(3, 6))) + " ."

    for split, n in (("train", 60), ("dev", 12)):
        rows = []
        for i in range(n):
            topic = ["animals", "colours"][i % 2]
            rows.append(f"{sentence(topic)}\t{i % 2}" if task == "sst2" else
                        f"{i}\t{sentence(topic)}\t{sentence(rng.choice(['animals', 'colours']))}\t{'ab'[i % 2]}")
        head = "sentence\tlabel" if task == "sst2" else "index\tsentence1\tsentence2\tlabel"
        (tmp_path / f"{split}.tsv").write_text(head + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    row = frozen_eval.main([str(checkpoints["skip_thought"]), task, str(tmp_path), "--epochs", "1,3",
                            "--output", str(tmp_path / "row.json")])
    assert json.loads((tmp_path / "row.json").read_text(encoding="utf-8")) == json.loads(json.dumps(row))
    assert row["features"] == (24 if task == "sst2" else 96)  # u, or [u; v; |u - v|; u * v]
    assert row["chosen_epochs"] in (1, 3) and set(row["held_accuracy_by_epochs"]) == {1, 3}
    assert row["dev"] == 12 and row["train"] + row["held_out"] <= 60 and row["held_out"] >= 1
    assert 0 <= row["dev_accuracy"] <= 100 and row["dev_majority"] == 50.0
    assert row["seed"] == 1 and "seeds" not in row
    # --seeds: the vectors once, a carve and a classifier per seed, their mean and sd
    rows = frozen_eval.main([str(checkpoints["skip_thought"]), task, str(tmp_path), "--epochs", "1,3", "--seeds", "1,2"])
    assert [r["seed"] for r in rows["seeds"]] == [1, 2] and rows["seeds"][0] == {k: row[k] for k in rows["seeds"][0]}
    accs = [r["dev_accuracy"] for r in rows["seeds"]]
    assert rows["dev_accuracy_mean"] == round(sum(accs) / 2, 2)
    assert rows["dev_accuracy_sd"] == round(abs(accs[0] - accs[1]) / 2 ** 0.5, 2)
    with pytest.raises(SystemExit):
        frozen_eval.parse([str(checkpoints["skip_thought"]), task, str(tmp_path), "--seeds", "1,1"])


@pytest.mark.parametrize("task", ["skip_thought", "quick_thought"])
def test_generate_refuses_a_sentence_encoder(task, checkpoints, run_cli):
    from seqkit.cli.generate import main as generate

    r = run_cli(generate, [f"path={checkpoints[task]}", "input=-", "common.threads=1"], stdin="cat dog .\n")
    one_line_error(r, "seqkit-generate", "sentence encoder", "generates no text", "seqkit-embed",
                   log_lines_allowed=True)
    assert not r.out


@pytest.mark.parametrize("task", ["skip_thought", "quick_thought"])
def test_eval_lm_refuses_a_sentence_encoder_and_names_seqkit_embed(task, topics, checkpoints, run_cli):
    from seqkit.cli.eval_lm import main as eval_lm

    r = run_cli(eval_lm, [f"path={checkpoints[task]}", f"task.data={topics / 'bin'}", "gen_subset=valid",
                          "common.threads=1"])
    one_line_error(r, "seqkit-eval-lm", "scores language models", "seqkit-embed turns sentences into its vectors",
                   log_lines_allowed=True)
