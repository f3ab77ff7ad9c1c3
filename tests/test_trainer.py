"""The trainer: exact resume, gradient accumulation equivalence, checkpoint contents."""

import json
import os

import pytest
import torch
from omegaconf import OmegaConf

import seqkit
from seqkit.cli.common import ConfigBuilder
from seqkit.data.toy_corpus import make_corpus
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers.space import SpaceConfig
from seqkit.training.config import TrainConfig
from seqkit.training.trainer import Trainer

seqkit.import_builtin_components()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("trainer")
    make_corpus(str(root / "raw"), n_train=120, n_valid=20, n_test=10)
    raw = str(root / "raw")
    preprocess(PreprocessConfig(source_lang="de", target_lang="en", trainpref=f"{raw}/train", validpref=f"{raw}/valid",
                                destdir=str(root / "bin"), tokenizer=SpaceConfig()))
    return str(root / "bin")


def make_cfg(data_dir, save_dir, *extra):
    overrides = [f"task.data={data_dir}", f"checkpoint.save_dir={save_dir}", "model=transformer_tiny",
                 "model.dropout=0.1", "dataset.max_tokens=200", "lr_scheduler.warmup_updates=5",
                 "common.log_format=json", "common.threads=1", *extra]
    return OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(overrides))


def params(trainer):
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


