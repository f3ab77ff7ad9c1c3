"""model.init_from: a translation Transformer starts from an XLM, MASS or BART checkpoint (seqkit/models/init_from.py)."""

import re

import pytest
import torch

from label_fixtures import one_line_error
from seqkit.cli.train import main as train

TRAIN = ["common.threads=1", "optimizer.lr=3e-3", "lr_scheduler=fixed", "dataset.max_tokens=2048",
         "common.log_interval=1"]
# a translation Transformer of xlm_tiny's shape (BERT's behaviour: GELU, learned positions, embedding norm, unscaled)
XLM_SHAPED = ["model=transformer_tiny", "model.embed_dim=32", "model.ffn_dim=128", "model.activation=gelu",
              "model.learned_positions=true", "model.embed_layer_norm=true", "model.no_scale_embedding=true",
              "model.max_source_positions=64", "model.max_target_positions=64", "model.num_langs=2",
              "model.share_all_embeddings=true", "model.dropout=0"]
MASS_SHAPED = ["model=transformer_tiny", "model.num_langs=2", "model.share_all_embeddings=true", "model.dropout=0"]


def losses(err):
    """Train losses by update, from the log lines."""
    return {int(u): float(v) for u, v in re.findall(r"\[train\] epoch \d+ \| update (\d+) \| loss ([\d.]+)", err)}


def logged_losses(ckpt):
    """Train losses by update, from the train_log.jsonl beside checkpoint ``ckpt`` (logged every update)."""
    import json

    rows = [json.loads(line) for line in (ckpt.parent / "train_log.jsonl").read_text().splitlines()]
    return {r["update"]: r["loss"] for r in rows if r["tag"] == "train"}


@pytest.fixture(scope="module")
def xlm_ckpt(toy_data, tmp_path_factory):
    """The last checkpoint of 40 XLM updates (MLM + TLM) on the toy folder."""
    from seqkit.cli.train import main

    _, data = toy_data
    save = tmp_path_factory.mktemp("xlm")
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            main(["task=xlm", f"task.data={data}", "model=xlm_tiny", "model.dropout=0", "criterion=masked_lm",
                  *TRAIN, "optimization.max_update=40", f"checkpoint.save_dir={save}"])
        except SystemExit as e:
            assert not e.code, err.getvalue()
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def mass_ckpt(toy_data, tmp_path_factory):
    from seqkit.cli.train import main

    _, data = toy_data
    save = tmp_path_factory.mktemp("mass")
    main(["task=mass", f"task.data={data}", *MASS_SHAPED, *TRAIN, "optimization.max_update=30",
          f"checkpoint.save_dir={save}"])
    return save / "checkpoint_last.pt"


def build_translation(data, overrides):
    """(task, model, model config) of a translation run with ``overrides``, as seqkit-train builds them."""
    from omegaconf import OmegaConf

    from seqkit.cli.common import ConfigBuilder
    from seqkit.core.registry import TASKS
    from seqkit.training.config import TrainConfig

    cfg = OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose([f"task.data={data}", *overrides]))
    task = TASKS.build(cfg.task)
    return task, task.build_model(cfg.model), cfg.model


def test_xlm_init_loads_encoder_into_both_stacks_and_leaves_cross_attention(xlm_ckpt, toy_data):
    from seqkit.core.checkpoints import load
    from seqkit.models.init_from import init_from

    _, data = toy_data
    task, model, mcfg = build_translation(data, XLM_SHAPED)
    cross_before = model.decoder_layers[0].cross_attn.out_proj.weight.detach().clone()
    loaded, kind = init_from(model, mcfg, task, str(xlm_ckpt))
    w = load(str(xlm_ckpt))["model"]
    V = len(task.src_dict)
    assert kind == "xlm"
    enc_q = w["encoder.layers.1.self_attn.out_proj.weight"]
    assert torch.equal(model.encoder_layers[1].self_attn.out_proj.weight, enc_q)
    assert torch.equal(model.decoder_layers[1].self_attn.out_proj.weight, enc_q)  # the decoder from the encoder too
    assert torch.equal(model.decoder_layers[0].self_res.norm.weight, w["encoder.layers.0.attn_res.norm.weight"])
    assert torch.equal(model.src_embed.weight, w["encoder.embed_tokens.weight"][:V])  # <mask> row dropped
    assert torch.equal(model.tgt_pos.weight, w["encoder.embed_positions.weight"])
    assert torch.equal(model.lang_embed.weight, w["encoder.embed_segments.weight"][[0, 1]])  # de, en
    assert torch.equal(model.decoder_layers[0].cross_attn.out_proj.weight, cross_before)  # random, as the paper
    assert "decoder_layers.0.cross_attn.out_proj.weight" not in loaded


def test_init_refuses_another_dictionary(xlm_ckpt, toy_data_factory, tmp_path, run_cli):
    _, other = toy_data_factory(tmp_path / "v150", vocab_size=150)
    r = run_cli(train, [f"task.data={other}", *XLM_SHAPED, f"model.init_from={xlm_ckpt}", *TRAIN,
                        "optimization.max_update=1", f"checkpoint.save_dir={tmp_path / 'ck'}"])
    one_line_error(r, "seqkit-train", "its dictionary", "differs from", "dict.de.txt", log_lines_allowed=True)
    assert not (tmp_path / "ck").exists()


