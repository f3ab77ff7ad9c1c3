"""model.head=bilstm of pretrained_classifier / pretrained_tagger (Peters et al. 2018's use of ELMo):
a task BiLSTM over [own token embeddings; the body's vectors], on tiny pretrained bodies."""

import re

import pytest
import torch
from transfer_fixtures import make_text, pretrained_bodies, run, trainer_for

from seqkit.core import checkpoints
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.generation.classifier import Classifier
from seqkit.models.bilstm import concat_pool
from seqkit.models.pretrained import PretrainedTaggerConfig

RNN = ["model.head=bilstm", "model.bilstm.embed_dim=8", "model.bilstm.hidden_dim=6", "model.bilstm.head_dim=5",
       "model.bilstm.dropout=0"]


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return make_text(tmp_path_factory.mktemp("task_bilstm"))


@pytest.fixture(scope="module")
def bodies(text, tmp_path_factory):
    return pretrained_bodies(text, ["elmo", "gpt"], tmp_path_factory)


def finetune(bodies, body, save, *overrides):
    ck, data = bodies[body]
    return ["task=classification", f"task.data={data}", "model=pretrained_classifier", f"model.path={ck}",
            "criterion=cross_entropy", f"checkpoint.save_dir={save}", *RNN, *overrides]


def test_concat_pool_frozen_values():
    out = torch.tensor([[[1.0, -2.0], [3.0, 0.5], [0.0, 0.0]]])  # (B=1, S=3, 2H=2): the last position a pad
    final = torch.tensor([[7.0, 8.0]])
    pooled = concat_pool(out, final, torch.tensor([[5, 6, 0]]), pad=0)
    assert pooled.tolist() == [[7.0, 8.0, 3.0, 0.5, 2.0, -0.75]]  # final states, max and mean over real positions


@pytest.mark.parametrize("body", ["elmo", "gpt"])
def test_frozen_body_with_a_task_bilstm_trains_all_but_the_body(bodies, tmp_path, body):
    trainer = trainer_for(finetune(bodies, body, tmp_path, "model.adapt=frozen"))
    model = trainer.model
    rnn = model.rnn.lstm
    assert rnn.input_size == 8 + model.body.transfer_dim and rnn.hidden_size == 6
    named = dict(model.named_parameters())
    assert {n for n, p in named.items() if p.requires_grad} == {n for n in named if not n.startswith("body.")}
    before = {n: p.detach().clone() for n, p in named.items()}
    dataset = trainer.task.load_dataset("train")
    sample = dataset.collate(dataset.batches(512, 0, shuffle=False)[0])
    trainer.train_step([sample])
    for n, p in named.items():
        assert torch.equal(p, before[n]) != p.requires_grad, n  # the body bit-identical, everything else moved


def test_the_task_bilstm_learns_and_reloads_from_its_small_file(bodies, tmp_path):
    """Label 1 when the sentence holds v0: a frozen ELMo body with a task BiLSTM learns it (a model
    whose BiLSTM did not read its inputs would stay near 50%), and its checkpoint, the task BiLSTM,
    the mix and the head without the body, reloads to identical predictions."""
    trainer = run(finetune(bodies, "elmo", tmp_path, "model.adapt=frozen", "optimization.max_epoch=30",
                           "optimizer.lr=0.01", "checkpoint.no_epoch_checkpoints=true"))
    state = checkpoints.load(str(tmp_path / "checkpoint_last.pt"))
    assert state["model"] and not any(k.startswith("body.") for k in state["model"])
    assert any(k.startswith("rnn.") for k in state["model"]) and any(k.startswith("mix.") for k in state["model"])
    model = trainer.model.eval()
    dataset = trainer.task.load_dataset("valid")
    sample = dataset.collate(dataset.batches(512, 0, shuffle=False)[0])
    clf = Classifier.from_checkpoint(str(tmp_path / "checkpoint_last.pt"))
    with torch.no_grad():
        logits = model(**sample["net_input"])
        assert torch.equal(clf.model(**sample["net_input"]), logits)
    accuracy = (logits.argmax(-1) == sample["target"].view(-1)).float().mean().item()
    assert accuracy >= 0.85, accuracy


def test_a_tagger_with_a_task_bilstm_keeps_one_label_per_position(bodies):
    ck = bodies["elmo"][0]
    src = Dictionary.from_state_dict(checkpoints.load(str(ck))["task_state"]["dict"])
    cfg = PretrainedTaggerConfig(path=str(ck), adapt="frozen", head="bilstm")
    cfg.bilstm.embed_dim, cfg.bilstm.hidden_dim = 8, 6
    model = MODELS.build(cfg, src, 5).eval()
    tokens = torch.tensor([[1, 6, 7, 8, 2], [1, 9, 2, 0, 0]])
    with torch.no_grad():
        out = model(tokens, torch.tensor([5, 3]))
        alone = model(tokens[1:, :3], torch.tensor([3]))
    assert out.shape == (2, 5, 5) and model.head.out.in_features == 12
    torch.testing.assert_close(out[1, :3], alone[0], atol=1e-5, rtol=0)  # right padding changes nothing


@pytest.mark.parametrize("override,message", [
    ("model.head=crf", "model.head='crf' is not valid"),
    ("model.bilstm.hidden_dim=0", "model.bilstm.hidden_dim=0 is out of range: must be > 0"),
])
def test_bad_head_settings_are_one_line(override, message):
    from omegaconf import OmegaConf

    from seqkit.cli.common import ConfigBuilder
    from seqkit.core.config import check_ranges
    from seqkit.training.config import TrainConfig

    with pytest.raises(SeqkitError, match=re.escape(message)):
        cfg = ConfigBuilder("train", TrainConfig).compose(["task=classification", "model=pretrained_classifier", override])
        check_ranges(OmegaConf.to_object(cfg))
