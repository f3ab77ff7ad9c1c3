"""Word2vec (issue 62): subsampling's keep probability, the noise distribution and its alias table,
the dynamic window's pairs, the negative-sampling loss by hand, the written-out gradients against
autograd, training from the shell on a corpus with planted structure (two clusters that never
co-occur: nearest words stay in their cluster; a grid of words with two attributes: analogies
hold), seqkit-embed's word mode (neighbours, analogies, an analogy file, export in word2vec's text
format and back), and the refusals, each one line with nothing written."""

import dataclasses
import json
import math
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import seqkit
from seqkit.analysis.sentence_vectors import EmbedConfig
from seqkit.analysis.word_vectors import WordVectors, evaluate_analogies, read_analogies, read_text_vectors
from seqkit.cli.embed import main as embed
from seqkit.cli.train import main as train
from seqkit.core.checkpoints import load_for_inference
from seqkit.criteria.word2vec import negative_sampling_loss
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.data.word2vec import Word2VecDataset, alias_table, keep_probabilities, noise_distribution, window_pairs
from seqkit.models.word2vec import Word2VecModel, word2vec_tiny
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers.space import SpaceConfig
from seqkit.training.precision import clip_sparse

from label_fixtures import one_line_error
from transfer_fixtures import trainer_for

seqkit.import_builtin_components()
CLUSTERS = {"a": [f"a{i}" for i in range(8)], "b": [f"b{i}" for i in range(8)]}
GRID_QUESTIONS = [("t00", "t01", "t10", "t11"), ("t00", "t02", "t10", "t12"), ("t10", "t11", "t00", "t01"),
                  ("t01", "t02", "t11", "t12"), ("t11", "t10", "t01", "t00"), ("t02", "t00", "t12", "t10")]


