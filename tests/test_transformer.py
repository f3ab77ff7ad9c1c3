"""Transformer at tiny dimensions: frozen outputs, incremental == full, padding invariance,
beam search batch == one by one."""

import dataclasses

import pytest
import torch

import seqkit
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.generation import GenerationConfig, SequenceGenerator
from seqkit.models.transformer import TransformerConfig, TransformerModel, transformer_small

seqkit.import_builtin_components()  # registers the presets
DICT = Dictionary([f"w{i}" for i in range(12)])  # 16 symbols with the 4 specials


def tiny(**kw) -> TransformerConfig:
    base = TransformerConfig(encoder_layers=2, decoder_layers=2, embed_dim=12, ffn_dim=16, attention_heads=4,
                             dropout=0.0, max_source_positions=32, max_target_positions=32)
    return dataclasses.replace(base, **kw)


def build(cfg: TransformerConfig, seed: int = 0) -> TransformerModel:
    torch.manual_seed(seed)
    return TransformerModel(cfg, DICT, DICT).eval()


def batch():
    # (B=3, S=6) right-padded with pad=0; every sentence ends with eos=2
    src = torch.tensor([[5, 6, 7, 8, 9, 2], [10, 11, 2, 0, 0, 0], [4, 15, 14, 2, 0, 0]])
    prev = torch.tensor([[1, 5, 6, 7, 8], [1, 12, 13, 14, 15], [1, 4, 4, 9, 9]])
    return src, src.ne(0).sum(1), prev


def test_frozen_logits():
    model = build(tiny())
    src, lengths, prev = batch()
    with torch.no_grad():
        logits = model(src, lengths, prev)
    assert logits.shape == (3, 5, 16)
    # frozen at seed 0; a change here means the model's numerics changed
    expected = torch.tensor([-0.2511, 0.9972, -0.5350, 1.5786, -0.1209])
    torch.testing.assert_close(logits[0, :, 7], expected, atol=1e-4, rtol=0)
    assert logits.sum().item() == pytest.approx(FROZEN_SUM, abs=1e-3)


FROZEN_SUM = 9.7456


@pytest.mark.parametrize("kw", [{}, {"normalize_before": True}, {"learned_positions": True},
                                {"share_decoder_input_output_embed": False}, {"share_all_embeddings": True}])
def test_incremental_equals_full(kw):
    model = build(tiny(**kw))
    src, lengths, prev = batch()
    with torch.no_grad():
        full = model(src, lengths, prev)  # (B, T, V)
        enc = model.encode(src, lengths)
        cache = model.init_cache(enc, prev.size(1))
        steps = [model.decode_step(prev[:, t : t + 1], enc, cache, t) for t in range(prev.size(1))]
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_padding_does_not_change_a_sentence():
    model = build(tiny())
    src, lengths, prev = batch()
    with torch.no_grad():
        together = model(src, lengths, prev)
        alone = model(src[1:2, :3], lengths[1:2], prev[1:2])
    torch.testing.assert_close(together[1:2], alone, atol=1e-5, rtol=1e-5)


def test_beam_search_batch_equals_one_by_one():
    model = build(tiny(), seed=3)
    src, lengths, _ = batch()
    gen = SequenceGenerator(DICT, GenerationConfig(beam=4, nbest=2, max_len_b=8))
    together = gen.generate(model, src, lengths)
    for i in range(3):
        n = int(lengths[i])
        alone = gen.generate(model, src[i : i + 1, :n], lengths[i : i + 1])[0]
        for a, b in zip(together[i], alone):
            assert a["tokens"].tolist() == b["tokens"].tolist()
            assert a["score"] == pytest.approx(b["score"], abs=1e-5)


def test_presets_are_registered_and_derived():
    choices = MODELS.choices()
    for name in ("transformer_tiny", "transformer_small", "transformer_base", "transformer_big"):
        assert choices[name].name == "transformer"
    small = transformer_small()
    assert (small.encoder_layers, small.embed_dim, small.ffn_dim, small.attention_heads) == (3, 256, 1024, 4)


def test_recipe_model_size():
    """The Multi30k recipe's model: transformer_small with an 8,008-symbol shared vocabulary."""
    d = Dictionary([f"p{i}" for i in range(8004)])
    model = TransformerModel(dataclasses.replace(transformer_small(), share_all_embeddings=True), d, d)
    assert sum(p.numel() for p in model.parameters()) == 7_579_648


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_dropout_rate_and_expectation(p):
    from seqkit.models.modules.dropout import dropout

    torch.manual_seed(0)
    x = torch.ones(1001, 257)  # numel not a multiple of 4
    y = dropout(x, p, training=True)
    n = x.numel()
    dropped = float((y == 0).float().mean())
    assert abs(dropped - p) < 4 * (p * (1 - p) / n) ** 0.5  # within 4 sigma
    kept = y[y != 0]
    assert torch.allclose(kept, torch.full_like(kept, 65536 / (65536 - round(p * 65536))))
    assert abs(float(y.mean()) - 1.0) < 4 * (p / (1 - p) / n) ** 0.5  # expectation preserved
    assert dropout(x, p, training=False) is x


def test_attention_under_bf16_autocast_trains_in_fp32():
    from seqkit.models.modules.attention import attend

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 5, 8) for _ in range(3))
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # (2, 4, 5, 8) fp32
    qb, kb, vb = (t.bfloat16().requires_grad_() for t in (q, k, v))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = attend(qb, kb, vb, None, 0.0, True)  # recording autograd: fp32 kernel on bf16-rounded inputs
        with torch.no_grad():
            inference = attend(qb, kb, vb, None, 0.0, True)  # no backward to pay for: stays bf16
    fp32_kernel = torch.nn.functional.scaled_dot_product_attention(qb.float(), kb.float(), vb.float(), is_causal=True)
    assert got.dtype == torch.bfloat16 and inference.dtype == torch.bfloat16
    assert torch.equal(got, fp32_kernel.bfloat16()) and (got.float() - want).abs().max() < 0.05
    got.sum().backward()
    assert qb.grad.dtype == torch.bfloat16 and bool(torch.isfinite(qb.grad.float()).all())
