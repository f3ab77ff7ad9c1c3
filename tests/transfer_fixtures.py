"""Tiny pretraining runs of every objective and a sentiment-like task over the same words, shared
by tests/test_transfer.py and tests/test_adapt.py (imported there; conftest puts this folder on
sys.path)."""

import random

from omegaconf import OmegaConf

import seqkit
from seqkit.cli.common import ConfigBuilder
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers.space import SpaceConfig
from seqkit.training.config import TrainConfig
from seqkit.training.trainer import Trainer

seqkit.import_builtin_components()
WORDS = [f"v{i}" for i in range(12)]
ENCODER = ["model.encoder_layers=2", "model.embed_dim=32", "model.ffn_dim=64", "model.attention_heads=4",
           "model.max_positions=64"]
# objective -> the pretraining run's overrides
OBJECTIVES = {
    "gpt": ["task=language_modeling", "model=gpt_tiny"],
    "lstm_lm": ["task=language_modeling", "model=lstm_lm_tiny"],
    "elmo": ["task=language_modeling", "model=elmo_tiny"],
    "bert": ["task=masked_lm", "model=bert_mini", *ENCODER, "criterion=masked_lm", "task.sentence_pairs=nsp", "model.sentence_head=true"],
    "roberta": ["task=masked_lm", "model=roberta_mini", *ENCODER, "criterion=masked_lm"],
    "albert": ["task=masked_lm", "model=albert_mini", *ENCODER, "criterion=masked_lm", "model.embedding_dim=16", "task.sentence_pairs=sop",
               "model.sentence_head=true"],
    "spanbert": ["task=masked_lm", "model=spanbert_mini", *ENCODER, "task.mask_unit=span",
                 "criterion=masked_lm"],
    "electra": ["task=masked_lm", "model=electra_mini", *ENCODER, "model.generator_layers=1", "criterion=electra"],
    "bart": ["task=denoising", "task.noise=bart", "model=transformer_tiny", "model.share_all_embeddings=true"],
    "t5": ["task=denoising", "task.noise=t5", "task.num_sentinels=8", "model=transformer_tiny",
           "model.share_all_embeddings=true"],
}


def trainer_for(overrides):
    cfg = ConfigBuilder("train", TrainConfig).compose(
        ["optimizer=adam", "optimizer.lr=0.005", "lr_scheduler=fixed", "common.log_format=json", "common.threads=1",
         "dataset.max_tokens=512", *overrides])
    return Trainer(OmegaConf.to_object(cfg))


def run(overrides):
    trainer = trainer_for(overrides)
    trainer.run()
    return trainer


def make_text(root):
    """A language-modeling folder and a sentiment-like TSV over the same words: label 1 when the
    sentence holds v0, else 0."""
    rng = random.Random(3)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) + " ." for _ in range(200)]
    for split, part in (("train", lines[:180]), ("valid", lines[180:])):
        (root / f"{split}.txt").write_text("\n".join(part) + "\n", encoding="utf-8")
    preprocess(PreprocessConfig(task="language_modeling", trainpref=str(root / "train.txt"),
                                validpref=str(root / "valid.txt"), destdir=str(root / "lm"), tokenizer=SpaceConfig()))
    for split, n in (("train", 60), ("dev", 20)):
        rows = []
        for _ in range(n):
            words = [rng.choice(WORDS[1:]) for _ in range(rng.randint(3, 7))]
            label = rng.random() < 0.5
            if label:
                words[rng.randrange(len(words))] = "v0"
            rows.append(f"{' '.join(words)}\t{int(label)}")
        (root / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return root



def binarize(text, dest, vocab_from):
    preprocess(PreprocessConfig(task="classification", trainpref=str(text / "train.tsv"), validpref=str(text / "dev.tsv"),
                                destdir=str(dest), tokenizer=SpaceConfig(), vocab_from=str(vocab_from)))
    return dest


def pretrained_bodies(text, names, tmp_path_factory):
    """body -> (a 2-update pretraining checkpoint of it, the classification data binarized in its vocabulary)."""
    out = {}
    for name in names:
        save = tmp_path_factory.mktemp(f"pre_{name}")
        pretrain(text, name, save, updates=2)
        ck = save / "checkpoint_last.pt"
        out[name] = (ck, binarize(text, save / "cls", ck))
    return out


def pretrain(text, objective, save, updates=3, extra=()):
    """A few updates of ``objective`` (and ``extra`` overrides) on the text's language-modeling
    folder; returns the trainer's result."""
    return trainer_for([*OBJECTIVES[objective], f"task.data={text / 'lm'}", "task.tokens_per_sample=24",
                        f"optimization.max_update={updates}", f"checkpoint.save_dir={save}", *extra]).run()
