"""Every adaptation mode of model=pretrained_classifier (seqkit.adapt), on tiny pretrained bodies:
what each mode trains, what stays bit-identical, adapters and LoRA at their start and merge,
prompt tuning with k = 0, ULMFiT's rates and unfreezing, parameter-efficient files, bad input."""

import copy
import re

import pytest
import torch
from transfer_fixtures import binarize, make_text, pretrain, pretrained_bodies, run, trainer_for

from seqkit.adapt.lora import merge_lora
from seqkit.adapt.modes import count_parameters
from seqkit.cli.common import ConfigBuilder
from seqkit.core import checkpoints
from seqkit.core.errors import SeqkitError
from seqkit.export.checkpoint import export_checkpoint
from seqkit.generation.classifier import Classifier
from seqkit.optim.groups import param_groups
from seqkit.training.config import TrainConfig

BODIES = ["gpt", "lstm_lm", "elmo", "bert", "electra", "bart"]
TRANSFORMERS = ["gpt", "bert", "electra", "bart"]


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return make_text(tmp_path_factory.mktemp("adapt"))


@pytest.fixture(scope="module")
def bodies(text, tmp_path_factory):
    """body -> (its pretraining checkpoint, the classification data binarized in its vocabulary)."""
    return pretrained_bodies(text, BODIES, tmp_path_factory)


def finetune(bodies, body, save, *overrides):
    ck, data = bodies[body]
    return ["task=classification", f"task.data={data}", "model=pretrained_classifier", f"model.path={ck}",
            "criterion=cross_entropy", "model.dropout=0", f"checkpoint.save_dir={save}", *overrides]


def expected_trainable(name, mode):
    """Whether parameter ``name`` of a pretrained classifier trains in ``mode``, by its name alone."""
    if not name.startswith("body.") or mode in ("full", "ulmfit"):
        return True  # the head, ELMo's mix, the prompt
    last = name.rsplit(".", 1)[-1]
    return {"frozen": False, "prompt": False, "bitfit": last.startswith("bias"),
            "adapter": ".adapter." in name or "norm" in name, "lora": ".lora." in name}[mode]


def batch_of(trainer):
    dataset = trainer.task.load_dataset("train")
    return dataset.collate(dataset.batches(512, 0, shuffle=False)[0])


CASES = [(b, m) for m in ("full", "frozen", "bitfit", "prompt", "ulmfit") for b in BODIES]
CASES += [(b, m) for m in ("adapter", "lora") for b in TRANSFORMERS]


@pytest.mark.parametrize("body,mode", CASES, ids=[f"{b}-{m}" for b, m in CASES])
def test_each_mode_trains_exactly_its_parameters(bodies, tmp_path, body, mode):
    trainer = trainer_for(finetune(bodies, body, tmp_path, f"model.adapt={mode}", "model.lora.targets=[qkv_proj,fc2]",
                                   "model.ulmfit.gradual_unfreezing=false", "optimizer.lr=0.05"))
    model = trainer.model
    named = dict(model.named_parameters())
    assert {n for n, p in named.items() if p.requires_grad} == {n for n in named if expected_trainable(n, mode)}
    before = {n: p.detach().clone() for n, p in named.items()}
    sample = batch_of(trainer)
    trainer.train_step([sample])
    trainer.train_step([sample])
    for n, p in named.items():
        if not p.requires_grad:
            assert torch.equal(p, before[n]), f"{n} changed"
    assert not torch.equal(named["head.out.weight"], before["head.out.weight"])
    if mode in ("adapter", "lora", "bitfit", "prompt"):  # the body's own added parameters learn too
        assert any(not torch.equal(p, before[n]) for n, p in named.items() if p.requires_grad and not n.startswith("head."))