def planted_lines(seed):
    """Two clusters of 8 words (a line holds words of one), and a grid: word t{x}{y} with 2 words of
    pool p{x}* and 2 of pool q{y}* (x in 0..1, y in 0..2), so t01 - t00 + t10 is nearest to t11."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(CLUSTERS["ab"[i % 2]]) for _ in range(rng.randint(6, 10))) for i in range(400)]
    for _ in range(1200):
        x, y = rng.randrange(2), rng.randrange(3)
        words = [f"t{x}{y}"] + rng.sample([f"p{x}{i}" for i in range(4)], 2) + rng.sample([f"q{y}{i}" for i in
                                                                                          range(4)], 2)
        rng.shuffle(words)
        lines.append(" ".join(words))
    rng.shuffle(lines)
    return lines


def planted_folder(root):
    """The planted corpus (train: seed 1; valid: 100 lines of seed 2) binarized with the space
    tokenizer into ``root / "bin"``."""
    (root / "train.txt").write_text("\n".join(planted_lines(1)) + "\n", encoding="utf-8")
    (root / "valid.txt").write_text("\n".join(planted_lines(2)[:100]) + "\n", encoding="utf-8")
    preprocess(PreprocessConfig(task="language_modeling", trainpref=str(root / "train.txt"),
                                validpref=str(root / "valid.txt"), destdir=str(root / "bin"), tokenizer=SpaceConfig()))
    return root / "bin"


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The planted corpus, binarized (space tokenizer), and a skip-gram run of 120 updates on it."""
    root = tmp_path_factory.mktemp("planted")
    planted_folder(root)
    trainer_for(["task=word2vec", f"task.data={root / 'bin'}", "task.sample=0", "model=word2vec_tiny",
                 "criterion=word2vec", "optimizer=sparse_adam", "optimizer.lr=0.05", "dataset.max_tokens=256",
                 "optimization.max_update=120", f"checkpoint.save_dir={root / 'sg'}"]).run()
    return root, root / "sg" / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Seven short lines, one empty; 'rare' is seen once, under the threshold: it becomes <unk>."""
    root = tmp_path_factory.mktemp("small")
    (root / "train.txt").write_text("w1 w2 w3 w4 w5\nw1 w2\n\nw6 rare w1\nw4 w5 w6\n" + "w1 w2 w3 w6\n" * 2,
                                    encoding="utf-8")
    preprocess(PreprocessConfig(task="language_modeling", trainpref=str(root / "train.txt"), destdir=str(root / "bin"),
                                tokenizer=SpaceConfig(), thresholdsrc=2))
    return IndexedDataset(str(root / "bin" / "train.text")), Dictionary.load(str(root / "bin" / "dict.text.txt"))


# -- the data ------------------------------------------------------------------------------------------
def test_keep_probability_is_mikolovs_formula():
    counts = np.array([0, 0, 0, 0, 9000, 900, 90, 10])  # specials first; f = 0.9, 0.09, 0.009, 0.001
    keep = keep_probabilities(counts, 1e-3)
    # (sqrt(f / t) + 1) * t / f: (30 + 1) / 900, (sqrt(90) + 1) / 90, (3 + 1) / 9, (1 + 1) * 1 -> capped at 1
    assert keep[:4].tolist() == [0, 0, 0, 0]
    assert keep[4:] == pytest.approx([31 / 900, (math.sqrt(90) + 1) / 90, 4 / 9, 1.0], rel=1e-12)
    assert keep_probabilities(counts, 0).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


def test_noise_is_the_unigram_to_the_075_and_its_alias_table_draws_it_exactly():
    counts = np.array([0, 0, 0, 0, 16, 1, 0, 81])
    p = noise_distribution(counts)
    assert p.tolist() == pytest.approx([0, 0, 0, 0, 8 / 36, 1 / 36, 0, 27 / 36])  # 16^.75 = 8, 81^.75 = 27
    prob, alias = alias_table(p)
    implied = prob.copy()  # column i gives i with prob[i], its alias with 1 - prob[i]
    np.add.at(implied, alias, 1 - prob)
    assert (implied / len(p)).tolist() == pytest.approx(p.tolist(), abs=1e-12)


def test_dynamic_window_pairs_stay_in_their_piece_and_window():
    pieces = np.array([0, 0, 0, 0, 1, 1])
    windows = np.array([1, 2, 1, 2, 2, 1])
    centres, contexts = window_pairs(pieces, windows, 2)
    assert list(zip(centres.tolist(), contexts.tolist())) == [
        (0, 1), (1, 0), (1, 2), (1, 3), (2, 1), (2, 3), (3, 1), (3, 2), (4, 5), (5, 4)]


def test_a_batch_for_a_seed_is_frozen(small):
    data, d = small
    counts = np.bincount(np.asarray(data.tokens), minlength=len(d))
    counts[:4] = 0
    ds = Word2VecDataset(data, counts, d.pad(), "skipgram", window=2, negative=2, sample=0.0, max_sentence_length=3)
    # lines: w1 w2 w3 w4 w5 | w1 w2 | (empty) | w6 <unk> w1 | w4 w5 w6 | w1 w2 w3 w6 x2; pieces of <= 3 words
    assert ds.src_sizes.tolist() == [3, 2, 2, 3, 3, 3, 1, 3, 1]
    ds.batches(100, seed=1, epoch=1)
    sample = ds.collate([0, 1, 3])
    words = lambda ids: [d[i] for i in ids]  # noqa: E731
    context, target = sample["net_input"]["context"][:, 0].tolist(), sample["target"]
    pairs = list(zip(words(context), words(target[:, 0].tolist())))  # (context word, centre word)
    # frozen (seed 1, epoch 1): pieces w1 w2 w3 | w4 w5 | w6 w1; windows b = 1 for the first w1, 2 for w3
    assert pairs == [("w2", "w1"), ("w1", "w2"), ("w3", "w2"), ("w1", "w3"), ("w2", "w3"),
                     ("w5", "w4"), ("w4", "w5"), ("w1", "w6"), ("w6", "w1")]
    assert target[1].tolist() == [d.index("w2"), d.index("w2"), d.index("w1")]  # a noise word may be the true one
    assert target.shape == (9, 3) and (target[:, 1:] >= 4).all()  # noise words are words, never specials
    assert sample["ntokens"] == 7 and sample["raw_words"] == 8  # <unk> dropped before windows: w6 meets w1
    again = ds.collate([0, 1, 3])
    assert torch.equal(again["target"], target)  # a pure function of (seed, epoch, pieces)
    ds.batches(100, seed=1, epoch=2)
    assert not torch.equal(ds.collate([0, 1, 3])["target"], target)
    cbow = Word2VecDataset(data, counts, d.pad(), "cbow", 2, 2, 0.0, 3)
    cbow.batches(100, seed=1, epoch=1)
    rows = cbow.collate([0, 1, 3])["net_input"]["context"]  # (centres, 2 x window), <pad> filling
    assert rows.shape[1] == 4 and rows.shape[0] == 7 and (rows != d.pad()).sum() == 9


# -- the loss and the model --------------------------------------------------------------------------------
def test_negative_sampling_loss_by_hand():
    scores = torch.tensor([[2.0, -1.0, 0.5], [0.0, 3.0, -2.0]])
    target = torch.tensor([[5, 6, 7], [8, 8, 9]])  # row 2's first noise word is its true word: not scored

    def log_sigmoid(x):
        return -math.log1p(math.exp(-x))

    want = -(log_sigmoid(2.0) + log_sigmoid(1.0) + log_sigmoid(-0.5) + log_sigmoid(0.0) + log_sigmoid(2.0))
    assert float(negative_sampling_loss(scores, target)) == pytest.approx(want, rel=1e-6)
    assert want == pytest.approx(0.126928 + 0.313262 + 0.974077 + 0.693147 + 0.126928, abs=1e-5)  # = 2.234342


@pytest.mark.parametrize("cbow", [False, True])
@pytest.mark.parametrize("sparse", [True, False])
def test_written_out_gradients_match_autograd(cbow, sparse):
    d = Dictionary([f"w{i}" for i in range(12)], [1] * 12)
    torch.manual_seed(0)
    model = Word2VecModel(dataclasses.replace(word2vec_tiny(), sparse=sparse), d)
    with torch.no_grad():
        model.out_embed.weight.normal_()
    context = torch.randint(4, 16, (20, 4 if cbow else 1))
    if cbow:
        context[:, 3] = d.pad()
        context[0, 1:] = d.pad()  # a centre with one context word
    target = torch.randint(4, 16, (20, 3))
    loss = negative_sampling_loss(model(context, target), target)
    loss.backward()
    got = [model.embed.weight.grad, model.out_embed.weight.grad]
    assert all(g.is_sparse == sparse for g in got)
    # reference: plain lookups and autograd; CBOW's mean with each context word getting the whole error
    w_in = model.embed.weight.detach().clone().requires_grad_()
    w_out = model.out_embed.weight.detach().clone().requires_grad_()
    x = F.embedding(context, w_in, padding_idx=d.pad())  # (P, C, D)
    total = x.sum(1)
    count = context.ne(d.pad()).sum(1, keepdim=True)
    h = total.detach() / count + (total - total.detach())
    ref = negative_sampling_loss((F.embedding(target, w_out) * h[:, None]).sum(-1), target)
    ref.backward()
    assert float(loss.detach()) == pytest.approx(float(ref.detach()), rel=1e-5)
    for g, r in zip(got, (w_in.grad, w_out.grad)):
        assert torch.allclose(g.to_dense(), r, atol=1e-6)
    w = model.embed.weight.detach()
    assert float(w.abs().max()) <= 0.5 / 8 and float(w[d.pad()].abs().sum()) == 0


def test_sparse_gradient_norm_and_clipping():
    a = torch.nn.Parameter(torch.zeros(5, 2))
    a.grad = torch.sparse_coo_tensor([[1, 3, 1]], [[3.0, 0.0], [0.0, 2.0], [1.0, 0.0]], (5, 2),
                                     check_invariants=True)  # row 1 twice
    b = torch.nn.Parameter(torch.zeros(2))
    b.grad = torch.tensor([1.0, 2.0])
    norm = clip_sparse([a, b], 1.0)
    assert float(norm) == pytest.approx(math.sqrt(16 + 4 + 1 + 4))  # rows summed first: (4, 0), (0, 2)
    assert float(torch.cat([a.grad.to_dense().flatten(), b.grad]).norm()) == pytest.approx(1.0, rel=1e-5)


# -- from the shell ------------------------------------------------------------------------------------------
def neighbours(out):
    """seqkit-embed's Q-/N- lines -> {query: [(word, cosine), ...]}."""
    got, query = {}, None
    for line in out.splitlines():
        tag, *rest = line.split("\t")
        if tag.startswith("Q-"):
            query = rest[0]
            got[query] = []
        else:
            got[query].append((rest[1], float(rest[0])))
    return got


