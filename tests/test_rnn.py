"""RNN encoder-decoder at tiny dimensions: frozen outputs, incremental == full (beams reordered,
sentences leaving), padding invariance, attention rows summing to one, search alignments."""

import dataclasses

import pytest
import torch

import seqkit.models  # noqa: F401  (registers the presets)
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.generation import GenerationConfig, SequenceGenerator
from seqkit.models.rnn import RNNConfig, RNNModel, lstm_tiny

DICT = Dictionary([f"w{i}" for i in range(12)])  # 16 symbols with the 4 specials
KINDS = [(cell, attention, step) for cell in ("lstm", "gru") for attention in ("none", "additive", "dot", "general")
         for step in ("luong", "bahdanau") if not (attention == "none" and step == "bahdanau")]


def build(seed: int = 0, **kw) -> RNNModel:
    torch.manual_seed(seed)
    cfg = dataclasses.replace(lstm_tiny(), dropout=0.0, **kw)
    model = RNNModel(cfg, DICT, DICT).double().eval()
    with torch.no_grad():  # the +-0.1 init makes attention nearly uniform: sharpen it so tests can tell rows apart
        for p in model.parameters():
            p.mul_(8.0)
    return model


def batch():
    # (B=3, S=6) right-padded with pad=0; every sentence ends with eos=2
    src = torch.tensor([[5, 6, 7, 8, 9, 2], [10, 11, 2, 0, 0, 0], [4, 15, 14, 2, 0, 0]])
    prev = torch.tensor([[1, 5, 6, 7, 8, 9], [1, 12, 13, 14, 15, 4], [1, 4, 4, 9, 9, 10]])
    return src, src.ne(0).sum(1), prev


def test_frozen_logits():
    src, lengths, prev = batch()
    with torch.no_grad():
        luong = build(attention="general")(src, lengths, prev)
        gru = build(cell="gru", attention="additive", attention_step="bahdanau")(src, lengths, prev)
    assert luong.shape == (3, 6, 16)
    expected_luong = torch.tensor([0.336883, 4.558202, 3.826126, -0.358431], dtype=torch.float64)
    expected_gru = torch.tensor([-4.558114, 1.019031, -1.280573, -1.236528], dtype=torch.float64)
    torch.testing.assert_close(luong[1, 3, 4:8], expected_luong, atol=1e-5, rtol=0)
    torch.testing.assert_close(gru[2, 5, 4:8], expected_gru, atol=1e-5, rtol=0)


@pytest.mark.parametrize("cell,attention,step", KINDS)
def test_incremental_equals_full_with_reordering(cell, attention, step):
    model = build(cell=cell, attention=attention, attention_step=step)
    src, lengths, prev = batch()
    with torch.no_grad():
        enc = model.encode(src, lengths)
        cache = model.init_cache(enc, 6)
        rows = prev.clone()  # the prefix each cache row has consumed
        for t in range(3):
            model.decode_step(prev[:, t:t + 1], enc, cache, t)
        # beams re-ranked (row 0 duplicated) and, later, sentences leaving the batch
        for t, order in ((3, torch.tensor([2, 0, 0, 1])), (4, torch.tensor([3, 1]))):
            cache = model.reorder_cache(cache, order, True)
            enc, rows = model.reorder(enc, order), rows[order]
            step_logits = model.decode_step(rows[:, t:t + 1], enc, cache, t)
            full = model.decode(rows[:, : t + 1], enc)[:, t]
            torch.testing.assert_close(step_logits, full, atol=1e-10, rtol=0)


@pytest.mark.parametrize("cell,attention,step", KINDS)
def test_padding_does_not_change_a_sentence(cell, attention, step):
    model = build(cell=cell, attention=attention, attention_step=step)
    src, lengths, prev = batch()
    with torch.no_grad():
        together = model(src, lengths, prev)
        for i in range(3):
            n = int(lengths[i])
            alone = model(src[i:i + 1, :n], lengths[i:i + 1], prev[i:i + 1])
            torch.testing.assert_close(together[i:i + 1], alone, atol=1e-10, rtol=0)