@pytest.mark.parametrize("body", TRANSFORMERS)
def test_adapters_and_lora_start_as_the_body(bodies, tmp_path, body):
    sample = None
    outputs = {}
    for mode in ("full", "adapter", "lora"):
        torch.manual_seed(5)
        trainer = trainer_for(finetune(bodies, body, tmp_path / mode, f"model.adapt={mode}",
                                       "model.lora.targets=[qkv_proj,out_proj,fc1,fc2]"))
        sample = sample or batch_of(trainer)
        with torch.no_grad():
            outputs[mode] = trainer.model.eval().features(**sample["net_input"])
    assert torch.equal(outputs["adapter"], outputs["full"])
    assert torch.equal(outputs["lora"], outputs["full"])


@pytest.mark.parametrize("body", ["bert", "gpt"])
def test_merged_lora_equals_unmerged_and_stands_alone(bodies, tmp_path, body):
    trainer = run(finetune(bodies, body, tmp_path / "ft", "model.adapt=lora", "model.lora.rank=4",
                           "model.lora.targets=[qkv_proj,out_proj,fc1]", "optimizer.lr=0.02", "optimization.max_update=6"))
    model = trainer.model.eval()
    sample = batch_of(trainer)["net_input"]
    lora = [m.lora for m in model.modules() if hasattr(m, "lora")]
    assert lora and all(m.B.abs().sum() > 0 for m in lora)  # the updates moved away from zero
    with torch.no_grad():
        unmerged = model(**sample)
        merged_model = copy.deepcopy(model)
        assert merge_lora(merged_model) == len(lora)
        merged = merged_model(**sample)
    assert not any(hasattr(m, "lora") or m._forward_hooks for m in merged_model.modules())
    torch.testing.assert_close(merged, unmerged, atol=1e-5, rtol=0)
    # seqkit-export format=checkpoint: the same merge, written as an ordinary checkpoint
    out = tmp_path / "merged.pt"
    export_checkpoint(str(tmp_path / "ft" / "checkpoint_last.pt"), str(out))
    state = checkpoints.load(str(out))
    assert state["cfg"]["model"]["adapt"] == "full" and state["cfg"]["model"]["base_sha256"] == ""
    assert not any(".lora." in k for k in state["model"])
    base = bodies[body][0]
    moved = base.with_suffix(".away")
    base.rename(moved)
    try:
        clf = Classifier.from_checkpoint(str(out))  # needs no base
        with torch.no_grad():
            torch.testing.assert_close(clf.model(**sample), unmerged, atol=1e-5, rtol=0)
    finally:
        moved.rename(base)


def test_prompt_of_length_zero_is_frozen_features(bodies, tmp_path):
    runs = {}
    for mode, extra in (("frozen", []), ("prompt", ["model.prompt.length=0"])):
        torch.manual_seed(7)
        runs[mode] = run(finetune(bodies, "gpt", tmp_path / mode, f"model.adapt={mode}", "optimization.max_update=4",
                                  "model.dropout=0.1", *extra))
    a, b = runs["frozen"].model, runs["prompt"].model
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k


def test_prompt_vectors_start_as_vocabulary_embeddings(bodies, tmp_path):
    trainer = trainer_for(finetune(bodies, "bert", tmp_path, "model.adapt=prompt", "model.prompt.length=5"))
    vectors = trainer.model.prompt.vectors.detach()
    table = trainer.model.body.transfer_embed(torch.arange(len(trainer.task.src_dict))).detach()  # (V, C)
    assert vectors.shape == (5, table.size(1))
    for v in vectors:  # each one is some token's input vector
        assert (table - v).abs().amax(dim=1).min() == 0


def test_prompt_vectors_take_their_own_rate_and_the_head_the_run_s(bodies, tmp_path):
    trainer = trainer_for(finetune(bodies, "gpt", tmp_path, "model.adapt=prompt", "model.prompt.lr_scale=30",
                                   "optimizer.lr=0.001", "lr_scheduler=fixed", "optimization.max_update=1"))
    trainer.run()
    rates = {g["name"]: g["lr"] for g in trainer.optimizer.param_groups}
    assert rates == {"prompt": pytest.approx(0.03), "rest": pytest.approx(0.001),
                     "rest (no decay)": pytest.approx(0.001)}
    prompt = next(g for g in trainer.optimizer.param_groups if g["name"] == "prompt")
    assert prompt["params"] == [trainer.model.prompt.vectors]


