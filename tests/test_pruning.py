"""Pruning: a pruned model's outputs equal the masked model's, a head whose mask gradient is zero
goes first and leaves the loss unchanged, magnitude shares are exact, and seqkit-prune writes an
ordinary checkpoint (or one clear error)."""

import pytest
import torch

import seqkit
from seqkit.analysis.prune import attention_modules, head_importance, magnitude_prune, prune_heads
from seqkit.core.checkpoints import load_for_inference
from seqkit.criteria.cross_entropy import smoothed_nll
from seqkit.models.modules.attention import MultiheadAttention
from seqkit.training.trainer import Trainer
from tests.test_transformer import batch, build, tiny

from label_fixtures import one_line_error, train_cfg, translation_ckpt  # noqa: F401  (fixtures are used by name)

seqkit.import_builtin_components()


@pytest.mark.parametrize("self_attention", [True, False])
def test_pruned_attention_equals_the_masked_one(self_attention):
    torch.manual_seed(0)
    attn = MultiheadAttention(16, 4, self_attention=self_attention).eval()
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    attn.head_mask = torch.tensor([1.0, 0.0, 1.0, 0.0])
    masked, _ = attn(x, None if self_attention else memory)
    attn.head_mask = None
    attn.prune_heads([1, 3])
    pruned, (k, v) = attn(x, None if self_attention else memory)
    assert attn.num_heads == 2 and k.shape[1] == 2 and attn.out_proj.in_features == 8
    torch.testing.assert_close(pruned, masked, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError):
        attn.prune_heads([0, 1])  # a module keeps a head


def sample_of(rows=slice(None)):
    src, lengths, prev = batch()
    target = torch.cat([prev[:, 1:], torch.full((3, 1), 2)], dim=1)
    return {"net_input": {"src_tokens": src[rows], "src_lengths": lengths[rows], "prev_output_tokens": prev[rows]},
            "target": target[rows]}


def loss_of(model, sample=None):
    return smoothed_nll(model, sample or sample_of(), 0, 0.0)[0]


def importance(model):
    return head_importance(model, lambda: [sample_of()], lambda s: loss_of(model, s))


def test_importance_takes_each_sentences_absolute_gradient():
    model = build(tiny())
    for p in model.parameters():
        p.requires_grad_(False)
    raw = {n: torch.zeros(4) for n in attention_modules(model)}
    for i in range(3):  # one sentence at a time, one mask per module
        modules = attention_modules(model)
        masks = {n: torch.ones(4, requires_grad=True) for n in modules}
        for n, m in masks.items():
            modules[n].head_mask = m
        grads = torch.autograd.grad(loss_of(model, sample_of(slice(i, i + 1))), list(masks.values()))
        for n, g in zip(masks, grads):
            raw[n] += g.abs()
            modules[n].head_mask = None
    got = importance(model)
    for n, r in raw.items():
        torch.testing.assert_close(got[n], r / r.norm(), rtol=1e-4, atol=1e-6)


def test_a_model_built_pruned_equals_the_masked_model():
    pruned_heads = {"encoder_layers.0.self_attn": [0, 3], "decoder_layers.1.cross_attn": [1]}
    model, pruned = build(tiny()), build(tiny(pruned_heads=pruned_heads))
    for name, heads in pruned_heads.items():  # the pruned model holds the kept heads' weights
        mask = torch.ones(4)
        mask[heads] = 0
        attention_modules(model)[name].head_mask = mask
        kept = [h for h in range(4) if h not in heads]
        rows = torch.cat([torch.arange(3) + 3 * h for h in kept])  # D = 3
        full, small = attention_modules(model)[name], attention_modules(pruned)[name]
        with torch.no_grad():
            small.out_proj.weight.copy_(full.out_proj.weight[:, rows])
            if full.self_attention:
                small.qkv_proj.weight.copy_(full.qkv_proj.weight[torch.cat([rows + i * 12 for i in range(3)])])
                small.qkv_proj.bias.copy_(full.qkv_proj.bias[torch.cat([rows + i * 12 for i in range(3)])])
            else:
                small.q_proj.weight.copy_(full.q_proj.weight[rows])
                small.q_proj.bias.copy_(full.q_proj.bias[rows])
                small.kv_proj.weight.copy_(full.kv_proj.weight[torch.cat([rows, rows + 12])])
                small.kv_proj.bias.copy_(full.kv_proj.bias[torch.cat([rows, rows + 12])])
    assert sum(p.numel() for p in pruned.parameters()) < sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        torch.testing.assert_close(loss_of(pruned), loss_of(model), rtol=1e-6, atol=1e-6)


