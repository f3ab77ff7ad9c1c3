"""common.compile: compiled updates give eager's losses in one graph (fullgraph) that batches of
new shapes reuse, for translation, language-model and classifier training alike, with no warning
while compiling and the first update's compile time logged; a graph break that remains is named
once and compiled around, DDP's hooks turn fullgraph off; criteria with state of their own compile
the model only; a platform torch.compile cannot build on gives one clear error; a compile setting
a command would ignore is refused in one line."""

import contextlib
import logging
import re
import warnings

import pytest
import torch
from omegaconf import OmegaConf
from torch._dynamo.utils import counters

import seqkit
from label_fixtures import single, tagged  # noqa: F401  (fixtures, by name)
from seqkit.cli.common import ConfigBuilder
from seqkit.core.errors import SeqkitError
from seqkit.data.packing import pack_training_set
from seqkit.data.toy_corpus import make_corpus
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers.space import SpaceConfig
from seqkit.training.compile import check_platform, loss_function, traceable
from seqkit.training.config import TrainConfig
from seqkit.training.trainer import Trainer

seqkit.import_builtin_components()

UPDATES = 6


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("compile")
    raw = str(root / "raw")
    make_corpus(raw, n_train=120, n_valid=20, n_test=10)
    preprocess(PreprocessConfig(source_lang="de", target_lang="en", trainpref=f"{raw}/train", validpref=f"{raw}/valid",
                                destdir=str(root / "bin"), tokenizer=SpaceConfig()))
    return str(root / "bin")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from nothing and leaves nothing compiled behind."""
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


@contextlib.contextmanager
def logged(*names, level=logging.INFO):
    """The messages logged at ``level`` or above inside, to loggers ``names`` and those below them
    (a handler on each logger itself: a CLI's logging set-up, as the data fixtures run it, replaces
    the root's handlers and with them pytest's)."""
    records, handler = [], logging.Handler(level)
    handler.emit = lambda record: records.append(record.getMessage())
    loggers = [logging.getLogger(name) for name in names]
    before = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(min(level, logger.getEffectiveLevel()))
        logger.addHandler(handler)
    try:
        yield records
    finally:
        for logger, level_before in zip(loggers, before):
            logger.removeHandler(handler)
            logger.setLevel(level_before)


def torch_loggers():
    """torch's loggers that do not pass their records on (torch._dynamo, torch._inductor, ...: each
    writes to stderr itself); every torch record reaches one of them."""
    return [name for name, logger in logging.root.manager.loggerDict.items()
            if (name == "torch" or name.startswith("torch.")) and isinstance(logger, logging.Logger)
            and not logger.propagate]


def trainer(data_dir, tmp_path, *extra):
    # a transformer smaller than transformer_tiny: compiling on a 2-core CPU is the slow part
    overrides = [f"task.data={data_dir}", f"checkpoint.save_dir={tmp_path}", "checkpoint.no_save=true",
                 "model=transformer_tiny", "model.encoder_layers=1", "model.decoder_layers=1", "model.embed_dim=32",
                 "model.ffn_dim=64", "model.dropout=0", "criterion=label_smoothed_cross_entropy",
                 "dataset.max_tokens=200", "lr_scheduler=fixed", "optimizer.lr=1e-3", "common.threads=1", *extra]
    return Trainer(OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(overrides)))


def train(t):
    """Losses of the first UPDATES updates (one batch each), the batch shapes, and the number of
    graphs compiled after each update."""
    ds = t.task.load_dataset("train")
    batches = ds.batches(200, seed=1, epoch=1)[:UPDATES]
    losses, shapes, graphs = [], [], []
    for batch in batches:
        sample = ds.collate(list(batch))
        shapes.append(tuple(sample["target"].shape))
        logs = t.train_step([sample])
        assert isinstance(logs["loss"], torch.Tensor)  # a 0-d tensor, read only here
        losses.append(float(logs["loss"]) / float(logs["sample_size"]))
        graphs.append(counters["stats"]["unique_graphs"])
    return torch.tensor(losses, dtype=torch.float64), shapes, graphs


def test_compiled_updates_match_eager_in_one_graph_without_warnings(data_dir, tmp_path, capfd):
    eager_losses, shapes, _ = train(trainer(data_dir, tmp_path / "e"))
    assert counters["stats"]["unique_graphs"] == 0  # nothing compiled without common.compile
    capfd.readouterr()
    with logged("seqkit.train") as messages, logged(*torch_loggers(), level=logging.WARNING) as torch_warnings, \
            warnings.catch_warnings(record=True) as python_warnings:
        warnings.simplefilter("always")  # every warning a user would see: python hides deprecations outside __main__
        warnings.filterwarnings("ignore", category=DeprecationWarning)  # (torch's own jit.script_method, on import)
        warnings.filterwarnings("ignore", category=PendingDeprecationWarning)
        compiled = trainer(data_dir, tmp_path / "c", "common.compile=true")
        counters.clear()  # (the platform probe's graph)
        losses, compiled_shapes, graphs = train(compiled)
    out, err = capfd.readouterr()
    # Inductor on the CPU, six shapes: not one warning, from torch, python or a compiler
    assert not torch_warnings and not python_warnings and not out.strip() and not err.strip(), \
        (torch_warnings, [str(w.message) for w in python_warnings], out, err)
    assert sum("the model and criterion" in m and "one graph (fullgraph)" in m for m in messages) == 1, messages
    timed = [m for m in messages if re.fullmatch(r"common\.compile: first update compiled in \d+\.\d s", m)]
    assert len(timed) == 1, messages
    assert compiled_shapes == shapes and len(set(shapes)) >= 3
    # the same seed, the same batches: eager's losses within fp32 reordering (Inductor fuses the sums)
    torch.testing.assert_close(losses, eager_losses, rtol=2e-5, atol=0)
    assert eager_losses[-1] < eager_losses[0]  # (it learns: the updates did something)
    # dynamic shapes and no graph break: the first batch's one graph serves all the others
    assert graphs == [1] * UPDATES and not counters["graph_break"], (graphs, shapes)


class CachingCriterion:
    """A label-smoothed criterion keeping a python-side record of the examples it has seen, as
    distillation keeps its teacher's outputs."""

    def __init__(self, inner):
        self.inner, self.seen = inner, {}

    def __call__(self, model, sample):
        for sid in sample["id"].tolist():
            self.seen[sid] = self.seen.get(sid, 0) + 1
        return self.inner(model, sample)