def test_ulmfit_rates_and_gradual_unfreezing(bodies, tmp_path):
    save = tmp_path / "ft"
    args = finetune(bodies, "gpt", save, "model.adapt=ulmfit", "lr_scheduler=slanted_triangular", "optimizer.lr=0.01",
                    "optimization.max_update=10", "optimizer=adam")
    first = trainer_for([*args, "optimization.max_epoch=1"])
    groups = first.optimizer.param_groups
    # head, then the body top down: layer 1 with the final norm, layer 0, embeddings with positions
    assert [g["name"] for g in groups if "no decay" not in g["name"]] == ["head", "body.2", "body.1", "body.0"]
    assert sorted({g["from_epoch"] for g in groups}) == [1, 2, 3, 4]
    start = {n: p.detach().clone() for n, p in first.model.named_parameters()}
    first.run()
    n1 = first.num_updates
    changed = {n for n, p in first.model.named_parameters() if not torch.equal(p, start[n])}
    assert changed and all(n.startswith("head.") for n in changed)  # epoch 1: the head alone
    second = trainer_for([*args, "optimization.max_epoch=2"])
    second.run()  # resumes after epoch 1
    changed = {n for n, p in second.model.named_parameters() if not torch.equal(p, start[n])}
    assert {n.split(".")[0] for n in changed} == {"head", "body"}
    assert all(n.startswith(("head.", "body.layers.1.", "body.final_norm.")) for n in changed), changed
    third = trainer_for([*args, "optimization.max_epoch=100"])
    third.run()
    assert third.num_updates == 10 > n1
    # the rates of the last update (update 9 of 10, slanted triangular cut at 1): worked out by hand
    rates = {g["name"]: g["lr"] for g in third.optimizer.param_groups}
    expected = {"head": 1.3888888888888889e-3, "body.2": 5.341880341880342e-4, "body.1": 2.0545693622616698e-4,
                "body.0": 7.902189854852576e-05}
    for name, rate in expected.items():
        assert rates[name] == pytest.approx(rate, rel=1e-12)
        assert rates.get(f"{name} (no decay)", rate) == pytest.approx(rate, rel=1e-12)  # (embeddings: no such group)


def test_parameter_efficient_checkpoint_holds_what_it_trained_and_reloads(bodies, tmp_path, caplog):
    caplog.set_level("INFO")
    trainer = run(finetune(bodies, "bert", tmp_path / "lora", "model.adapt=lora", "optimization.max_update=4"))
    full = run(finetune(bodies, "bert", tmp_path / "full", "optimization.max_update=1"))
    model = trainer.model.eval()
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    state = checkpoints.load(str(tmp_path / "lora" / "checkpoint_last.pt"))
    assert set(state["model"]) == trained
    # (at this size the head is a large share: 4,194 of 24,258 parameters train)
    assert (tmp_path / "lora" / "checkpoint_last.pt").stat().st_size * 3 < (tmp_path / "full" / "checkpoint_last.pt").stat().st_size
    sample = batch_of(trainer)["net_input"]
    clf = Classifier.from_checkpoint(str(tmp_path / "lora" / "checkpoint_last.pt"))
    with torch.no_grad():
        assert torch.equal(clf.model(**sample), model(**sample))
    # the same line, with the same figures as a count done here, for every mode
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("trainable parameters:")]
    assert len(lines) == 2, lines  # one line per run (an empty capture must not pass the loop below)
    for line, t in zip(lines, (trainer, full)):
        trainable, total = count_parameters(t.model)
        seen = {id(p): p for p in t.model.parameters()}.values()
        assert trainable == sum(p.numel() for p in seen if p.requires_grad)
        assert total == sum(p.numel() for p in seen)
        m = re.fullmatch(r"trainable parameters: ([\d,]+) of ([\d,]+) \(([\d.e-]+)%\)", line)
        assert m and (int(m[1].replace(",", "")), int(m[2].replace(",", ""))) == (trainable, total)
        assert float(m[3]) == pytest.approx(100 * trainable / total, rel=1e-2)


