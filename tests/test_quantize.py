"""Inference-time weight rewrites of seqkit's own engine. quantize=int8: every Linear of a trained tiny
Transformer, its tied output projection included, becomes a dynamically quantized int8 layer whose
logits stay close to fp32's, and ``seqkit-generate quantize=int8`` translates as fp32 mostly does.
packed_weights: oneDNN-prepacked Linear layers compute what ``F.linear`` does and translate alike."""

import copy
import logging

import pytest
import torch
from torch import nn

from seqkit.cli.generate import main as generate_main
from seqkit.core.checkpoints import load_for_inference
from seqkit.generation import packed
from seqkit.generation.packed import PackedLinear, pack_linear_weights
from seqkit.generation.quantize import quantize_int8

from label_fixtures import pairs, pairs_ckpt, single, single_ckpt, tagged, tagged_ckpt  # noqa: F401  (fixtures)

needs_onednn = pytest.mark.skipif(not packed.packing_available(), reason="torch built without oneDNN")


@pytest.fixture(scope="module")
def checkpoint(toy_data, tiny_train_args, tmp_path_factory):
    from seqkit.cli.train import main as train

    _, data = toy_data
    root = tmp_path_factory.mktemp("int8")
    train(tiny_train_args + [f"task.data={data}", f"checkpoint.save_dir={root}", "optimization.max_update=150",
                             "checkpoint.no_epoch_checkpoints=true"])
    return str(root / "checkpoint_best.pt")


def test_every_linear_is_int8_and_logits_stay_close(checkpoint):
    task, model = load_for_inference(checkpoint)
    fp32 = copy.deepcopy(model).eval()
    assert model.output_proj is None  # transformer_tiny ties the output projection to the embeddings
    quantize_int8(model.eval())
    assert not any(type(m) is nn.Linear for m in model.modules())
    int8 = [m for m in model.modules() if type(m).__module__.startswith("torch.ao.nn.quantized.dynamic")]
    # 2 encoder layers x 4 (qkv, out, ffn in, ffn out) + 2 decoder layers x 7 (+ q, kv, out) + the output
    assert len(int8) == 2 * 4 + 2 * 7 + 1
    assert model.output_proj.weight().dtype == torch.qint8
    # teacher-forced logits of the first test sentences: within a few percent, same best token
    ds = task.load_dataset("test", with_target=True)
    src = nn.utils.rnn.pad_sequence([ds.src[i] for i in range(8)], batch_first=True, padding_value=task.src_dict.pad())
    lengths = src.ne(task.src_dict.pad()).sum(1)
    prev = torch.full((8, 6), task.tgt_dict.eos())
    with torch.inference_mode():
        want = fp32.decode(prev, fp32.encode(src, lengths))  # (8, 6, V)
        got = model.decode(prev, model.encode(src, lengths))
    assert (got - want).abs().max() / want.abs().max() < 0.05
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= 0.9


def test_generate_int8_translates_like_fp32(checkpoint, toy_data, run_cli, fast_gen_args):
    _, data = toy_data
    gen = fast_gen_args + [f"task.data={data}", f"path={checkpoint}"]
    fp32, int8 = run_cli(generate_main, gen), run_cli(generate_main, gen + ["quantize=int8"])
    assert fp32.code == 0 and int8.code == 0, int8.err
    assert "quantize=int8: 23 layers" in int8.err and "packed_weights" not in int8.err  # int8 is not packed

    def hypotheses(text):
        return [line.split("\t")[-1] for line in text.splitlines() if line.startswith("D-")]

    a, b = hypotheses(fp32.out), hypotheses(int8.out)
    assert len(a) == len(b) == 40
    assert sum(x == y for x, y in zip(a, b)) >= 34  # 38 of 40 at 150 updates (2026-11-28); 28 at 60


def test_bad_quantize_requests_are_one_line_errors(checkpoint, toy_data, run_cli):
    _, data = toy_data
    gen = ["common.threads=1", f"task.data={data}", f"path={checkpoint}"]
    r = run_cli(generate_main, gen + ["quantize=int8", "engine=ctranslate2"])
    assert r.code == 1 and r.messages == ["seqkit-generate: error: quantize=int8 is seqkit's engine; "
                                          "engine=ctranslate2 takes compute_type=int8"]
    r = run_cli(generate_main, gen + ["quantize=int8", "common.precision=bf16"])
    assert r.code == 1 and r.messages == ["seqkit-generate: error: quantize=int8 computes around fp32 activations: "
                                          "drop common.precision=bf16"]
    r = run_cli(generate_main, gen + ["quantize=int4"])
    assert r.code != 0 and len(r.messages) == 1 and "quantize" in r.messages[0] and "int8" in r.messages[0]


