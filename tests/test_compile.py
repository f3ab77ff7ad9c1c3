"""common.compile: compiled updates give eager's losses, batches of new shapes reuse the graphs,
criteria with state of their own compile the model only, and a platform torch.compile cannot
build on gives one clear error."""

import logging

import pytest
import torch
from omegaconf import OmegaConf
from torch._dynamo.utils import counters

import seqkit
from seqkit.cli.common import ConfigBuilder
from seqkit.core.errors import SeqkitError
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


def trainer(data_dir, tmp_path, *extra):
    # a transformer smaller than transformer_tiny: compiling on a 2-core CPU is the slow part
    overrides = [f"task.data={data_dir}", f"checkpoint.save_dir={tmp_path}", "checkpoint.no_save=true",
                 "model=transformer_tiny", "model.encoder_layers=1", "model.decoder_layers=1", "model.embed_dim=32",
                 "model.ffn_dim=64", "model.dropout=0", "criterion=label_smoothed_cross_entropy",
                 "dataset.max_tokens=200", "lr_scheduler=fixed", "optimizer.lr=1e-3", "common.threads=1", *extra]
    return Trainer(OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(overrides)))


def train(t):
    """Losses of the first UPDATES updates (one batch each), the batch shapes, and the number of
    graphs compiled after the first update and after the last."""
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


def test_compiled_updates_match_eager_and_reuse_graphs_across_shapes(data_dir, tmp_path, caplog):
    eager_losses, shapes, _ = train(trainer(data_dir, tmp_path / "e"))
    assert counters["stats"]["unique_graphs"] == 0  # nothing compiled without common.compile
    with caplog.at_level(logging.INFO, logger="seqkit.train"):
        compiled = trainer(data_dir, tmp_path / "c", "common.compile=true")
    assert sum("common.compile: the model and criterion" in r.getMessage() for r in caplog.records) == 1
    losses, compiled_shapes, graphs = train(compiled)
    assert compiled_shapes == shapes and len(set(shapes)) >= 3
    # the same seed, the same batches: eager's losses within fp32 reordering (Inductor fuses the sums)
    torch.testing.assert_close(losses, eager_losses, rtol=2e-5, atol=0)
    assert eager_losses[-1] < eager_losses[0]  # (it learns: the updates did something)
    # dynamic shapes: the graphs of the first batch serve the others (no graph per shape)
    assert 0 < graphs[0] <= 16 and graphs[-1] == graphs[0], (graphs, shapes)


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


def test_stateful_criterion_compiles_the_model_only(data_dir, tmp_path, caplog):
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
    with caplog.at_level(logging.INFO, logger="seqkit.train"):
        fn = loss_function(criterion, t.model, True, backend=recording)
    assert any("is not traced: the model is compiled" in r.getMessage() for r in caplog.records)
    loss, _, logs = fn(sample)
    torch.testing.assert_close(loss, expected)
    assert criterion.seen and seen and "log_softmax" not in graphs_of(seen)  # the loss ran eagerly
    # a criterion without state: the loss is in the graphs too
    seen.clear()
    loss, _, _ = loss_function(t.criterion, t.model, True, backend=recording)(sample)
    torch.testing.assert_close(loss, expected)
    assert "log_softmax" in graphs_of(seen)


def test_no_cpp_compiler_is_one_clear_error(monkeypatch):
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(inductor_config.cpp, "cxx", (None, "/nonexistent/g++"))
    with pytest.raises(SeqkitError) as e:
        check_platform(torch.device("cpu"))
    message = str(e.value)
    assert "\n" not in message and "torch.compile does not work on cpu" in message
    assert "common.compile=false" in message and "compiler" in message.lower()