def assert_clusters_kept(ck, run_cli):
    """seqkit-embed's 5 nearest words of a0, a5, b0, b5 in checkpoint ``ck``: all of the query's
    cluster, nearest first."""
    r = run_cli(embed, [f"path={ck}", "words=a0 a5 b0 b5", "k=5"])
    assert r.code == 0, r.err
    got = neighbours(r.out)
    assert list(got) == ["a0", "a5", "b0", "b5"]
    for query, hits in got.items():
        assert len(hits) == 5 and all(w[0] == query[0] and w != query for w, _ in hits), (query, hits)
        assert [c for _, c in hits] == sorted((c for _, c in hits), reverse=True)


def test_skipgram_neighbours_stay_in_their_cluster(planted, run_cli):
    assert_clusters_kept(planted[1], run_cli)


def test_cbow_from_the_shell_logs_words_per_second_and_keeps_clusters(planted, tmp_path, run_cli):
    root, _ = planted
    save = tmp_path / "cbow"
    r = run_cli(train, ["task=word2vec", f"task.data={root / 'bin'}", "task.mode=cbow", "task.sample=0",
                        "model=word2vec_tiny", "criterion=word2vec", "optimizer=sparse_adam", "optimizer.lr=0.05",
                        "lr_scheduler=fixed", "optimization.max_update=60", "dataset.max_tokens=256",
                        "common.threads=1", "common.log_format=json", "common.log_interval=30",
                        f"checkpoint.save_dir={save}"])
    assert r.code == 0, r.err
    records = [json.loads(line) for line in (save / "train_log.jsonl").read_text().splitlines()]
    first = next(rec for rec in records if rec["tag"] == "train")
    assert first["tokens_per_s"] > 0 and first["kept"] == 100.0  # task.sample=0 keeps every word
    assert any(rec["tag"] == "valid" for rec in records)
    r = run_cli(embed, [f"path={save / 'checkpoint_last.pt'}", "words=a1 b1", "k=4"])
    assert r.code == 0, r.err
    assert all(w[0] == q[0] for q, hits in neighbours(r.out).items() for w, _ in hits), r.out