def graphs_of(backend_graphs):
    return "\n".join(gm.print_readable(print_output=False) for gm in backend_graphs)


def test_stateful_criterion_compiles_the_model_only(data_dir, tmp_path):
    t = trainer(data_dir, tmp_path)
    ds = t.task.load_dataset("train")
    sample = ds.collate(list(ds.batches(200, seed=1, epoch=1)[0]))
    expected, _, _ = t.criterion(t.model, sample)
    seen = []

    def recording(gm, example_inputs):  # dynamo's graphs, run as they are
        seen.append(gm)
        return gm.forward

    criterion = CachingCriterion(t.criterion)
    assert traceable(t.criterion) and not traceable(criterion)
    with logged("seqkit.train") as messages:
        fn = loss_function(criterion, t.model, True, backend=recording)
    assert any("is not traced: the model is compiled" in m and "one graph (fullgraph)" in m for m in messages)
    loss, _, logs = fn(sample)
    torch.testing.assert_close(loss, expected)
    assert criterion.seen and seen and "log_softmax" not in graphs_of(seen)  # the loss ran eagerly
    # a criterion without state: the loss is in the graphs too
    seen.clear()
    loss, _, _ = loss_function(t.criterion, t.model, True, backend=recording)(sample)
    torch.testing.assert_close(loss, expected)
    assert "log_softmax" in graphs_of(seen)


def test_no_cpp_compiler_is_one_clear_error():
    import torch._inductor.config as inductor_config

    # (torch's own patch: monkeypatch's undo deletes the setting, and Inductor fails in every later test)
    with inductor_config.patch({"cpp.cxx": (None, "/nonexistent/g++")}), pytest.raises(SeqkitError) as e:
        check_platform(torch.device("cpu"))
    message = str(e.value)
    assert "\n" not in message and "torch.compile does not work on cpu" in message
    assert "common.compile=false" in message and "compiler" in message.lower()


# -- one graph -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("compile_lm")
    lines = [" ".join(f"v{(i + k) % 12}" for k in range(3 + i % 7)) for i in range(80)]
    (root / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    preprocess(PreprocessConfig(task="language_modeling", trainpref=str(root / "train.txt"), destdir=str(root / "bin"),
                                tokenizer=SpaceConfig()))
    return str(root / "bin")


def tiny(data, tmp_path, *overrides):
    return Trainer(OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(
        [f"task.data={data}", f"checkpoint.save_dir={tmp_path}", "checkpoint.no_save=true", "common.threads=1",
         "lr_scheduler=fixed", *overrides])))


