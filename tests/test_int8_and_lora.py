"""quantize=int8 where it used to fail or do nothing (issue 46): a LoRA checkpoint (its updates are
merged, then quantized) through Classifier.from_checkpoint and seqkit-generate; in-context
classification (its language model in int8); ConvS2S (refused in one line: its layers are
weight-normed convolutions that dynamic quantization does not cover)."""

import copy
import shutil

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn
from transfer_fixtures import binarize, make_text, pretrain, run

from seqkit.cli.generate import _in_context
from seqkit.cli.generate import main as generate_main
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.generation.classifier import Classifier
from seqkit.generation.config import GenerateConfig
from seqkit.generation.quantize import quantize_int8
from seqkit.models.convs2s import convs2s_tiny

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return make_text(tmp_path_factory.mktemp("int8_text"))


@pytest.fixture(scope="module")
def lora_ckpt(text, tmp_path_factory):
    """(a LoRA fine-tuning checkpoint of a tiny BERT, not merged; its classification folder). A high
    rate moves the updates far enough that dropping them would change every prediction."""
    root = tmp_path_factory.mktemp("int8_lora")
    pretrain(text, "bert", root / "pre", updates=2)
    base = root / "pre" / "checkpoint_last.pt"
    data = binarize(text, root / "cls", base)
    run(["task=classification", f"task.data={data}", "model=pretrained_classifier", f"model.path={base}",
         "criterion=cross_entropy", "model.dropout=0", f"checkpoint.save_dir={root / 'ft'}", "model.adapt=lora",
         "model.lora.rank=4", "model.lora.targets=[qkv_proj,out_proj,fc1,fc2]", "optimizer.lr=0.05",
         "optimization.max_update=8"])
    return root / "ft" / "checkpoint_last.pt", data


@pytest.fixture(scope="module")
def lm_ckpt(text, tmp_path_factory):
    """(a GPT language model after 30 updates; the classification folder in its vocabulary)."""
    root = tmp_path_factory.mktemp("int8_lm")
    pretrain(text, "gpt", root / "pre", updates=30)
    ck = root / "pre" / "checkpoint_last.pt"
    return ck, binarize(text, root / "cls", ck)


def label_probs(out):
    """``{sid: [(label, prob), ...]}`` from seqkit-generate's L- lines."""
    found = {}
    for line in out.splitlines():
        if line.startswith("L-"):
            sid, *rest = line.split("\t")
            found[int(sid[2:])] = [(rest[i], float(rest[i + 1])) for i in range(0, len(rest), 2)]
    return found


def test_lora_classifier_int8_stays_close_to_fp32_lora(lora_ckpt):
    ck, data = lora_ckpt
    fp32 = Classifier.from_checkpoint(str(ck), task_overrides={"data": str(data)})
    int8 = Classifier.from_checkpoint(str(ck), task_overrides={"data": str(data)}, quantize="int8")
    assert sum(hasattr(m, "lora") for m in fp32.model.modules()) == 2 * 4  # 2 layers x 4 targets, unmerged
    assert not any(type(m) is nn.Linear or hasattr(m, "lora") or m._forward_hooks for m in int8.model.modules())
    no_update = copy.deepcopy(fp32.model)  # the base alone: what int8 would compute had the updates been lost
    for m in no_update.modules():
        if hasattr(m, "lora"):
            m.lora.B.data.zero_()
    ds = fp32.task.load_dataset("valid")
    batch = ds.collate(list(range(len(ds))))
    with torch.inference_mode():
        want = fp32.model(**batch["net_input"])  # (N, 2) logits
        got = int8.model(**batch["net_input"])
        without = no_update(**batch["net_input"])
    scale = want.abs().max()
    assert (without - want).abs().max() > 0.3 * scale  # the updates matter at this size...
    assert (got - want).abs().max() < 0.05 * scale  # ...and int8 keeps them
    assert (got.softmax(-1) - want.softmax(-1)).abs().max() < 0.02
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= 0.95


def test_generate_int8_on_a_lora_checkpoint(lora_ckpt, run_cli):
    ck, data = lora_ckpt
    gen = ["common.threads=1", f"path={ck}", f"task.data={data}", "gen_subset=valid"]
    fp32, int8 = run_cli(generate_main, gen), run_cli(generate_main, gen + ["quantize=int8"])
    assert fp32.code == 0 and int8.code == 0, int8.err
    assert "Traceback" not in int8.err
    assert "8 LoRA update(s) merged" in int8.err and "quantize=int8: " in int8.err
    a, b = label_probs(fp32.out), label_probs(int8.out)
    assert len(a) == len(b) == 20
    for sid in a:
        assert a[sid][0][0] == b[sid][0][0]
        assert abs(a[sid][0][1] - b[sid][0][1]) < 0.02
    # stdin too: raw sentences, the same labels as fp32's
    lines = "v0 v3 v4 .\nv5 v6 v7 .\n"
    stdin = ["common.threads=1", f"path={ck}", "input=-"]  # no split: task.data and gen_subset would be refused
    s32 = run_cli(generate_main, stdin, stdin=lines)
    s8 = run_cli(generate_main, stdin + ["quantize=int8"], stdin=lines)
    assert s32.code == 0 and s8.code == 0, s8.err
    assert [p[0][0] for p in label_probs(s8.out).values()] == [p[0][0] for p in label_probs(s32.out).values()]