@pytest.mark.parametrize("attention,step", [("additive", "luong"), ("dot", "bahdanau"), ("general", "luong")])
def test_attention_sums_to_one_over_real_source_tokens(attention, step):
    model = build(attention=attention, attention_step=step)
    src, lengths, prev = batch()
    with torch.no_grad():
        enc = model.encode(src, lengths)
        _, attn = model.decode(prev, enc, return_attention=True)  # (B, T, S)
        cache = model.init_cache(enc, 6)
        _, step_attn = model.decode_step_attention(prev[:, :1], enc, cache, 0)  # (B, S)
    assert attn.shape == (3, 6, 6)
    torch.testing.assert_close(attn.sum(-1), torch.ones(3, 6, dtype=torch.float64))
    assert bool((attn[src.eq(0).unsqueeze(1).expand_as(attn)] == 0).all())
    torch.testing.assert_close(step_attn, attn[:, 0])
    uniform = src.ne(0).double().div(lengths.unsqueeze(1).double()).unsqueeze(1)  # (B, 1, S)
    assert float((attn - uniform).abs().max()) > 0.05  # not uniform: the other tests can see rows move


def test_attention_none_exposes_no_attention():
    model = build(attention="none")
    src, lengths, prev = batch()
    enc = model.encode(src, lengths)
    with pytest.raises(SeqkitError, match="exposes no attention"):
        model.decode_step_attention(prev[:, :1], enc, model.init_cache(enc, 6), 0)


def test_search_alignments_match_the_full_pass():
    """Beam search keeps each hypothesis' attention rows through re-ranking: they equal a
    teacher-forced pass over the hypothesis, as do its positional scores."""
    model = build(attention="general")
    src, lengths, _ = batch()
    gen = SequenceGenerator(DICT, GenerationConfig(beam=3, nbest=3, max_len_b=6, print_alignment=True))
    plain = SequenceGenerator(DICT, GenerationConfig(beam=3, nbest=3, max_len_b=6))
    out, ref = gen.generate(model, src, lengths), plain.generate(model, src, lengths)
    for i, (hyps, ref_hyps) in enumerate(zip(out, ref)):
        n = int(lengths[i])
        enc = model.encode(src[i:i + 1, :n], lengths[i:i + 1])
        for h, r in zip(hyps, ref_hyps):
            assert torch.equal(h["tokens"], r["tokens"])  # alignment does not change the search
            prev = torch.cat([torch.tensor([DICT.bos()]), h["tokens"][:-1]]).unsqueeze(0)
            with torch.no_grad():
                logits, attn = model.decode(prev, enc, return_attention=True)
            assert h["attention"].shape == (len(h["tokens"]), n)
            torch.testing.assert_close(h["attention"], attn[0].float(), atol=1e-6, rtol=0)
            lprobs = torch.log_softmax(logits[0], -1).gather(1, h["tokens"].unsqueeze(1))[:, 0]
            torch.testing.assert_close(h["positional_scores"], lprobs.float(), atol=1e-5, rtol=0)


def test_shared_embeddings_need_one_dictionary():
    other = Dictionary([f"v{i}" for i in range(12)])
    with pytest.raises(SeqkitError, match="joined dictionary"):
        RNNModel(dataclasses.replace(lstm_tiny(), share_all_embeddings=True), DICT, other)
    model = RNNModel(dataclasses.replace(lstm_tiny(), share_all_embeddings=True), DICT, DICT)
    assert model.src_embed is model.tgt_embed


def test_presets_build_and_differ_as_named():
    choices = MODELS.choices()
    for name in ("lstm_luong_small", "lstm_bahdanau_small", "gru_bahdanau_small", "lstm_tiny"):
        assert isinstance(choices[name], RNNConfig)
        MODELS.build(choices[name], DICT, DICT)
    assert (choices["lstm_luong_small"].attention, choices["lstm_luong_small"].attention_step) == ("general", "luong")
    assert (choices["gru_bahdanau_small"].cell, choices["gru_bahdanau_small"].attention) == ("gru", "additive")
