"""A new model family plugs in from a user folder (``common.user_dir``) with no edit to seqkit:
a tiny GRU encoder-decoder with attention trains with seqkit-train and decodes with seqkit-generate."""

import os
import re
import subprocess
import sys
import textwrap

import pytest

PLUGIN = "seqkit_test_gru_plugin"  # a name no other module has: the plugin is imported by folder name

PLUGIN_CODE = '''
"""A GRU encoder-decoder with dot-product attention, registered as model ``gru``."""

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from seqkit.core.config import arg
from seqkit.core.registry import MODELS
from seqkit.models.base import EncoderDecoderModel


@dataclass
class GRUConfig:
    name: str = arg("gru", "registry name")
    embed_dim: int = arg(64, "embedding size")
    hidden_dim: int = arg(64, "GRU state size (encoder and decoder)")


@MODELS.preset("gru_tiny")
def gru_tiny() -> GRUConfig:
    return dataclasses.replace(GRUConfig(), embed_dim=32, hidden_dim=48)


@MODELS.register("gru", GRUConfig)
class GRUModel(EncoderDecoderModel):
    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__()
        self.cfg, self.pad = cfg, src_dict.pad()
        H = cfg.hidden_dim
        self.src_embed = nn.Embedding(len(src_dict), cfg.embed_dim, padding_idx=self.pad)
        self.tgt_embed = nn.Embedding(len(tgt_dict), cfg.embed_dim, padding_idx=tgt_dict.pad())
        self.encoder = nn.GRU(cfg.embed_dim, H, batch_first=True)
        self.decoder = nn.GRU(cfg.embed_dim, H, batch_first=True)
        self.out = nn.Linear(2 * H, len(tgt_dict))

    def encode(self, src_tokens, src_lengths):
        x = self.src_embed(src_tokens)  # (B, S, E)
        packed = nn.utils.rnn.pack_padded_sequence(x, src_lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h = self.encoder(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=src_tokens.size(1))
        return {"out": out, "keep": src_tokens.ne(self.pad), "h": h[0]}  # (B, S, H), (B, S), (B, H)

    def _logits(self, y, enc):
        scores = torch.einsum("bth,bsh->bts", y, enc["out"])  # (B, T, S)
        scores = scores.masked_fill(~enc["keep"][:, None, :], float("-inf"))
        context = torch.einsum("bts,bsh->bth", F.softmax(scores, dim=-1), enc["out"])
        return self.out(torch.cat([y, context], dim=-1))  # (B, T, V)

    def decode(self, prev_output_tokens, enc):
        y, _ = self.decoder(self.tgt_embed(prev_output_tokens), enc["h"][None].contiguous())
        return self._logits(y, enc)

    def init_cache(self, enc, max_len):
        return {"h": enc["h"]}  # (B, H): batch first, so the inherited reorder applies

    def decode_step(self, tokens, enc, cache, step):
        y, h = self.decoder(self.tgt_embed(tokens), cache["h"][None].contiguous())
        cache["h"] = h[0]
        return self._logits(y, enc)[:, 0]  # (B, V)
'''


def _env():
    return dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
                OMP_NUM_THREADS="1")


def _run(args, **kw):
    return subprocess.run(args, env=_env(), capture_output=True, text=True, timeout=120, **kw)


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugins") / PLUGIN
    root.mkdir()
    (root / "__init__.py").write_text(textwrap.dedent(PLUGIN_CODE), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def trained(plugin_dir, toy_data, tmp_path_factory):
    """seqkit-train with the plugin's model: a separate process, so seqkit's own registries are all it has."""
    save_dir = tmp_path_factory.mktemp("gru") / "checkpoints"
    _, data = toy_data
    proc = _run(["seqkit-train", f"common.user_dir={plugin_dir}", "model=gru_tiny", f"task.data={data}",
                 f"checkpoint.save_dir={save_dir}", "optimization.max_update=15", "optimizer.lr=3e-3",
                 "lr_scheduler=fixed", "dataset.max_tokens=2048", "common.threads=1"])
    return proc, save_dir


def test_train_with_plugin_model(trained):
    proc, save_dir = trained
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"model gru: [\d,]+ parameters", proc.stderr), proc.stderr
    assert "done: reached max_update 15; 15 updates" in proc.stderr
    assert (save_dir / "checkpoint_last.pt").is_file()


def test_generate_with_plugin_model(trained, plugin_dir, toy_data):
    proc, save_dir = trained
    assert proc.returncode == 0, proc.stderr[-3000:]
    raw, data = toy_data
    gen = _run(["seqkit-generate", f"path={save_dir / 'checkpoint_last.pt'}", f"task.data={data}",
                f"common.user_dir={plugin_dir}", "common.threads=1", "generation.beam=2", "generation.max_len_b=20"])
    assert gen.returncode == 0, gen.stderr[-3000:]
    n = len((raw / "test.de").read_text(encoding="utf-8").splitlines())
    ids = [int(m) for m in re.findall(r"^D-(\d+)\t", gen.stdout, re.M)]
    assert ids == list(range(n))


def test_generate_reimports_the_runs_plugin(trained, toy_data):
    """The checkpoint stores the absolute user_dir; generate re-imports it (as fairseq does)."""
    proc, save_dir = trained
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, data = toy_data
    gen = _run(["seqkit-generate", f"path={save_dir / 'checkpoint_last.pt'}", f"task.data={data}", "common.threads=1"])
    assert gen.returncode == 0, gen.stderr[-3000:]
    assert "D-0\t" in gen.stdout


def test_generate_with_a_vanished_plugin_names_the_missing_model(trained, toy_data, tmp_path):
    """A checkpoint whose plugin folder is gone: one line naming the unknown model."""
    import torch

    proc, save_dir = trained
    state = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)
    state["cfg"]["common"]["user_dir"] = str(tmp_path / "moved-away")
    torch.save(state, tmp_path / "ck.pt")
    _, data = toy_data
    gen = _run(["seqkit-generate", f"path={tmp_path / 'ck.pt'}", f"task.data={data}", "common.threads=1"])
    assert gen.returncode == 1
    lines = gen.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in gen.stderr, gen.stderr
    assert lines[0].startswith("seqkit-generate: error: unknown model 'gru'; valid: "), lines[0]
    assert "transformer" in lines[0]


def test_unknown_model_lists_valid_names(run_cli, toy_data, tmp_path):
    from seqkit.cli.train import main

    _, data = toy_data
    r = run_cli(main, [f"task.data={data}", "model=grux", f"checkpoint.save_dir={tmp_path / 'ck'}"])
    assert r.code == 1
    assert len(r.err.strip().splitlines()) == 1, r.err
    assert r.err.startswith("seqkit-train: error: unknown model 'grux'; valid: ")
    assert "transformer_tiny" in r.err and "transformer_small" in r.err
    assert not (tmp_path / "ck").exists()