@pytest.mark.parametrize("setting, fragment", [
    ("model.embed_dim=64", "64) here but encoder.embed_tokens.weight is ("),
    ("model.activation=relu", "model.activation=relu here, gelu in the checkpoint"),
    ("model.num_langs=0", "set model.num_langs=2"),
    ("checkpoint.restore_file=x.pt", "both give the starting weights"),
])
def test_init_refuses_a_model_the_weights_do_not_fit(setting, fragment, xlm_ckpt, toy_data, tmp_path, run_cli):
    _, data = toy_data
    r = run_cli(train, [f"task.data={data}", *XLM_SHAPED, f"model.init_from={xlm_ckpt}", setting, *TRAIN,
                        "optimization.max_update=1", f"checkpoint.save_dir={tmp_path / 'ck'}"])
    one_line_error(r, "seqkit-train", "model.init_from=", fragment, log_lines_allowed=True)


def test_init_refuses_a_language_the_checkpoint_lacks(toy_data, tmp_path, run_cli):
    _, data = toy_data
    save = tmp_path / "mlm_de"
    r = run_cli(train, ["task=xlm", f"task.data={data}", "task.langs=[de]", "task.tlm=false", "model=xlm_tiny",
                        "model.num_segments=1", "criterion=masked_lm", *TRAIN, "optimization.max_update=1",
                        f"checkpoint.save_dir={save}"])
    assert r.code == 0, r.err
    r = run_cli(train, [f"task.data={data}", *XLM_SHAPED, f"model.init_from={save / 'checkpoint_last.pt'}", *TRAIN,
                        "optimization.max_update=1", f"checkpoint.save_dir={tmp_path / 'ck'}"])
    one_line_error(r, "seqkit-train", "pretrained on languages de", "target language en is not one of them",
                   log_lines_allowed=True)


def first_losses(run_cli, data, model_args, init, tmp_path, at=1):
    """Train loss at update ``at`` of a translation run from checkpoint ``init`` and from random weights."""
    out = []
    for name, extra in (("init", [f"model.init_from={init}"]), ("random", [])):
        r = run_cli(train, [f"task.data={data}", *model_args, *extra, *TRAIN, f"optimization.max_update={at}",
                            f"checkpoint.save_dir={tmp_path / name}"])
        assert r.code == 0, r.err
        out.append(losses(r.err)[at])
    return out


def test_bart_init_loads_every_seq2seq_tensor(xlm_ckpt, toy_data, tmp_path, run_cli):
    from seqkit.cli.preprocess import main as preprocess
    from seqkit.core.checkpoints import load
    from seqkit.models.init_from import init_from

    raw, data = toy_data
    lm = tmp_path / "lm"  # German and English lines in the translation folder's pieces (vocab_from: its dictionary)
    (tmp_path / "mono.txt").write_text((raw / "train.de").read_text() + (raw / "train.en").read_text())
    r = run_cli(preprocess, ["task=language_modeling", f"trainpref={tmp_path / 'mono.txt'}",
                             f"vocab_from={xlm_ckpt}", f"destdir={lm}"])
    assert r.code == 0, r.err
    bart = ["model=transformer_tiny", "model.share_all_embeddings=true", "model.dropout=0"]
    r = run_cli(train, ["task=denoising", f"task.data={lm}", *bart, *TRAIN, "optimization.max_update=2",
                        "dataset.valid_subset=train", f"checkpoint.save_dir={tmp_path / 'bart'}"])
    assert r.code == 0, r.err
    task, model, mcfg = build_translation(data, bart)
    loaded, kind = init_from(model, mcfg, task, str(tmp_path / "bart" / "checkpoint_last.pt"))
    w = load(str(tmp_path / "bart" / "checkpoint_last.pt"))["model"]
    assert kind == "denoising" and {n for n, _ in model.named_parameters()} <= set(loaded)
    assert torch.equal(model.decoder_layers[1].cross_attn.out_proj.weight, w["decoder_layers.1.cross_attn.out_proj.weight"])
    assert torch.equal(model.src_embed.weight, w["src_embed.weight"][: len(task.src_dict)])


def test_resume_takes_the_same_init_file_however_written_and_refuses_another(mass_ckpt, toy_data, tmp_path, run_cli):
    import shutil

    _, data = toy_data
    ck = tmp_path / "ck"
    run = [f"task.data={data}", *MASS_SHAPED, *TRAIN, f"checkpoint.save_dir={ck}"]
    r = run_cli(train, [*run, f"model.init_from={mass_ckpt}", "optimization.max_update=1"])
    assert r.code == 0, r.err
    same = mass_ckpt.parent / ".." / mass_ckpt.parent.name / mass_ckpt.name  # another spelling of one file
    r = run_cli(train, [*run, f"model.init_from={same}", "optimization.max_update=2"])
    assert r.code == 0, r.err
    assert "resuming from" in r.err and "model.init_from: not read" in r.err
    other = tmp_path / "other.pt"
    shutil.copy(mass_ckpt, other)
    before = (ck / "checkpoint_last.pt").read_bytes()
    r = run_cli(train, [*run, f"model.init_from={other}", "optimization.max_update=3"])
    one_line_error(r, "seqkit-train", f"was started from model.init_from={same}, not {other}",
                   "takes its weights from its checkpoint", log_lines_allowed=True)
    assert (ck / "checkpoint_last.pt").read_bytes() == before
