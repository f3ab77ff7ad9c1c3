"""task=mass: the span, the decoder's input, a loss on the span only, a short run learning, its init."""

import numpy as np
import torch
from test_init_from import MASS_SHAPED, TRAIN, build_translation, first_losses, logged_losses, mass_ckpt  # noqa: F401

from seqkit.data.mass_dataset import mass_example
from seqkit.data.noising import NoiseSpecials

SP = NoiseSpecials(mask=30, vocab_size=30)


def test_span_and_decoder_input_for_a_seed():
    sentence = torch.tensor([10, 11, 12, 13, 14, 15, 16, 17, 2])  # 8 tokens and </s>
    ex = mass_example(sentence, np.random.default_rng(5), SP, 0.5)
    assert (ex["start"], ex["length"]) == (3, 4)  # frozen for seed 5: half of the 8 tokens, </s> outside
    assert ex["source"].tolist() == [10, 11, 12, 30, 30, 30, 30, 17, 2]
    assert ex["prev"].tolist() == [30, 30, 30, 1, 13, 14, 15, 30, 30]  # <s> + the span shifted, the rest masked
    assert ex["target"].tolist() == [0, 0, 0, 13, 14, 15, 16, 0, 0]  # the span; padding elsewhere
    for seed in range(20):  # the span always fits before </s>
        ex = mass_example(sentence, np.random.default_rng(seed), SP, 0.5)
        assert ex["length"] == 4 and 0 <= ex["start"] <= 4 and ex["source"][-1] == 2


def test_loss_counts_the_span_only(toy_data):
    from seqkit.core.registry import CRITERIA, TASKS
    from omegaconf import OmegaConf
    from seqkit.cli.common import ConfigBuilder
    from seqkit.training.config import TrainConfig

    _, data = toy_data
    cfg = OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(
        ["task=mass", f"task.data={data}", *MASS_SHAPED, "criterion=cross_entropy"]))
    torch.manual_seed(0)
    task = TASKS.build(cfg.task)
    model = task.build_model(cfg.model).eval()
    sample = task.load_dataset("valid").collate([0, 1, 2])
    loss, size, _ = CRITERIA.build(cfg.criterion, task)(model, sample)
    span = sample["target"].ne(task.ignore_index)
    assert size == int(span.sum()) == sample["ntokens"] < sample["target"].numel() / 2 + 3
    lprobs = model(**sample["net_input"]).log_softmax(-1)
    manual = -lprobs.gather(-1, sample["target"].unsqueeze(-1)).squeeze(-1)[span].sum()
    assert torch.allclose(loss, manual, rtol=1e-4)
    assert sample["net_input"]["src_langs"].tolist() == [0, 0, 0]  # valid's first rows: de


def test_mass_learns_and_its_init_starts_translation_lower(mass_ckpt, toy_data, run_cli, tmp_path):  # noqa: F811
    _, data = toy_data
    curve = logged_losses(mass_ckpt)  # seqkit-train task=mass: 30 updates
    assert curve[30] < curve[1] - 1.5, curve
    init, random = first_losses(run_cli, data, MASS_SHAPED, mass_ckpt, tmp_path)
    assert init < random - 1.0, (init, random)
