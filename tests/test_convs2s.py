"""ConvS2S at tiny dimensions: frozen outputs, incremental == full (with beams re-ranked and
sentences leaving), padding invariance, attention rows, causality, beam search, weight norm."""

import dataclasses

import pytest
import torch

import seqkit.models  # noqa: F401  (registers the presets)
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.generation import GenerationConfig, SequenceGenerator
from seqkit.models.convs2s import ConvS2SConfig, ConvS2SModel, GradMultiply, WNConv1d, WNLinear, convs2s_small, convs2s_tiny

torch.set_num_threads(1)
DICT = Dictionary([f"w{i}" for i in range(12)])  # 16 symbols with the 4 specials


def tiny(**kw) -> ConvS2SConfig:
    base = ConvS2SConfig(embed_dim=8, encoder_layers=2, encoder_channels=12, encoder_kernel_size=3,
                         decoder_layers=3, decoder_channels=10, decoder_kernel_size=3, decoder_out_embed_dim=6,
                         dropout=0.0, max_source_positions=32, max_target_positions=32)
    return dataclasses.replace(base, **kw)


# kernel widths even and 1, tied output, one shared matrix
VARIANTS = [{}, {"encoder_kernel_size": 4, "decoder_kernel_size": 2}, {"encoder_kernel_size": 1, "decoder_kernel_size": 1},
            {"decoder_out_embed_dim": 8, "share_input_output_embed": True},
            {"decoder_out_embed_dim": 8, "share_all_embeddings": True}]


def build(cfg: ConvS2SConfig, seed: int = 0, double: bool = True) -> ConvS2SModel:
    torch.manual_seed(seed)
    model = ConvS2SModel(cfg, DICT, DICT).eval()
    return model.double() if double else model


def batch():
    # (B=3, S=6) right-padded with pad=0; every sentence ends with eos=2
    src = torch.tensor([[5, 6, 7, 8, 9, 2], [10, 11, 2, 0, 0, 0], [4, 15, 14, 2, 0, 0]])
    prev = torch.tensor([[1, 5, 6, 7, 8], [1, 12, 13, 14, 15], [1, 4, 4, 9, 9]])
    return src, src.ne(0).sum(1), prev


def test_frozen_logits_and_loss():
    torch.manual_seed(0)
    model = MODELS.build(convs2s_tiny(), DICT, DICT).eval()
    src, lengths, prev = batch()
    target = torch.cat([prev[:, 1:], torch.full((3, 1), 2)], 1)
    with torch.no_grad():
        logits = model(src, lengths, prev)
    assert logits.shape == (3, 5, 16)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 16), target.reshape(-1))
    # frozen at seed 0; a change here means the model's numerics (or its initialisation) changed
    expected = torch.tensor(FROZEN_LOGITS)
    torch.testing.assert_close(logits[0, :, 7], expected, atol=1e-5, rtol=0)
    assert logits.sum().item() == pytest.approx(FROZEN_SUM, abs=1e-4)
    assert loss.item() == pytest.approx(FROZEN_LOSS, abs=1e-5)


FROZEN_LOGITS = [0.087674, -0.077337, -0.031636, 0.008005, -0.054627]
FROZEN_SUM = 2.8397
FROZEN_LOSS = 2.879907


def steps(model, tokens, enc, cache, t0, layer="none"):
    """decode_step (or decode_step_attention with ``layer``) for columns t0.. of ``tokens``."""
    out = []
    for t in range(t0, tokens.size(1)):
        if layer == "none":
            out.append(model.decode_step(tokens[:, t : t + 1], enc, cache, t))
        else:
            out.append(model.decode_step_attention(tokens[:, t : t + 1], enc, cache, t, layer))
    return out