def test_analogies_on_the_grid(planted, tmp_path, run_cli):
    _, ck = planted
    r = run_cli(embed, [f"path={ck}", "analogy=t00:t01::t10", "k=3"])
    assert r.code == 0, r.err
    (query, hits), = neighbours(r.out).items()
    assert query == "t00:t01::t10:?" and hits[0][0] == "t11"
    questions = tmp_path / "grid.txt"
    questions.write_text(": grid\n" + "".join(" ".join(q) + "\n" for q in GRID_QUESTIONS) +
                         ": unknown words\nt00 t01 zz t11\n\n", encoding="utf-8")
    r = run_cli(embed, [f"path={ck}", f"analogies={questions}"])
    assert r.code == 0, r.err
    rows = [line.split("\t") for line in r.out.splitlines()]
    assert rows[0] == ["section", "correct", "answered", "accuracy", "oov"]
    assert rows[2] == ["unknown words", "0", "0", "-", "1"]
    assert int(rows[1][1]) >= 5 and rows[1][2] == "6"  # random vectors: about 1 in 27 candidates right


def test_analogy_file_scoring_by_hand(tmp_path):
    words = ["a", "b", "c", "d", "e"]
    vectors = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 1], [0, 1, 1], [0, -1, 1]], dtype=np.float32)
    wv = WordVectors(words, vectors)
    (cos, word), = [(c, w) for w, c in wv.analogy("a", "b", "c", 1)]
    # unit(b) + unit(c) - unit(a) = (1/sqrt2 - 1, 1/sqrt2, 1); its cosine with d = (0, 1, 1)
    q = np.array([1 / math.sqrt(2) - 1, 1 / math.sqrt(2), 1])
    assert word == "d" and cos == pytest.approx(q @ [0, 1, 1] / np.linalg.norm(q) / math.sqrt(2), rel=1e-6)
    (tmp_path / "q.txt").write_text(": s1\na b c d\na b c e\n: s2\nb a d c\nzz a b c\n", encoding="utf-8")
    sections = evaluate_analogies(wv, read_analogies(str(tmp_path / "q.txt")))
    assert [(s.correct, s.answered, s.oov) for s in sections] == [(1, 2, 0), (1, 1, 1)]


def test_export_round_trip(planted, tmp_path, run_cli):
    _, ck = planted
    out = tmp_path / "vectors.txt"
    r = run_cli(embed, [f"path={ck}", f"export={out}"])
    assert r.code == 0, r.err
    task, model = load_for_inference(str(ck))
    d = task.dictionary
    lines = out.read_text(encoding="utf-8").splitlines()
    words, vectors = read_text_vectors(str(out))
    assert lines[0] == f"{len(words)} 8" and len(lines) == len(words) + 1
    assert words == [d[i] for i in range(4, len(d)) if d.counts[i] > 0]  # no specials, no madeupword padding
    want = model.word_vectors()[torch.tensor([d.index(w) for w in words])].numpy()
    assert np.array_equal(vectors, want)  # 9 significant digits: float32 exactly
    (tmp_path / "glove.txt").write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")  # GloVe: no first line
    assert read_text_vectors(str(tmp_path / "glove.txt"))[0] == words