def test_a_head_with_zero_mask_gradient_goes_first_and_leaves_the_loss_unchanged():
    model = build(tiny())
    dead = attention_modules(model)["decoder_layers.0.self_attn"]
    with torch.no_grad():
        dead.out_proj.weight[:, 6:9] = 0  # head 2 (D = 3) writes nothing
    for p in model.parameters():
        p.requires_grad_(False)
    scores = importance(model)
    assert scores["decoder_layers.0.self_attn"][2] == 0
    assert all(torch.allclose(s.norm(), torch.tensor(1.0)) for s in scores.values())  # per-layer normalized
    with torch.no_grad():
        before = loss_of(model)
    total = 4 * 6  # 2 encoder self, 2 decoder self, 2 cross modules of 4 heads
    record = prune_heads(model, {}, lambda: importance(model), 1 / total, 0.5)
    assert record == {"decoder_layers.0.self_attn": [2]}
    with torch.no_grad():
        assert torch.allclose(loss_of(model), before, rtol=1e-6, atol=1e-6)


def test_rounds_keep_original_indices_and_one_head_per_module():
    model = build(tiny())
    for p in model.parameters():
        p.requires_grad_(False)
    record = prune_heads(model, {}, lambda: importance(model), 0.9, 0.25)
    modules = attention_modules(model)
    assert all(m.num_heads >= 1 for m in modules.values())
    assert sum(m.num_heads for m in modules.values()) == 24 - sum(map(len, record.values()))
    rebuilt = build(tiny(pruned_heads=record))  # the record names original heads: it rebuilds the same shapes
    shapes = {n: m.num_heads for n, m in modules.items()}
    assert {n: m.num_heads for n, m in attention_modules(rebuilt).items()} == shapes


@pytest.mark.parametrize("scope", ["global", "layer"])
def test_magnitude_pruning_zeroes_the_smallest_share(scope):
    model = build(tiny(share_all_embeddings=True))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}  # (tied matrices once)
    weights = {n: p for n, p in model.named_parameters() if p.dim() >= 2}

    def cut(values):  # the k-th smallest |w| of ``values``: those at or below it go
        k = int(0.4 * values.numel())
        ranked = values.abs().flatten().sort().values
        assert ranked[k] > ranked[k - 1]  # no tie across the cut: the zeroed set is well defined
        return ranked[k - 1]

    if scope == "global":  # one threshold across all matrices
        t = cut(torch.cat([before[n].flatten() for n in weights]))
        expected = {n: before[n].masked_fill(before[n].abs() <= t, 0.0) for n in weights}
    else:  # one per matrix
        expected = {n: before[n].masked_fill(before[n].abs() <= cut(before[n]), 0.0) for n in weights}
    zero, total = magnitude_prune(model, 0.4, scope)
    assert total == sum(w.numel() for w in weights.values())
    assert zero == sum(int(e.eq(0).sum()) for e in expected.values())
    if scope == "global":
        assert zero == int(0.4 * total)
        # the cut is global, not per matrix: the matrices lose different shares
        assert len({round(float(e.eq(0).float().mean()), 2) for e in expected.values()}) > 1
    else:
        assert all(int(e.eq(0).sum()) == int(0.4 * e.numel()) for e in expected.values())
    for n, p in model.named_parameters():  # exactly the smallest zeroed, every other weight (and vector) untouched
        assert torch.equal(p.detach(), expected.get(n, before[n])), n


def test_seqkit_prune_writes_an_ordinary_checkpoint(toy_data, translation_ckpt, run_cli, tmp_path):  # noqa: F811
    from seqkit.cli.generate import main as generate
    from seqkit.cli.prune import main as prune

    _, data = toy_data
    out = tmp_path / "heads.pt"
    r = run_cli(prune, [f"path={translation_ckpt}", f"output={out}", "method=heads", "share=0.25", "step=0.125",
                        f"data={data}", "threads=1"])
    assert r.code == 0, r.err
    task, model = load_for_inference(str(out))
    heads = sum(m.num_heads for m in attention_modules(model).values())
    assert heads == 18 and sum(map(len, model.cfg.pruned_heads.values())) == 6  # transformer_tiny: 24 heads
    r = run_cli(generate, [f"path={out}", f"task.data={data}", "gen_subset=test", "common.threads=1",
                           "generation.beam=2", "generation.max_len_b=10"])
    assert r.code == 0 and r.out.count("\nH-") + r.out.startswith("H-") > 0, r.err
    r = run_cli(prune, [f"path={out}", f"output={tmp_path / 'more.pt'}", "share=0.5", f"data={data}"])
    assert r.code == 0, r.err  # pruned again: the record keeps original indices
    _, again = load_for_inference(str(tmp_path / "more.pt"))
    assert sum(m.num_heads for m in attention_modules(again).values()) == 9
    assert all(set(model.cfg.pruned_heads.get(n, [])) <= set(h) for n, h in again.cfg.pruned_heads.items())
    r = run_cli(prune, [f"path={translation_ckpt}", f"output={tmp_path / 'mag.pt'}", "method=magnitude", "share=0.5"])
    assert r.code == 0 and "50.0%" in r.err, r.err

    def storages(path):  # (distinct storages, names): a tied embedding is one storage under two names
        state = torch.load(path, map_location="cpu", weights_only=False)["model"]
        return len({t.untyped_storage().data_ptr() for t in state.values()}), len(state)

    assert storages(out) == storages(tmp_path / "mag.pt") == storages(translation_ckpt)


