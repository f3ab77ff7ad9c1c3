"""The ELMo bi-LM (directions, scalar mix) and BART / T5 denoising through the one trainer."""

import dataclasses
import random

import pytest
import torch
from omegaconf import OmegaConf

import seqkit
from seqkit.cli.common import ConfigBuilder
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.generation.translator import Translator
from seqkit.models.elmo import ScalarMix, reverse_padded
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers.space import SpaceConfig
from seqkit.training.config import TrainConfig
from seqkit.training.trainer import Trainer

seqkit.import_builtin_components()
DICT = Dictionary([f"w{i}" for i in range(28)])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Sentences that count up from a random word, a few per line, each ending with '.'."""
    root = tmp_path_factory.mktemp("pre")
    rng = random.Random(1)
    words = [f"v{i}" for i in range(12)]

    def sentence():
        start = rng.randrange(len(words))
        return " ".join(words[(start + k) % len(words)] for k in range(rng.randint(3, 6))) + " ."

    for split, n in (("train", 300), ("valid", 30)):
        lines = [" ".join(sentence() for _ in range(rng.randint(1, 3))) for _ in range(n)]
        (root / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    preprocess(PreprocessConfig(task="language_modeling", trainpref=str(root / "train.txt"),
                                validpref=str(root / "valid.txt"), destdir=str(root / "bin"), tokenizer=SpaceConfig()))
    return root / "bin"


def train(overrides, save_dir):
    cfg = ConfigBuilder("train", TrainConfig).compose(
        [f"checkpoint.save_dir={save_dir}", "optimizer=adam", "optimizer.lr=0.005", "lr_scheduler=fixed",
         "common.log_format=json", "common.threads=1", *overrides])
    return Trainer(OmegaConf.to_object(cfg)).run()


# -- ELMo ------------------------------------------------------------------------------------


def elmo():
    torch.manual_seed(0)
    cfg = dataclasses.replace(MODELS.choices()["elmo_tiny"], dropout=0.0)
    return MODELS.build(cfg, DICT).double().eval()


def test_reverse_padded_reverses_each_row_within_its_length():
    x = torch.tensor([[1, 2, 3, 4], [5, 6, 0, 0]])
    assert reverse_padded(x, torch.tensor([4, 2])).tolist() == [[4, 3, 2, 1], [6, 5, 0, 0]]


def test_scalar_mix_is_a_softmax_weighted_sum_times_gamma():
    mix = ScalarMix(3)
    layers = torch.randn(3, 2, 5, 4)
    assert torch.allclose(mix(layers), layers.mean(0))  # zero weights: equal shares
    with torch.no_grad():
        mix.weights.copy_(torch.tensor([0.0, 0.0, 50.0]))
        mix.gamma.fill_(2.0)
    assert torch.allclose(mix(layers), 2 * layers[2], atol=1e-6)


def test_elmo_directions_read_only_their_side():
    model = elmo()
    x = torch.randint(4, len(DICT), (2, 8))
    lengths = torch.tensor([8, 8])
    base = model.layer_representations(x, lengths)  # (L + 1, B, T, 2H)
    assert base.shape == (3, 2, 8, 32)
    y = x.clone()
    y[:, 5] = 4 + (y[:, 5] - 3) % (len(DICT) - 4)
    other = model.layer_representations(y, lengths)
    H = 16
    assert torch.allclose(base[1:, :, :5, :H], other[1:, :, :5, :H])  # forward: positions before 5 unchanged
    assert torch.allclose(base[1:, :, 6:, H:], other[1:, :, 6:, H:])  # backward: positions after 5 unchanged
    assert not torch.allclose(base[1:, :, 5, H:], other[1:, :, 5, H:])  # both read token 5 itself


def test_elmo_scores_each_target_from_both_sides_without_seeing_it():
    model = elmo()
    src = torch.randint(4, len(DICT), (1, 7))
    target = torch.cat([src[:, 1:], torch.tensor([[9]])], dim=1)  # the stream shifted by one
    lp = model(src, torch.tensor([7]), target=target)
    # changing target[3] (and src[4], the same stream token) changes only how target[3] is scored
    # through the gathered row: the distributions at other positions may move, position 3's may not
    src2, target2 = src.clone(), target.clone()
    target2[0, 3] = src2[0, 4] = 4 + (int(target[0, 3]) - 3) % (len(DICT) - 4)
    f, b = model._directions(src, torch.cat([target[:, 1:], torch.tensor([[2]])], 1), torch.tensor([7]))
    f2, b2 = model._directions(src2, torch.cat([target2[:, 1:], torch.tensor([[2]])], 1), torch.tensor([7]))
    assert torch.allclose(f[-1][0, 3], f2[-1][0, 3]) and torch.allclose(b[-1][0, 3], b2[-1][0, 3])
    assert lp.shape == (1, 7) and bool((lp < 0).all())


def test_elmo_trains_with_adaptive_loss_and_refuses_to_generate(corpus, tmp_path):
    result = train(["task=language_modeling", f"task.data={corpus}", "task.tokens_per_sample=16", "model=elmo_tiny",
                    "criterion=adaptive_loss", "dataset.max_tokens=256", "optimization.max_update=150", "optimizer.lr=0.1"],
                   tmp_path)
    assert result["valid"]["ppl"] < 10  # the unigram model of these 16 types: 13.5
    with pytest.raises(SeqkitError, match="does not generate"):
        Translator.from_checkpoint(str(tmp_path / "checkpoint_last.pt"), beam=1).translate(["v1 v2"])


# -- denoising --------------------------------------------------------------------------------


@pytest.mark.parametrize("noise", ["bart", "t5"])
def test_denoising_trains_the_transformer_and_reports_accuracy(corpus, tmp_path, noise):
    result = train(["task=denoising", f"task.data={corpus}", f"task.noise={noise}", "task.tokens_per_sample=32",
                    "task.num_sentinels=8", "model=transformer_tiny", "model.share_all_embeddings=true",
                    "criterion=label_smoothed_cross_entropy", "dataset.max_tokens=512", "optimization.max_update=60",
                    "checkpoint.best_checkpoint_metric=accuracy", "checkpoint.maximize_best_checkpoint_metric=true"],
                   tmp_path)
    assert result["valid"]["accuracy"] > 40


def test_bart_reconstructs_text_through_the_translator(corpus, tmp_path):
    train(["task=denoising", f"task.data={corpus}", "task.tokens_per_sample=32", "model=transformer_tiny",
           "model.share_all_embeddings=true", "criterion=label_smoothed_cross_entropy", "dataset.max_tokens=512",
           "optimization.max_update=150"], tmp_path)
    t = Translator.from_checkpoint(str(tmp_path / "checkpoint_last.pt"), beam=2)
    out = t.translate(["v3 v4 <mask> v7 ."])
    assert out[0].startswith("v3 v4")  # a masked span filled in; the text around it kept