# -- refusals ------------------------------------------------------------------------------------------------
def _files(tmp_path):
    (tmp_path / "ok.txt").write_text("a0 a1\n", encoding="utf-8")
    (tmp_path / "three.txt").write_text(": s\na0 a1 b0 b1\nt00 t01 t10\n", encoding="utf-8")
    (tmp_path / "nosection.txt").write_text("a0 a1 b0 b1\n", encoding="utf-8")


@pytest.mark.parametrize("settings, fragments", [
    (["words=a0 zz"], ["words=: 'zz' is not in the checkpoint's vocabulary"]),
    (["words=a0", "k=500"], ["k=500 is above the vocabulary's", "other words"]),
    (["analogy=a0-a1-b0"], ["analogy='a0-a1-b0': write it a:b::c"]),
    (["analogy=a0:a1::zz"], ["analogy=: 'zz' is not in"]),
    (["analogies=three.txt"], ["three.txt:3: expected a question 'a b c d' (4 words)", "got 3 word(s)"]),
    (["analogies=nosection.txt"], ["nosection.txt:1: a question before the first ': section' line"]),
    (["words=a0", "input=ok.txt"], ["words= and input= ask for two things"]),
    (["words=a0", "analogy=a0:a1::b0"], ["words= and analogy= ask for two things"]),
    (["words=a0", "pooling=mean"], ["pooling: seqkit-embed with words= does not read it", "sentence vectors"]),
    (["export=out.txt", "k=3"], ["k: seqkit-embed with export= does not read it"]),
    (["analogies=three.txt", "output=out.npy"], ["output: seqkit-embed with analogies= does not read it"]),
    (["export=nofolder/out.txt"], ["export=nofolder/out.txt: no folder"]),
])
def test_embed_refusals(settings, fragments, planted, tmp_path, run_cli, monkeypatch):
    _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    r = run_cli(embed, [f"path={planted[1]}", *settings])
    one_line_error(r, "seqkit-embed", *fragments, log_lines_allowed=True)
    assert not r.out and not (tmp_path / "out.txt").exists() and not (tmp_path / "out.npy").exists()


@pytest.mark.parametrize("settings, fragments", [
    (["optimizer=adam"], ["optimizer=adam cannot take the sparse gradients", "optimizer=sparse_adam"]),
    (["optimizer=sgd", "optimizer.momentum=0.9"], ["optimizer=sgd with momentum or weight_decay cannot take"]),
    (["optimizer=sparse_adam", "model.sparse=false"], ["optimizer=sparse_adam takes sparse gradients only"]),
    (["optimizer=sparse_adam", "criterion=cross_entropy"], ["task word2vec trains with criterion=word2vec"]),
    (["optimizer=sparse_adam", "model=transformer_lm"], ["model 'transformer_lm' is a lm model",
                                                          "task word2vec trains word2vec models: word2vec"]),
])
def test_train_refusals(settings, fragments, planted, tmp_path, run_cli):
    root, _ = planted
    base = ["task=word2vec", f"task.data={root / 'bin'}", "model=word2vec_tiny", "criterion=word2vec",
            "optimization.max_update=1", "common.threads=1", f"checkpoint.save_dir={tmp_path / 'ck'}"]
    r = run_cli(train, [*base, *settings])
    one_line_error(r, "seqkit-train", *fragments, log_lines_allowed=True)
    assert not (tmp_path / "ck").exists()


def test_word_mode_settings_used_or_refused(planted, tmp_path, run_cli, monkeypatch):
    """Every setting of seqkit-embed in word mode: read, or refused in one line naming it."""
    from test_settings_walk import walk

    ck = planted[1]
    base = [f"path={ck}", "words=a0", "k=2"]
    assert walk(run_cli, monkeypatch, embed, "seqkit-embed", "embed", EmbedConfig, base, tmp_path) == []