def test_a_pruned_checkpoint_saves_a_tied_embedding_once():
    """seqkit-prune copies the state (no views into the unpruned weights), keeping what was tied
    tied: a model with share_all_embeddings saves (and the sweep counts) its table once."""
    from seqkit.analysis.prune import _clone_shared

    emb = torch.nn.Embedding(10, 4)
    big = torch.randn(8, 4)
    state = {"src_embed.weight": emb.weight, "tgt_embed.weight": emb.weight, "fc.weight": big[:2]}  # a view
    out = _clone_shared(state)
    assert out["src_embed.weight"] is out["tgt_embed.weight"]
    assert out["src_embed.weight"].untyped_storage().data_ptr() != emb.weight.untyped_storage().data_ptr()
    assert out["fc.weight"].untyped_storage().nbytes() == 2 * 4 * 4  # the rows kept, not the whole storage
    assert all(torch.equal(out[k], state[k]) for k in state)


def test_bad_pruning_input_is_one_line(toy_data, translation_ckpt, run_cli, tmp_path):  # noqa: F811
    from seqkit.cli.prune import main as prune

    r = run_cli(prune, [f"path={translation_ckpt}", f"output={tmp_path / 'x.pt'}", "share=1"])
    one_line_error(r, "seqkit-prune", "share")
    r = run_cli(prune, [f"path={translation_ckpt}"])
    one_line_error(r, "seqkit-prune", "output=FILE")
    r = run_cli(prune, [f"path={translation_ckpt}", f"output={translation_ckpt}"])
    one_line_error(r, "seqkit-prune", "must differ")
    _, data = toy_data
    lstm = tmp_path / "lstm"
    Trainer(train_cfg(data, lstm, "translation", "lstm_luong_small", "model.embed_dim=16", "model.encoder_hidden=16",
                      "model.decoder_hidden=16",
                      "optimization.max_update=1", "dataset.valid_subset=")).run()
    r = run_cli(prune, [f"path={lstm / 'checkpoint_last.pt'}", f"output={tmp_path / 'x.pt'}", f"data={data}"])
    one_line_error(r, "seqkit-prune", "head pruning takes Transformer models", log_lines_allowed=True)
    assert not (tmp_path / "x.pt").exists()


def test_the_sweep_scores_the_split_asked_and_keeps_each_rounds_log(toy_data, translation_ckpt, tmp_path):  # noqa: F811
    """examples/pruning/sweep.py: a selection sweep on valid (``--split valid``, a step of its own)
    writes rows that name their split and step, and each seqkit-prune's log with every round."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    _, data = toy_data
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    def sweep(out, *flags):  # sweep.py's rows over the checkpoint's shares 0 (and more, by flags)
        r = subprocess.run([sys.executable, str(root / "examples" / "pruning" / "sweep.py"), str(translation_ckpt),
                            str(data), str(out), "--methods", "heads", "--threads", "1", *flags],
                           capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr[-2000:]
        return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]

    out = tmp_path / "sweep"
    rows = sweep(out, "--shares", "0,0.25", "--split", "valid", "--step", "0.125")
    assert [(x["split"], x["step"], x["heads_removed"]) for x in rows] == [("valid", 0.125, 0), ("valid", 0.125, 6)]
    log = (out / "heads-0.25" / "prune.log").read_text()
    assert log.count("round: 3 heads removed") == 2  # 6 of 24 heads in rounds of 12.5%: the order is kept
    assert (out / "heads-0" / "b64" / "generate-valid.txt").exists()
    assert [len(x["runs_b64"]) for x in rows] == [1, 1] and all(len(x["runs_b1"]) == 1 for x in rows)
    # the reported sweep's speeds: the median of --repeats runs, each kept; a selection sweep: no timing
    (row,) = sweep(tmp_path / "timed", "--shares", "0", "--repeats", "3")
    for batch in (64, 1):
        assert len(row[f"runs_b{batch}"]) == 3
        assert row[f"per_s_b{batch}"] == sorted(row[f"runs_b{batch}"])[1]
    (row,) = sweep(tmp_path / "select", "--shares", "0", "--split", "valid", "--score-only")
    assert "runs_b1" not in row and len(row["runs_b64"]) == 1 and "bleu" in row