def _icl_config(ck, data, quantize):
    """seqkit-generate's config for in-context classification of ``data`` with the LM ``ck``."""
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(GenerateConfig), {
        "path": str(ck), "task": {"data": str(data)}, "quantize": quantize,
        "icl": {"verbalizers": ["v1", "v2"], "shots": 2}}))


def test_in_context_int8_quantizes_the_language_model(lm_ckpt):
    ck, data = lm_ckpt
    fp32 = _in_context(_icl_config(ck, data, "none"), torch.device("cpu"))
    int8 = _in_context(_icl_config(ck, data, "int8"), torch.device("cpu"))
    assert any(type(m) is nn.Linear for m in fp32.model.modules())
    assert not any(type(m) is nn.Linear for m in int8.model.modules())
    ds = fp32.task.load_dataset("valid")
    prompts = [fp32.prompt(i, ds.src[i].tolist()) for i in range(8)]
    assert prompts == [int8.prompt(i, ds.src[i].tolist()) for i in range(8)]
    want, got = fp32.label_scores(prompts), int8.label_scores(prompts)  # (8, 2) log-probabilities
    assert not torch.equal(want, got)  # int8 did run
    assert (got - want).abs().max() < 0.05 * want.abs().max()


def test_generate_in_context_int8(lm_ckpt, run_cli):
    ck, data = lm_ckpt
    gen = ["common.threads=1", f"path={ck}", f"task.data={data}", "gen_subset=valid", "icl.verbalizers=[v1,v2]",
           "icl.shots=2", "topk=2"]
    fp32, int8 = run_cli(generate_main, gen), run_cli(generate_main, gen + ["quantize=int8"])
    assert fp32.code == 0 and int8.code == 0, int8.err
    assert "quantize=int8: " in int8.err and "quantize=int8: " not in fp32.err
    a, b = label_probs(fp32.out), label_probs(int8.out)
    assert len(a) == len(b) == 20
    gaps = [abs(dict(a[sid])["0"] - dict(b[sid])["0"]) for sid in a]  # label 0's probability, fp32 vs int8
    assert max(gaps) < 0.05 and sum(gaps) / len(gaps) < 0.01


def test_in_context_refuses_data_of_another_dictionary(lm_ckpt, run_cli, tmp_path):
    """The dictionary check (Dictionary.is_prefix_of): two symbols of the folder's dictionary swapped."""
    ck, data = lm_ckpt
    other = tmp_path / "cls"
    shutil.copytree(data, other)
    lines = (other / "dict.input.txt").read_text(encoding="utf-8").splitlines()
    lines[0], lines[1] = lines[1], lines[0]
    (other / "dict.input.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = run_cli(generate_main, ["common.threads=1", f"path={ck}", f"task.data={other}", "gen_subset=valid",
                                "icl.verbalizers=[v1,v2]"])
    assert r.code == 1 and r.messages == [f"seqkit-generate: error: {other} was binarized with another dictionary "
                                          f"than {ck}'s: run seqkit-preprocess task=classification vocab_from={ck}"]


CONV_REFUSAL = ("quantize=int8: ConvS2SModel has no nn.Linear, nn.LSTM or nn.GRU layer for torch's dynamic int8 "
                "quantization to convert; its weights are in")


def test_convs2s_int8_is_refused():
    d = Dictionary([f"w{i}" for i in range(12)])
    model = MODELS.build(convs2s_tiny(), d, d)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(SeqkitError) as e:
        quantize_int8(model)
    msg = str(e.value)
    assert msg.startswith(CONV_REFUSAL) and "WNConv1d" in msg and "convolutions" in msg and "\n" not in msg
    assert msg.endswith("use quantize=none")
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # left as it was


def test_generate_convs2s_int8_is_one_line(toy_data, tiny_train_args, fast_gen_args, run_cli, tmp_path):
    from seqkit.cli.train import main as train

    _, data = toy_data
    train(tiny_train_args + ["model=convs2s_tiny", f"task.data={data}", f"checkpoint.save_dir={tmp_path}",
                             "optimization.max_update=1", "checkpoint.no_epoch_checkpoints=true"])
    r = run_cli(generate_main, fast_gen_args + [f"task.data={data}", f"path={tmp_path / 'checkpoint_last.pt'}",
                                                "quantize=int8"])
    assert r.code == 1 and len(r.messages) == 1, r.err
    assert r.messages[0].startswith(f"seqkit-generate: error: {CONV_REFUSAL}") and "WNConv1d" in r.messages[0]