def test_a_different_base_is_refused(bodies, text, tmp_path):
    base = tmp_path / "base.pt"
    base.write_bytes(bodies["gpt"][0].read_bytes())
    ck, data = bodies["gpt"]
    args = finetune(bodies, "gpt", tmp_path / "ft", "model.adapt=bitfit", "optimization.max_update=1")
    run([a if not a.startswith("model.path=") else f"model.path={base}" for a in args])
    other = tmp_path / "other"
    pretrain(text, "gpt", other, updates=3)  # the same architecture, other weights
    base.write_bytes((other / "checkpoint_last.pt").read_bytes())
    with pytest.raises(SeqkitError, match=r"is not the base this model was trained from \(its sha256"):
        Classifier.from_checkpoint(str(tmp_path / "ft" / "checkpoint_last.pt"))
    with pytest.raises(SeqkitError, match="is not the base this run was trained from"):  # resuming too
        trainer_for([a if not a.startswith("model.path=") else f"model.path={base}" for a in args]).run()


@pytest.mark.parametrize("body,overrides,message", [
    ("lstm_lm", ["model.adapt=adapter"], "model.adapt=adapter needs Transformer layers, and the LSTMLM body has none"),
    ("elmo", ["model.adapt=lora"], "match(es) no layer of the ELMo body; it has no nn.Linear layer"),
    ("gpt", ["model.adapt=lora", "model.lora.targets=[q_proj]"], "q_proj match(es) no layer of the TransformerLM body; "
                                                                  "its Linear layers: fc1, fc2, out_proj, qkv_proj"),
    ("gpt", ["model.adapt=lora", "model.lora.rank=65"],
     "model.lora.rank=65 is out of range for layers.0.self_attn.qkv_proj (64 -> 192): at most 64"),
    ("bert", ["model.adapt=adapter", "model.adapter.reduction_factor=33"],
     "model.adapter.reduction_factor=33 is out of range: at most the hidden size 32"),
])
def test_a_mode_that_does_not_fit_is_one_line(bodies, tmp_path, body, overrides, message):
    with pytest.raises(SeqkitError) as e:
        trainer_for(finetune(bodies, body, tmp_path, *overrides))
    assert message in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "checkpoint_last.pt").exists()


@pytest.mark.parametrize("overrides,message", [
    (["model=kim_cnn_tiny", "model.adapt=lora"], "unknown config key 'model.adapt'"),
    (["model=pretrained_classifier", "model.lora.bogus=1"], "unknown config key 'model.lora.bogus'; valid keys of "
                                                             "model 'pretrained_classifier'.lora: rank, alpha, dropout, targets"),
    (["model=pretrained_classifier", "model.lora.rank=0"], "model.lora.rank=0 is out of range: must be > 0"),
    (["model=pretrained_classifier", "model.adapt=lorax"], "model.adapt='lorax' is not valid"),
])
def test_bad_settings_are_one_line(overrides, message):
    from omegaconf import OmegaConf

    from seqkit.core.config import check_ranges

    with pytest.raises(SeqkitError, match=re.escape(message)):
        cfg = ConfigBuilder("train", TrainConfig).compose(["task=classification", *overrides])
        check_ranges(OmegaConf.to_object(cfg))


def test_no_weight_decay_on_biases_and_norms():
    model = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    groups = param_groups(model, 0.01)
    decay = {id(p) for g in groups if g["weight_decay"] == 0.01 for p in g["params"]}
    assert decay == {id(model[0].weight), id(model[1].weight)}
    assert sum(len(g["params"]) for g in groups) == 5  # each once: embedding, weight, bias, norm weight and bias