def test_sparse_gradients_reach_the_optimizer_coalesced():
    # autograd drops table_grad's coalesced mark; the model's hook sets it again (else clipping and
    # the optimizer sort every gradient again); a gradient summed over two batches stays exact
    d = Dictionary([f"w{i}" for i in range(12)], [1] * 12)
    model = Word2VecModel(word2vec_tiny(), d)
    context, target = torch.tensor([[5], [6], [5]]), torch.tensor([[7, 8, 9], [9, 7, 4], [8, 8, 10]])
    negative_sampling_loss(model(context, target), target).backward()
    grads = [model.embed.weight.grad, model.out_embed.weight.grad]
    assert all(g.is_sparse and g.is_coalesced() for g in grads)
    assert grads[1]._indices()[0].tolist() == [4, 7, 8, 9, 10]
    once = [g.to_dense() for g in grads]
    negative_sampling_loss(model(context, target), target).backward()  # a second batch: summed
    for g, first in zip((model.embed.weight.grad, model.out_embed.weight.grad), once):
        assert torch.allclose(g.coalesce().to_dense(), 2 * first)


@pytest.mark.parametrize("block", [2048, 3])
def test_sparse_adam_is_torchs_sparse_adam(block, monkeypatch):
    from seqkit.optim.optimizers import RowAdam

    monkeypatch.setattr(RowAdam, "ROWS", block)  # 3: a step's rows updated in several blocks
    torch.manual_seed(0)
    a = torch.nn.Parameter(torch.randn(10, 3))
    b = torch.nn.Parameter(a.detach().clone())
    ours, theirs = RowAdam([b], 0.1, (0.9, 0.999), 1e-8), torch.optim.SparseAdam([a], lr=0.1)
    for _ in range(4):  # rows repeat within a step and are skipped across steps: lazy moments
        rows, values = torch.randint(0, 10, (6,)), torch.randn(6, 3)
        for p in (a, b):
            p.grad = torch.sparse_coo_tensor(rows[None], values, (10, 3), check_invariants=True)
        ours.step()
        theirs.step()
    assert torch.allclose(a, b, atol=1e-6) and not torch.equal(a.detach(), torch.zeros(10, 3))


@pytest.mark.parametrize("cli, argv, fragments", [
    ("generate", ["input=-"], ["word2vec vectors", "generate no text", "seqkit-embed", "words=WORD"]),
    ("eval_lm", ["gen_subset=valid", "task.data=BIN"], ["seqkit-eval-lm scores language models",
                                                        "seqkit-embed reads its word vectors"]),
])
def test_generate_and_eval_lm_refuse_word_vectors(cli, argv, fragments, planted, run_cli):
    import importlib

    main = importlib.import_module(f"seqkit.cli.{cli}").main
    root, ck = planted
    argv = [a.replace("BIN", str(root / "bin")) for a in argv]
    r = run_cli(main, [f"path={ck}", "common.threads=1", *argv], stdin="a0 a1\n")
    one_line_error(r, f"seqkit-{cli.replace('_', '-')}", *fragments, log_lines_allowed=True)
    assert not r.out


def test_a_resumed_run_ends_with_the_same_vectors(planted, tmp_path, run_cli):
    """20 updates, then on to 40 from checkpoint_last (the sparse_adam state and the data position
    restored), against 40 in one go: the same weights, bit for bit."""
    root, _ = planted
    base = ["task=word2vec", f"task.data={root / 'bin'}", "model=word2vec_tiny", "criterion=word2vec",
            "optimizer=sparse_adam", "optimizer.lr=0.05", "lr_scheduler=fixed", "dataset.max_tokens=256",
            "common.threads=1", "dataset.valid_subset="]
    for n, save in ((20, "resumed"), (40, "resumed"), (40, "straight")):
        r = run_cli(train, [*base, f"optimization.max_update={n}", f"checkpoint.save_dir={tmp_path / save}"])
        assert r.code == 0, r.err
    a, b = (torch.load(tmp_path / s / "checkpoint_last.pt", weights_only=True) for s in ("resumed", "straight"))
    assert a["train_state"]["num_updates"] == b["train_state"]["num_updates"] == 40
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in b["model"])


def test_word_mode_reads_any_checkpoints_input_table():
    from seqkit.analysis.word_vectors import from_model
    from seqkit.core.registry import MODELS

    d = Dictionary(["the", "cat", "sat", "madeupword0000"], [5, 3, 2, 0])
    torch.manual_seed(0)
    model = MODELS.build(MODELS.choices()["gpt_tiny"], d)
    task = type("Task", (), {"dictionary": d, "src_dict": d})()
    vectors = from_model(task, model, "gpt.pt")
    assert vectors.words == ["the", "cat", "sat"]  # specials and never-seen symbols left out
    assert np.array_equal(vectors.vectors, model.embed.weight.detach()[4:7].numpy())