TINY_TRANSFORMER = ("model=transformer_tiny", "model.encoder_layers=1", "model.decoder_layers=1",
                    "model.embed_dim=32", "model.ffn_dim=64")
LABEL_SMOOTHED = "criterion=label_smoothed_cross_entropy"
MODELS_TO_COMPILE = {  # name -> (data fixture, overrides, max_tokens of the batches: several shapes)
    "transformer+label_smoothed_cross_entropy": ("data_dir", (*TINY_TRANSFORMER, LABEL_SMOOTHED), (200, 120, 300)),
    "transformer+cross_entropy": ("data_dir", (*TINY_TRANSFORMER, "criterion=cross_entropy"), (200, 120, 300)),
    "gpt+cross_entropy": ("lm_dir", ("task=language_modeling", "task.tokens_per_sample=16", "model=gpt_tiny",
                                     "criterion=cross_entropy"), (64, 96, 128)),
    "transformer_classifier+cross_entropy": ("single", ("task=classification", "model=transformer_classifier_tiny",
                                                        "criterion=cross_entropy"), (200, 120, 300)),
}


@pytest.mark.parametrize("name", MODELS_TO_COMPILE)
def test_model_and_loss_compile_to_one_graph_for_all_shapes(name, request, tmp_path):
    fixture, overrides, budgets = MODELS_TO_COMPILE[name]
    data = request.getfixturevalue(fixture)
    t = tiny(data[0] / "bin" if fixture == "single" else data, tmp_path, *overrides)
    ds = t.task.load_dataset("train")
    samples = [ds.collate(list(ds.batches(n, seed=1, epoch=1)[0])) for n in budgets]
    shapes = {tuple(s["net_input"]["src_tokens"].shape) for s in samples}
    assert len(shapes) == len(budgets) and min(min(s) for s in shapes) > 1, shapes  # (sizes 1 specialize)
    with logged("seqkit.train") as messages:
        fn = loss_function(t.criterion, t.model, True, backend="eager")  # dynamo's graph, run as it is
        counters.clear()  # (the platform probe's graph)
        t.model.train()
        for sample in samples:
            loss, _, _ = fn(sample)
            loss.backward()
    assert any("one graph (fullgraph)" in m for m in messages), messages
    assert not [m for m in messages if "cannot be traced whole" in m]
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1, shapes


def test_packed_batches_give_one_graph_of_identical_inputs(data_dir, tmp_path):
    """Packed batches with different numbers of real target tokens: one graph (fullgraph), and
    every input the graph is called with (tensors' shapes, sizes) is the same for all of them, the
    precondition of one CUDA graph under common.compile_mode=reduce-overhead (inductor records one
    per distinct integer inputs). With the loss over an index of the real targets, the index's
    length was an input that changed with every batch, and so was collation's ``ntokens`` as logged."""
    t = tiny(data_dir, tmp_path, *TINY_TRANSFORMER, LABEL_SMOOTHED, "model.dropout=0")  # (eager's losses)
    packed = pack_training_set(t.task.load_dataset("train"), t.model, max_tokens=200, max_sentences=0, pack_length=40)
    samples = [packed.collate(b) for b in packed.batches(200, seed=1, epoch=1)[:3]]
    assert len({s["ntokens"] for s in samples}) == 3, [s["ntokens"] for s in samples]
    tensors = [{k: tuple(v.shape) for k, v in {**s["net_input"], "target": s["target"]}.items()} for s in samples]
    assert all(shapes == tensors[0] for shapes in tensors), tensors
    calls = []

    def recording(gm, example_inputs):  # dynamo's graph, run as it is; what each call passes it, recorded
        def run(*args):
            calls.append([tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args])
            return gm(*args)

        return run

    t.model.train()
    eager = [float(t.criterion(t.model, s)[0]) for s in samples]
    with logged("seqkit.train") as messages:
        fn = loss_function(t.criterion, t.model, True, backend=recording)
        counters.clear()  # (the platform probe's graph)
        calls.clear()
        losses = []
        for sample in samples:
            loss, n, logs = fn(sample)
            loss.backward()
            losses.append(float(loss))
            # the real targets, not B * T: on the device (collation's host int stays out of the graph)
            assert int(n) == int(logs["sample_size"]) == int(logs["ntokens"]) == sample["ntokens"]
    assert any("one graph (fullgraph)" in m for m in messages), messages
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1
    assert len(calls) == 3 and calls[1] == calls[0] and calls[2] == calls[0]
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(eager), rtol=1e-5, atol=0)