def test_ulmfit_middle_stage_goes_on_with_the_language_model_over_the_task_text(bodies, text, tmp_path):
    """ULMFiT's second stage: the task's own sentences binarized in the pretrained LM's vocabulary
    (vocab_from=), the LM trained on from its weights (restore_file=), then the classifier from it."""
    from seqkit.data.dictionary import Dictionary
    from seqkit.preprocess.text import PreprocessConfig, preprocess
    from seqkit.tokenizers.space import SpaceConfig

    ck = bodies["gpt"][0]
    sentences = [row.split("\t")[0] for row in (text / "train.tsv").read_text().splitlines()[1:]]
    (tmp_path / "task.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    preprocess(PreprocessConfig(task="language_modeling", trainpref=str(tmp_path / "task.txt"),
                                validpref=str(tmp_path / "task.txt"), destdir=str(tmp_path / "lm"),
                                tokenizer=SpaceConfig(), vocab_from=str(ck)))
    pretrained_dict = Dictionary.from_state_dict(checkpoints.load(str(ck))["task_state"]["dict"])
    assert Dictionary.load(str(tmp_path / "lm" / "dict.text.txt")).symbols == pretrained_dict.symbols
    lm = run(["task=language_modeling", f"task.data={tmp_path / 'lm'}", "model=gpt_tiny", "task.tokens_per_sample=24",
              "criterion=cross_entropy", f"checkpoint.restore_file={ck}", "optimization.max_update=3",
              f"checkpoint.save_dir={tmp_path / 'lm_ft'}"])
    assert lm.num_updates == 3
    data = binarize(text, tmp_path / "cls", tmp_path / "lm_ft" / "checkpoint_last.pt")
    clf = run(["task=classification", f"task.data={data}", "model=pretrained_classifier", "model.adapt=ulmfit",
               f"model.path={tmp_path / 'lm_ft' / 'checkpoint_last.pt'}", "optimization.max_update=2",
               f"checkpoint.save_dir={tmp_path / 'clf'}"])
    assert clf.num_updates == 2
    with pytest.raises(SeqkitError, match="vocab_from= applies to task=classification, tagging and language_modeling"):
        preprocess(PreprocessConfig(source_lang="de", target_lang="en", trainpref=str(tmp_path / "x"),
                                    destdir=str(tmp_path / "t"), tokenizer=SpaceConfig(), vocab_from=str(ck)))


@pytest.mark.parametrize("mode", ["prompt", "adapter", "lora", "bitfit"])
def test_a_tagger_adapts_alike_and_keeps_one_label_per_position(bodies, mode):
    from seqkit.core.registry import MODELS
    from seqkit.data.dictionary import Dictionary
    from seqkit.models.pretrained import PretrainedTaggerConfig

    ck = bodies["bert"][0]
    src = Dictionary.from_state_dict(checkpoints.load(str(ck))["task_state"]["dict"])
    model = MODELS.build(PretrainedTaggerConfig(path=str(ck), adapt=mode), src, 5).eval()
    tokens = torch.tensor([[1, 6, 7, 8, 2], [1, 9, 2, 0, 0]])
    with torch.no_grad():
        out = model(tokens, torch.tensor([5, 3]))
        alone = model(tokens[1:, :3], torch.tensor([3]))
    assert out.shape == (2, 5, 5)
    torch.testing.assert_close(out[1, :3], alone[0], atol=1e-5, rtol=0)  # right padding changes nothing
    assert model.checkpoint_keys() == {n for n, p in model.named_parameters() if p.requires_grad}


def test_ulmfit_unfreezes_by_updates_when_asked(bodies, tmp_path):
    trainer = trainer_for(finetune(bodies, "gpt", tmp_path, "model.adapt=ulmfit", "model.ulmfit.unfreeze_every=2",
                                   "optimizer.lr=0.01"))
    start = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    sample = batch_of(trainer)

    def changed():
        return {n for n, p in trainer.model.named_parameters() if not torch.equal(p, start[n])}

    trainer.train_step([sample])
    trainer.train_step([sample])
    assert changed() and all(n.startswith("head.") for n in changed())  # updates 0 and 1: the head alone
    trainer.train_step([sample])
    assert any(n.startswith("body.layers.1.") for n in changed())  # update 2: the top group joins
    assert all(n.startswith(("head.", "body.layers.1.", "body.final_norm.")) for n in changed())