@needs_onednn
def test_packed_linear_computes_what_linear_does():
    torch.manual_seed(0)
    for lin, x in ((nn.Linear(48, 80), torch.randn(5, 48)), (nn.Linear(48, 80, bias=False), torch.randn(3, 1, 48)),
                   (nn.Linear(16, 8), torch.randn(2, 7, 16).transpose(0, 1))):  # (7, 2, 16), not contiguous
        p = PackedLinear(lin)
        assert p.weight is lin.weight and p.bias is lin.bias
        with torch.inference_mode():
            got, want = p(x), lin(x)
        assert got.shape == want.shape
        assert (got - want).abs().max() < 1e-5


@needs_onednn
def test_pack_keeps_state_dict_and_skips_small_layers(checkpoint):
    _, model = load_for_inference(checkpoint)
    keys = set(model.state_dict())
    # transformer_tiny (d 64, ffn 128): its largest Linear (the tied output projection, V x 64) is
    # below the default threshold, so nothing is packed; with no threshold every Linear is
    assert pack_linear_weights(model) == 0
    assert pack_linear_weights(model, min_numel=0) == 23
    assert not any(type(m) is nn.Linear for m in model.modules())
    assert set(model.state_dict()) == keys | {"output_proj.weight"}  # untied: shares the embedding's tensor
    assert model.output_proj.weight is model.tgt_embed.weight


@needs_onednn
def test_generate_packed_translates_as_plain(checkpoint, toy_data, run_cli, fast_gen_args, monkeypatch, caplog):
    _, data = toy_data
    monkeypatch.setattr(packed, "MIN_NUMEL", 0)  # pack every layer of the tiny model
    caplog.set_level(logging.DEBUG, logger="seqkit.generate")  # the packing line is logged at DEBUG
    gen = fast_gen_args + [f"task.data={data}", f"path={checkpoint}"]
    plain, fast = run_cli(generate_main, gen + ["packed_weights=false"]), run_cli(generate_main, gen)
    assert plain.code == 0 and fast.code == 0, fast.err
    assert "packed_weights: 23 Linear layers prepacked" in fast.err and "packed_weights" not in plain.err

    def lines(text, kind):
        return [line.split("\t") for line in text.splitlines() if line.startswith(kind)]

    assert [h[-1] for h in lines(fast.out, "D-")] == [h[-1] for h in lines(plain.out, "D-")]
    assert len(lines(fast.out, "D-")) == 40
    for a, b in zip(lines(fast.out, "P-"), lines(plain.out, "P-")):  # positional scores to rounding
        assert max(abs(float(x) - float(y)) for x, y in zip(a[1].split(), b[1].split())) < 1e-3


@pytest.mark.parametrize("fixture", ["single_ckpt", "pairs_ckpt", "tagged_ckpt"])
def test_int8_classifiers_and_taggers_stay_close_to_fp32(fixture, request):
    """cbow_tiny, transformer_classifier_tiny (pairs) and bilstm_tagger_tiny: every Linear and LSTM in
    int8, label probabilities within 0.05 of fp32's, the same label for 90% of the examples."""
    from seqkit.generation.classifier import Classifier

    save_dir = request.getfixturevalue(fixture)
    data = str(save_dir.parent / "bin")
    fp32 = Classifier.from_checkpoint(str(save_dir / "checkpoint_last.pt"), task_overrides={"data": data})
    int8 = Classifier.from_checkpoint(str(save_dir / "checkpoint_last.pt"), task_overrides={"data": data},
                                      quantize="int8")
    assert not any(type(m) in (nn.Linear, nn.LSTM) for m in int8.model.modules())
    ds = fp32.task.load_dataset("valid")
    batch = ds.collate(list(range(len(ds))))
    with torch.inference_mode():
        want = fp32.model(**batch["net_input"]).softmax(-1)
        got = int8.model(**batch["net_input"]).softmax(-1)
    keep = batch["target"].ne(fp32.task.ignore_index)
    assert (got - want)[keep].abs().max() < 0.05
    assert (got.argmax(-1) == want.argmax(-1))[keep].float().mean() >= 0.9
    with pytest.raises(Exception, match="fp32 activations"):
        Classifier.from_checkpoint(str(save_dir / "checkpoint_last.pt"), precision="bf16", quantize="int8")