@pytest.mark.parametrize("kw", VARIANTS)
def test_incremental_equals_full(kw):
    model = build(tiny(**kw))
    src, lengths, prev = batch()
    with torch.no_grad():
        full = model(src, lengths, prev)  # (B, T, V)
        enc = model.encode(src, lengths)
        inc = torch.stack(steps(model, prev, enc, model.init_cache(enc, 5), 0), 1)
    torch.testing.assert_close(inc, full, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("kw", VARIANTS[:3])
def test_incremental_with_reordering_and_sentences_leaving(kw):
    """Rows are (sentence, beam); beams get re-ranked, then a sentence leaves: every step still
    equals the full pass over the rows' prefixes as they are at that step."""
    model = build(tiny(**kw))
    src, lengths, _ = batch()
    sent = torch.tensor([0, 0, 1, 1, 2, 2])  # 2 beams per sentence
    torch.manual_seed(1)
    prefix = torch.randint(4, 16, (6, 7))
    prefix[:, 0] = 1
    # (step, new_order, sentences_moved): re-rank beams within sentences, then sentence 1 leaves
    events = {2: (torch.tensor([1, 1, 3, 2, 4, 5]), False), 4: (torch.tensor([0, 1, 5, 4]), True),
              5: (torch.tensor([1, 0, 3, 3]), False)}
    with torch.no_grad():
        enc = model.reorder(model.encode(src, lengths), sent)
        cache = model.init_cache(enc, 7)
        for t in range(prefix.size(1)):
            if t in events:
                order, moved = events[t]
                cache = model.reorder_cache(cache, order, moved)
                prefix = prefix.index_select(0, order)
                prefix[:, t:] = torch.randint(4, 16, (order.numel(), prefix.size(1) - t))  # new continuations
                if moved:
                    enc = model.reorder(enc, order)
            got = model.decode_step(prefix[:, t : t + 1], enc, cache, t)
            want = model.decode(prefix[:, : t + 1], enc)[:, t]
            torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
    assert prefix.size(0) == 4


@pytest.mark.parametrize("kw", VARIANTS[:3])
def test_padding_does_not_change_a_sentence(kw):
    model = build(tiny(**kw))
    src, lengths, prev = batch()
    with torch.no_grad():
        enc = model.encode(src, lengths)
        together = model.decode(prev, enc)
        for i in range(3):
            n = int(lengths[i])
            enc1 = model.encode(src[i : i + 1, :n], lengths[i : i + 1])
            torch.testing.assert_close(enc["keys"][i : i + 1, :n], enc1["keys"], atol=1e-12, rtol=1e-12)
            torch.testing.assert_close(enc["values"][i : i + 1, :n], enc1["values"], atol=1e-12, rtol=1e-12)
            torch.testing.assert_close(together[i : i + 1], model.decode(prev[i : i + 1], enc1), atol=1e-12, rtol=1e-12)
    assert bool((enc["keys"][1, 3:] == 0).all())  # padding is zero


def test_attention_rows_sum_to_one_over_real_tokens():
    model = build(tiny())
    src, lengths, prev = batch()
    keep = src.ne(0).unsqueeze(1)  # (B, 1, S)
    with torch.no_grad():
        enc = model.encode(src, lengths)
        logits, attns = model.decode(prev, enc, return_attention=True)
        assert len(attns) == 3
        for a in attns:  # (B, T, S)
            assert a.shape == (3, 5, 6)
            torch.testing.assert_close(a.sum(-1), torch.ones(3, 5, dtype=a.dtype), atol=1e-12, rtol=0)
            assert bool((a.masked_select(~keep.expand_as(a)) == 0).all())
            assert bool((a.masked_select(keep.expand_as(a)) > 0).all())
        for layer in (None, 0, 1, 2, -1, -3):
            out = steps(model, prev, enc, model.init_cache(enc, 5), 0, layer)
            for t, (lg, a) in enumerate(out):
                assert lg.shape == (3, 16) and a.shape == (3, 6)
                torch.testing.assert_close(lg, logits[:, t], atol=1e-10, rtol=1e-10)
                want = torch.stack(attns).mean(0)[:, t] if layer is None else attns[layer][:, t]
                torch.testing.assert_close(a, want, atol=1e-12, rtol=0)
                torch.testing.assert_close(a.sum(-1), torch.ones(3, dtype=a.dtype), atol=1e-12, rtol=0)
                assert bool((a.masked_select(~keep[:, 0]) == 0).all())
        with pytest.raises(SeqkitError, match="out of range"):
            model.decode_step_attention(prev[:, :1], enc, model.init_cache(enc, 5), 0, layer=3)


@pytest.mark.parametrize("kw", VARIANTS[:3])
def test_causal(kw):
    model = build(tiny(**kw))
    src, lengths, prev = batch()
    later = prev.clone()
    later[:, 3:] = torch.tensor([[11, 12], [4, 5], [13, 13]])
    with torch.no_grad():
        a, b = model(src, lengths, prev), model(src, lengths, later)
    torch.testing.assert_close(a[:, :3], b[:, :3], atol=1e-12, rtol=0)
    assert not torch.allclose(a[:, 3:], b[:, 3:])


def test_beam_search_end_to_end_and_batch_equals_one_by_one():
    model = build(tiny(), seed=3, double=False)
    src, lengths, _ = batch()
    gen = SequenceGenerator(DICT, GenerationConfig(beam=3, nbest=2, max_len_b=10))
    together = gen.generate(model, src, lengths)
    assert len(together) == 3
    for i in range(3):
        assert len(together[i]) == 2
        for hyp in together[i]:
            assert hyp["tokens"][-1].item() == 2 and 1 <= hyp["tokens"].numel() <= 11
        n = int(lengths[i])
        alone = gen.generate(model, src[i : i + 1, :n], lengths[i : i + 1])[0]
        for a, b in zip(together[i], alone):
            assert a["tokens"].tolist() == b["tokens"].tolist()
            assert a["score"] == pytest.approx(b["score"], abs=1e-5)


def test_weight_norm_parameters_and_scaling():
    torch.manual_seed(0)
    lin, conv = WNLinear(5, 3, dropout=0.2).double(), WNConv1d(4, 6, 3, dropout=0.2).double()
    assert dict(lin.named_parameters()).keys() == {"v", "g", "bias"}
    assert conv.v.shape == (6, 4, 3) and conv.g.shape == (6,) and conv.bias.shape == (6,)
    torch.testing.assert_close(lin.weight(), lin.v)  # g = ||v|| at init
    x, xc = torch.randn(7, 5, dtype=torch.double), torch.randn(2, 9, 4, dtype=torch.double)  # xc (B, T, C)
    with torch.no_grad():
        y, yc = lin(x), conv(xc)
        lin.bias.fill_(0.5)
        lin.g[1] *= 3.0  # output unit 1 (minus its bias) scales by 3, the others do not move
        lin.v.mul_(7.0)  # the scale of v does not matter
        conv.g.mul_(2.0)
        scale = torch.tensor([1.0, 3.0, 1.0], dtype=torch.double)
        torch.testing.assert_close(lin(x) - 0.5, y * scale)
        torch.testing.assert_close(conv(xc), 2.0 * yc)
        torch.testing.assert_close(torch.linalg.vector_norm(conv.weight(), dim=(1, 2)), conv.g)
        # the time-major GEMM convolution is F.conv1d on (B, C, T)
        want = torch.nn.functional.conv1d(xc.transpose(1, 2), conv.weight(), conv.bias).transpose(1, 2)
        torch.testing.assert_close(conv(xc), want)


def test_state_dict_is_plain_and_round_trips():
    model = build(tiny(), seed=0)
    state = model.state_dict()
    assert all(k.endswith((".v", ".g", ".bias", ".weight")) for k in state), sorted(state)
    assert "decoder_blocks.0.conv.v" in state and not any("orig" in k or "parametriz" in k for k in state)
    fresh = build(tiny(), seed=1)
    src, lengths, prev = batch()
    with torch.no_grad():
        assert not torch.allclose(fresh(src, lengths, prev), model(src, lengths, prev))
        fresh.load_state_dict(state)
        torch.testing.assert_close(fresh(src, lengths, prev), model(src, lengths, prev), atol=0, rtol=0)


def test_encoder_gradient_is_scaled():
    x = torch.randn(3, 4, requires_grad=True)
    GradMultiply.apply(x, 0.25).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3, 4), 0.25))
    model = build(tiny(dropout=0.1), double=False).train()
    src, lengths, prev = batch()
    model(src, lengths, prev).logsumexp(-1).mean().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_config_errors():
    other = Dictionary([f"x{i}" for i in range(12)])
    with pytest.raises(SeqkitError, match="joined dictionary"):
        ConvS2SModel(tiny(decoder_out_embed_dim=8, share_all_embeddings=True), DICT, other)
    with pytest.raises(SeqkitError, match="decoder_out_embed_dim"):
        ConvS2SModel(tiny(share_input_output_embed=True), DICT, DICT)
    model = build(tiny())
    src, lengths, prev = batch()
    with pytest.raises(SeqkitError, match="max_source_positions"):
        model.encode(torch.full((1, 33), 5), torch.tensor([33]))
    with pytest.raises(SeqkitError, match="max_target_positions"):
        model.decode(torch.full((3, 33), 5), model.encode(src, lengths))


def test_presets_are_registered_and_derived():
    choices = MODELS.choices()
    for name in ("convs2s", "convs2s_tiny", "convs2s_small", "convs2s_iwslt_de_en", "convs2s_wmt_en_ro"):
        assert choices[name].name == "convs2s"
        if name != "convs2s_wmt_en_ro":  # 80M parameters: skip building it
            MODELS.build(choices[name], DICT, DICT)
    iwslt = choices["convs2s_iwslt_de_en"]
    assert (iwslt.embed_dim, iwslt.encoder_layers, iwslt.encoder_channels, iwslt.encoder_kernel_size) == (256, 4, 256, 3)
    assert (iwslt.decoder_layers, iwslt.decoder_channels, iwslt.decoder_kernel_size, iwslt.decoder_out_embed_dim) == (3, 256, 3, 256)
    assert convs2s_tiny().max_target_positions == 256


def test_recipe_model_size():
    """convs2s_small with an 8,008-symbol shared vocabulary (the Multi30k recipe's)."""
    d = Dictionary([f"p{i}" for i in range(8004)])
    model = ConvS2SModel(dataclasses.replace(convs2s_small(), share_all_embeddings=True), d, d)
    assert sum(p.numel() for p in model.parameters()) == 7_317_320
