"""The flat decoder step (seqkit/generation/transformer_step.py) equals the modules' bit for bit."""

import copy

import pytest
import torch

from seqkit.generation import GenerationConfig, SequenceGenerator
from seqkit.generation.packed import pack_linear_weights
from seqkit.generation.quantize import quantize_int8
from seqkit.generation.transformer_step import DecoderStepPlan, install_step_plan, unsupported
from tests.test_transformer import DICT, batch, build, tiny

VARIANTS = [
    {},
    {"normalize_before": True},
    {"learned_positions": True, "position_offset": 2},
    {"share_decoder_input_output_embed": False, "output_bias": True},
    {"activation": "gelu", "bias": False},
    {"head_dim": 2},  # H * D = 8 != C = 12
    {"embed_layer_norm": True, "no_scale_embedding": True, "scale_output": True},
    {"decoder_start": "eos", "layer_norm_eps": 1e-12},
    # heads removed by seqkit-prune: a different number in each attention module
    {"pruned_heads": {"decoder_layers.0.self_attn": [1], "decoder_layers.1.cross_attn": [0, 2, 3],
                      "encoder_layers.1.self_attn": [2]}},
]


def pair(kw, packed: bool):
    """The same model twice: the modules' step and the plan's."""
    model, planned = build(tiny(**kw)), build(tiny(**kw))  # the same seed: the same weights
    if packed:
        assert pack_linear_weights(model, min_numel=0) > 0 and pack_linear_weights(planned, min_numel=0) > 0
    assert install_step_plan(planned)
    return model, planned


def steps(model, n: int = 5):
    """Logits of ``n`` steps of 3 sentences x 2 beams, the rows shuffled between steps as beam search does."""
    src, lengths, _ = batch()
    torch.manual_seed(1)
    out = []
    with torch.inference_mode():
        enc = model.encode(src, lengths)
        cache = model.init_cache(enc, n)
        tokens = torch.ones(3, 1, dtype=torch.long)
        rows = torch.arange(3).repeat_interleave(2)
        for step in range(n):
            logits = model.decode_step(tokens, enc, cache, step)
            out.append(logits)
            if step == 0:  # each sentence's row becomes two beams
                logits = logits.index_select(0, rows)
                cache = model.reorder_cache(cache, rows, True)
            else:  # beams re-ranked within their sentences
                order = (torch.arange(3).repeat_interleave(2) * 2 + torch.randint(0, 2, (6,)))
                cache = model.reorder_cache(cache, order, False)
            tokens = logits.argmax(-1, keepdim=True)
    return out


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("kw", VARIANTS)
def test_plan_logits_equal_the_modules_bit_for_bit(kw, packed):
    model, planned = pair(kw, packed)
    for a, b in zip(steps(model), steps(planned)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kw", VARIANTS[:3])
def test_beam_search_with_the_plan_is_unchanged(kw):
    model, planned = pair(kw, packed=True)
    src, lengths, _ = batch()
    gen = SequenceGenerator(DICT, GenerationConfig(beam=4, nbest=4, max_len_a=0, max_len_b=12))
    for ha, hb in zip(gen.generate(model, src, lengths), gen.generate(planned, src, lengths)):
        for a, b in zip(ha, hb):
            assert torch.equal(a["tokens"], b["tokens"]) and a["score"] == b["score"]
            assert torch.equal(a["positional_scores"], b["positional_scores"])


def test_int8_layers_run_inside_the_plan():
    model = quantize_int8(build(tiny(embed_dim=32, ffn_dim=64)))
    planned = copy.deepcopy(model)
    install_step_plan(planned)
    for a, b in zip(steps(model), steps(planned)):
        assert torch.equal(a, b)


def test_alignment_and_training_keep_the_modules_path():
    model, planned = pair({}, packed=False)
    src, lengths, _ = batch()
    gen = SequenceGenerator(DICT, GenerationConfig(beam=2, max_len_a=0, max_len_b=6, print_alignment=True))
    hyps = gen.generate(planned, src, lengths)
    assert hyps[0][0]["attention"].shape[1] == int(lengths[0])
    planned.step_plan = lambda *a: 1 / 0  # never called in training mode
    planned.train()
    enc = planned.encode(src, lengths)
    planned.decode_step(torch.ones(3, 1, dtype=torch.long), enc, planned.init_cache(enc, 2), 0)


@pytest.mark.parametrize("kw, why", [({"relative_buckets": 8}, "model.relative_buckets"),
                                     ({"rms_norm": True}, "model.rms_norm"), ({"gated_ffn": True}, "model.gated_ffn")])
def test_t5_variants_are_left_to_the_modules(kw, why):
    model = build(tiny(**kw))
    assert unsupported(model) == why and not install_step_plan(model) and model.step_plan is None
    with pytest.raises(ValueError, match=why):
        DecoderStepPlan(model)