def test_resume_is_bit_identical(data_dir, tmp_path):
    straight = Trainer(make_cfg(data_dir, tmp_path / "a", "optimization.max_update=30"))
    straight.run()
    first = Trainer(make_cfg(data_dir, tmp_path / "b", "optimization.max_update=13"))
    first.run()
    assert first.batch_offset > 0  # stopped inside an epoch
    torch.manual_seed(12345)  # resuming must not depend on the RNG state it starts with
    resumed = Trainer(make_cfg(data_dir, tmp_path / "b", "optimization.max_update=30"))
    resumed.run()
    assert resumed.num_updates == straight.num_updates == 30
    assert resumed.epoch == straight.epoch
    a, b = params(straight), params(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_stop_on_an_epochs_last_batch_ends_the_epoch(data_dir, tmp_path):
    """max_update landing on the last batch of an epoch: that epoch is complete (checkpointN.pt saved,
    validated once); resuming starts the next epoch instead of validating the same update again."""
    probe = Trainer(make_cfg(data_dir, tmp_path / "p", "checkpoint.no_save=true"))
    per_epoch = len(probe.task.load_dataset("train").batches(200, 0, 1, 1))
    first = Trainer(make_cfg(data_dir, tmp_path / "g", f"optimization.max_update={per_epoch}"))
    first.run()
    assert (first.epoch, first.batch_offset) == (2, 0)
    assert (tmp_path / "g" / "checkpoint1.pt").is_file()
    resumed = Trainer(make_cfg(data_dir, tmp_path / "g", f"optimization.max_update={per_epoch + 2}"))
    resumed.run()
    with open(tmp_path / "g" / "train_log.jsonl") as f:
        records = [json.loads(line) for line in f]
    valid_updates = [r["update"] for r in records if r["tag"] == "valid"]
    assert valid_updates == [per_epoch, per_epoch + 2]


def test_save_interval_spaces_validations_and_checkpoints(data_dir, tmp_path):
    """checkpoint.save_interval=2, 5 epochs: validated and saved after epochs 2 and 4 and at the end of the
    run (epoch 5: no checkpoint5.pt, not a multiple); a run stopped inside epoch 3 saves there, and the
    same command resumes to the weights of the run never stopped."""
    probe = Trainer(make_cfg(data_dir, tmp_path / "p", "checkpoint.no_save=true"))
    per_epoch = len(probe.task.load_dataset("train").batches(200, 0, 1, 1))
    run = Trainer(make_cfg(data_dir, tmp_path / "s", "checkpoint.save_interval=2", "optimization.max_epoch=5"))
    out = run.run()
    with open(tmp_path / "s" / "train_log.jsonl") as f:
        valid = [json.loads(line) for line in f if '"valid"' in line]
    assert [(r["epoch"], r["update"]) for r in valid] == [(2, 2 * per_epoch), (4, 4 * per_epoch), (5, 5 * per_epoch)]
    assert out["valid"]["loss"] == valid[-1]["loss"]
    assert sorted(n for n in os.listdir(tmp_path / "s") if n.endswith(".pt")) == [
        "checkpoint2.pt", "checkpoint4.pt", "checkpoint_best.pt", "checkpoint_last.pt"]
    stop_at = 2 * per_epoch + 3
    first = Trainer(make_cfg(data_dir, tmp_path / "r", "checkpoint.save_interval=2", "optimization.max_epoch=5",
                             f"optimization.max_update={stop_at}"))
    first.run()
    assert (first.epoch, first.num_updates) == (3, stop_at) and first.batch_offset > 0
    resumed = Trainer(make_cfg(data_dir, tmp_path / "r", "checkpoint.save_interval=2", "optimization.max_epoch=5"))
    resumed.run()
    assert resumed.num_updates == run.num_updates == 5 * per_epoch
    a, b = params(run), params(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_update_freq_matches_bigger_batches(data_dir, tmp_path):
    """Two batches accumulated = one update over both (gradient normalized by total tokens)."""
    one = Trainer(make_cfg(data_dir, tmp_path / "c", "model.dropout=0.0", "checkpoint.no_save=true"))
    two = Trainer(make_cfg(data_dir, tmp_path / "d", "model.dropout=0.0", "checkpoint.no_save=true"))
    ds = one.task.load_dataset("train")
    b = ds.batches(200, seed=1, epoch=1)
    one.train_step([ds.collate(list(b[0]) + list(b[1]))])
    two.train_step([ds.collate(b[0]), ds.collate(b[1])])
    for (k, p), q in zip(one.model.state_dict().items(), two.model.state_dict().values()):
        torch.testing.assert_close(p, q, atol=2e-6, rtol=1e-5, msg=k)


def test_checkpoint_is_plain_and_complete(data_dir, tmp_path):
    Trainer(make_cfg(data_dir, tmp_path / "e", "optimization.max_epoch=1")).run()
    names = sorted(os.listdir(tmp_path / "e"))
    assert {"checkpoint1.pt", "checkpoint_best.pt", "checkpoint_last.pt", "train_log.jsonl"} <= set(names)
    state = torch.load(tmp_path / "e" / "checkpoint_last.pt", weights_only=True)
    assert state["train_state"]["epoch"] == 2 and state["train_state"]["batch_offset"] == 0
    assert state["cfg"]["model"]["embed_dim"] == 64
    assert set(state["task_state"]) >= {"src_dict", "tgt_dict", "src_tokenizer", "tgt_tokenizer"}
    assert "torch" in state["rng"]


def test_early_stopping_by_patience(data_dir, tmp_path):
    """lr 0 never improves the validation loss: patience 1 stops after the 2nd validation without a new best."""
    t = Trainer(make_cfg(data_dir, tmp_path / "f", "optimizer.lr=0.0", "optimization.patience=1",
                         "optimization.max_epoch=10", "checkpoint.no_save=true"))
    out = t.run()
    assert out["epoch"] == 4  # epochs 1 (best), 2 and 3 (no better): stopped before epoch 4
    assert t.bad_validations == 2


def test_non_finite_updates_are_skipped_then_stop(data_dir, tmp_path):
    from seqkit.core.errors import SeqkitError

    t = Trainer(make_cfg(data_dir, tmp_path / "g", "optimization.max_bad_updates=3", "checkpoint.no_save=true"))
    before = {k: v.clone() for k, v in t.model.state_dict().items()}
    with torch.no_grad():
        t.model.tgt_embed.weight[5:9].fill_(float("nan"))  # every batch now has a NaN loss
    ds = t.task.load_dataset("train")
    batches = ds.batches(200, seed=1, epoch=1)
    for i in range(2):
        logs = t.train_step([ds.collate(batches[i])])
        assert float(logs["stepped"]) == 0.0
        assert t.num_updates == 1  # counted as taken until the outcomes are read
        t.settle()
        assert t.num_updates == 0 and t.bad_updates_in_row == i + 1
    assert torch.equal(t.model.state_dict()["encoder_layers.0.ffn.fc1.weight"], before["encoder_layers.0.ffn.fc1.weight"])
    t.train_step([ds.collate(batches[2])])
    with pytest.raises(SeqkitError, match="3 updates in a row had a non-finite loss"):
        t.settle()


def test_out_of_memory_batch_is_skipped(data_dir, tmp_path, caplog):
    t = Trainer(make_cfg(data_dir, tmp_path / "h", "checkpoint.no_save=true"))
    real = t.criterion
    calls = []

    def flaky(model, sample):
        calls.append(1)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(model, sample)

    t.criterion = flaky
    ds = t.task.load_dataset("train")
    b = ds.batches(200, seed=1, epoch=1)
    assert float(t.train_step([ds.collate(b[0])])["stepped"]) == 0.0
    assert "out of memory on a batch of shape" in caplog.text and t.oom_skipped == 1
    assert all(p.grad is None for p in t.model.parameters())
    assert float(t.train_step([ds.collate(b[1])])["stepped"]) == 1.0 and t.num_updates == 1


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_trains_with_fp32_master_weights(data_dir, tmp_path, precision):
    """bf16 / fp16 autocast (fp16 with loss scaling) on CPU: weights stay fp32, validation loss
    falls like fp32's, and the run resumes from its checkpoint."""
    runs = {}
    for prec in ("fp32", precision):
        t = Trainer(make_cfg(data_dir, tmp_path / prec, f"common.precision={prec}", "optimization.max_update=40",
                             "optimizer.lr=3e-3", "lr_scheduler=fixed"))
        start = t.validate()["loss"]
        runs[prec] = (t, start, t.run()["valid"]["loss"])
    t, start, end = runs[precision]
    assert all(p.dtype == torch.float32 for p in t.model.parameters())
    with t.precision.autocast():  # the forward pass really runs in the reduced type
        assert torch.nn.functional.linear(torch.ones(2, 3), torch.ones(4, 3)).dtype == getattr(torch, {
            "bf16": "bfloat16", "fp16": "float16"}[precision])
    assert end < 0.8 * start
    assert abs(end - runs["fp32"][2]) < 0.1 * runs["fp32"][2]  # close to the fp32 run
    resumed = Trainer(make_cfg(data_dir, tmp_path / precision, f"common.precision={precision}",
                               "optimization.max_update=45", "optimizer.lr=3e-3", "lr_scheduler=fixed"))
    assert resumed.run()["num_updates"] == 45
    import json

    with open(tmp_path / precision / "train_log.jsonl") as f:
        updates = [r["update"] for r in map(json.loads, f) if r["tag"] == "valid"]
    assert updates == sorted(updates) and updates[-1] == 45  # continued from 40, not from 0


def test_tied_parameters_are_saved_once_even_when_copied_to_cpu():
    """A GPU model's state is copied to the CPU name by name, which unties a tied table (seen on an
    H200: a share_all_embeddings student saved its 8008x128 table twice); retie makes it one again."""
    from seqkit.training.distributed import retie

    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight
    for wrapped in (model, torch.compile(model)):  # torch.compile's wrapper adds "_orig_mod." to the names
        copied = {k: v.detach().clone() for k, v in model.state_dict().items()}  # what the GPU offload gives
        assert copied["0.weight"].data_ptr() != copied["1.weight"].data_ptr()
        state = retie(wrapped, copied)
        assert state["1.weight"] is state["0.weight"]
        assert torch.equal(state["0.weight"], model[0].weight)