class Branchy(torch.nn.Module):
    """A plugin model with a data-dependent branch: dynamo cannot put it in one graph."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        if bool(y.sum() > 0):  # a read of the device: the graph breaks here
            return y * 2
        return y


def squared(model, sample):
    loss = model(sample["x"]).pow(2).sum()
    return loss, sample["x"].size(0), {"loss": loss.detach()}


def test_a_graph_break_is_named_once_and_compiled_in_pieces():
    torch.manual_seed(0)
    model, x = Branchy(), torch.randn(3, 4)
    expected, _, _ = squared(model, {"x": x})
    with logged("seqkit.train") as messages:
        fn = loss_function(squared, model, True, backend="eager")
        losses = [fn({"x": x})[0], fn({"x": x})[0]]
    for loss in losses:
        torch.testing.assert_close(loss, expected)
    fallback = [m for m in messages if "cannot be traced whole" in m]
    assert len(fallback) == 1 and "tests/test_compile.py:" in fallback[0] and "fullgraph off" in fallback[0], messages


def test_tagging_counts_on_the_host_and_is_compiled_around_them(tagged, tmp_path):
    root, _ = tagged
    t = tiny(root / "bin", tmp_path, "task=tagging", "model=transformer_tagger_tiny", "criterion=cross_entropy")
    ds = t.task.load_dataset("train")
    sample = ds.collate(list(ds.batches(200, seed=1, epoch=1)[0]))
    t.model.eval()  # (no dropout: the same loss as eager)
    expected, _, expected_logs = t.criterion(t.model, sample)
    with logged("seqkit.train") as messages:
        loss, _, logs = loss_function(t.criterion, t.model, True, backend="eager")(sample)
    torch.testing.assert_close(loss, expected)
    assert logs["chunk_correct"] == expected_logs["chunk_correct"]
    fallback = [m for m in messages if "cannot be traced whole" in m]
    # (named where it is called: the criterion's line)
    assert len(fallback) == 1 and "torch.compiler.disable" in fallback[0] and ", at seqkit/" in fallback[0], messages


def test_fullgraph_is_off_under_distributed_data_parallel(tmp_path):
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4))
        x = torch.randn(3, 4)
        expected, _, _ = squared(model, {"x": x})
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        with logged("seqkit.train") as messages:
            loss, _, _ = loss_function(squared, ddp, True, backend="eager")({"x": x})
        torch.testing.assert_close(loss, expected)
        assert any("fullgraph off: DistributedDataParallel's hooks split the graph" in m for m in messages), messages
        assert not any("cannot be traced whole" in m for m in messages)
    finally:
        dist.destroy_process_group()


# -- settings used or refused ------------------------------------------------------------------------
def test_compile_settings_that_would_be_ignored_are_one_line(data_dir, tmp_path, run_cli):
    from seqkit.cli.generate import main as generate
    from seqkit.core.config import CommonConfig, check_compile

    check_compile(CommonConfig(compile=True, compile_mode="reduce-overhead"), "seqkit-train")  # used
    with pytest.raises(SeqkitError, match=r"^common.compile_mode=reduce-overhead takes effect only with "
                                          r"common.compile=true; set that, or drop common.compile_mode$"):
        trainer(data_dir, tmp_path, "common.compile_mode=reduce-overhead")
    for setting, named in (("common.compile=true", "common.compile=true"),
                           ("common.compile_mode=max-autotune", "common.compile_mode=max-autotune")):
        r = run_cli(generate, [setting, f"path={tmp_path / 'none.pt'}", "input=-"], stdin="a b\n")
        assert r.code == 1 and "Traceback" not in r.err, r.err
        lines = r.err.strip().splitlines()
        assert lines == [f"seqkit-generate: error: {named}: seqkit-generate runs eagerly (common.compile is "
                         "seqkit-train's); drop it"], r.err
    from seqkit.analysis.eval_lm import EvalLMConfig, evaluate

    with pytest.raises(SeqkitError, match=r"^common.compile=true: seqkit-eval-lm runs eagerly"):
        evaluate(EvalLMConfig(path=str(tmp_path / "none.pt"), common=CommonConfig(compile=True)))
