"""Beam search, greedy search and sampling against a tiny recurrent toy model.

The toy model keeps its recurrent state in the cache, so a wrong reorder changes the logits;
hypotheses are checked against the full teacher-forced pass (``decode``) and exhaustive search.
The Transformer's own cache reordering is checked the same way, step by step.
"""

import itertools
import math

import pytest
import torch

from seqkit.core.errors import SeqkitError
from seqkit.generation import GenerationConfig, SequenceGenerator, Specials, ban_repeated_ngrams
from seqkit.generation.search import row_topk
from seqkit.generation.sampling import best_tokens
from seqkit.models.base import EncoderDecoderModel

PAD, BOS, EOS, UNK = 0, 1, 2, 3
V = 6  # pad bos eos unk + two words (4, 5)
WORDS = (UNK, 4, 5)  # what the search may emit besides eos


class ToyModel(EncoderDecoderModel):
    """An Elman RNN decoder over a bag-of-positions source summary; ``bias`` shifts chosen logits."""

    def __init__(self, seed=1, hidden=8, bias=None, max_tgt=1 << 30):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.src_emb = torch.randn(10, hidden, generator=g)
        self.tgt_emb = torch.randn(V, hidden, generator=g)
        self.w_h = torch.randn(hidden, hidden, generator=g) * 0.5
        self.w_out = torch.randn(hidden, V, generator=g)
        self.bias = torch.zeros(V)
        for tok, b in (bias or {}).items():
            self.bias[tok] = b
        self.max_tgt = max_tgt
        self.batch_sizes = []  # rows of every decode_step call

    def encode(self, src_tokens, src_lengths):
        pos = torch.arange(src_tokens.size(1))
        weight = (pos < src_lengths.unsqueeze(1)) * (1 + 0.3 * pos)  # (B, S): pads count 0, order matters
        return {"ctx": (self.src_emb[src_tokens] * weight.unsqueeze(2)).sum(1) / src_lengths.unsqueeze(1)}

    def _cell(self, h, tok, ctx):
        h = torch.tanh(h @ self.w_h + self.tgt_emb[tok] + ctx)
        return h, h @ self.w_out + self.bias

    def decode(self, prev_output_tokens, enc):
        h, out = torch.zeros_like(enc["ctx"]), []
        for t in range(prev_output_tokens.size(1)):
            h, logits = self._cell(h, prev_output_tokens[:, t], enc["ctx"])
            out.append(logits)
        return torch.stack(out, 1)

    def init_cache(self, enc, max_len):
        return {"h": torch.zeros_like(enc["ctx"]), "steps": torch.zeros(enc["ctx"].size(0), dtype=torch.long)}

    def decode_step(self, tokens, enc, cache, step):
        assert bool((cache["steps"] == step).all())
        self.batch_sizes.append(tokens.size(0))
        cache["h"], logits = self._cell(cache["h"], tokens[:, 0], enc["ctx"])
        cache["steps"] += 1
        return logits

    def max_positions(self):
        return (1 << 30, self.max_tgt)


def run(model, srcs, **cfg):
    lengths = torch.tensor([len(s) for s in srcs])
    src = torch.zeros(len(srcs), int(lengths.max()), dtype=torch.long)
    for i, s in enumerate(srcs):
        src[i, : len(s)] = torch.tensor(s)
    return SequenceGenerator(Specials(V), GenerationConfig(**cfg)).generate(model, src, lengths)


def forced_lprobs(model, src, tokens, temperature=1.0):
    """Log-prob of each of ``tokens`` under the full decoder pass fed ``[bos] + tokens[:-1]``."""
    enc = model.encode(torch.tensor([src]), torch.tensor([len(src)]))
    prev = torch.tensor([[BOS] + list(tokens[:-1])])
    lprobs = torch.log_softmax(model.decode(prev, enc)[0] / temperature, -1)
    return lprobs.gather(1, torch.tensor(tokens).unsqueeze(1)).squeeze(1)


def step_lprobs(model, src, tokens, min_len=1):
    """``(L, V)`` log-probs the search sees at each position of ``tokens`` (pad/bos/early eos -inf)."""
    enc = model.encode(torch.tensor([src]), torch.tensor([len(src)]))
    lp = torch.log_softmax(model.decode(torch.tensor([[BOS] + list(tokens[:-1])]), enc)[0], -1)
    lp[:, [PAD, BOS]] = -math.inf
    lp[:min_len, EOS] = -math.inf
    return lp


def check_hypothesis(model, src, hyp, lenpen=1.0, temperature=1.0):
    toks = hyp["tokens"].tolist()
    assert toks[-1] == EOS and EOS not in toks[:-1] and BOS not in toks and PAD not in toks
    assert hyp["tokens"].device.type == "cpu" and hyp["positional_scores"].shape == hyp["tokens"].shape
    expected = forced_lprobs(model, src, toks, temperature)
    torch.testing.assert_close(hyp["positional_scores"], expected, atol=1e-5, rtol=0)
    assert hyp["score"] == pytest.approx(float(expected.sum()) / len(toks) ** lenpen, abs=1e-5)


def as_lists(out):
    return [[(h["tokens"].tolist(), round(h["score"], 4)) for h in hyps] for hyps in out]


SRC = [5, 7, 4]


def test_toy_decode_step_matches_decode():
    model = ToyModel()
    enc = model.encode(torch.tensor([SRC, [6, 8, 0]]), torch.tensor([3, 2]))
    prev = torch.tensor([[BOS, 4, 5, 3], [BOS, 5, 5, 4]])
    cache = model.init_cache(enc, 4)
    steps = torch.stack([model.decode_step(prev[:, t : t + 1], enc, cache, t) for t in range(4)], 1)
    torch.testing.assert_close(steps, model.decode(prev, enc))


@pytest.mark.parametrize("lenpen", [0.0, 1.0, 2.0])
def test_large_beam_equals_exhaustive_search(lenpen):
    model = ToyModel()
    ranked = []
    for n in range(1, 5):  # min_len=1 .. max_len_b=4 words, then eos
        for words in itertools.product(WORDS, repeat=n):
            toks = list(words) + [EOS]
            ranked.append((float(forced_lprobs(model, SRC, toks).sum()) / len(toks) ** lenpen, toks))
    ranked.sort(key=lambda x: -x[0])
    # 128 >= every step's candidate count (27 prefixes * 4 tokens), so no hypothesis is ever pruned
    (hyps,) = run(model, [SRC], beam=128, nbest=5, max_len_b=4, lenpen=lenpen)
    assert [h["tokens"].tolist() for h in hyps] == [t for _, t in ranked[:5]]
    assert [h["score"] for h in hyps] == pytest.approx([s for s, _ in ranked[:5]], abs=1e-5)
    for h in hyps:
        check_hypothesis(model, SRC, h, lenpen)


def test_small_beam_frozen():
    model = ToyModel(seed=3)
    srcs = [SRC, [9, 8, 6, 4]]
    out = run(model, srcs, beam=2, nbest=2, max_len_b=6)
    assert as_lists(out) == [
        [([4, 4, 4, 4, 4, 5, EOS], -0.4711), ([4, 4, 4, 4, 4, 4, EOS], -0.8403)],  # the 2nd: eos forced at 6
        [([4, 5, 5, EOS], -0.8925), ([4, 5, EOS], -0.9346)],
    ]
    expected = [-0.5351, -1.6065, -0.8807, -0.5476]
    torch.testing.assert_close(out[1][0]["positional_scores"], torch.tensor(expected), atol=1e-4, rtol=0)
    for src, hyps in zip(srcs, out):
        for h in hyps:
            check_hypothesis(model, src, h)


def test_batch_equals_one_sentence_at_a_time():
    model = ToyModel(seed=3)
    srcs = [[5, 7, 4, 9, 6], [8, 4], [4, 5, 6, 7, 8, 9, 4], [9, 9, 5]]
    cfg = dict(beam=3, nbest=3, max_len_a=1.0, max_len_b=1)
    batched = run(model, srcs, **cfg)
    for src, hyps in zip(srcs, batched):
        (alone,) = run(model, [src], **cfg)
        assert [h["tokens"].tolist() for h in hyps] == [h["tokens"].tolist() for h in alone]
        for h, a in zip(hyps, alone):
            assert h["score"] == pytest.approx(a["score"], abs=1e-5)
            torch.testing.assert_close(h["positional_scores"], a["positional_scores"], atol=1e-5, rtol=0)
            check_hypothesis(model, src, h)
        assert len(hyps) == 3 and all(len(h["tokens"]) <= len(src) + 2 for h in hyps)


def test_greedy_equals_argmax_loop():
    model = ToyModel(seed=2)
    srcs = [SRC, [9, 8], [6, 6, 6, 7]]
    for src, (hyp,) in zip(srcs, run(model, srcs, beam=1, max_len_b=8, min_len=2)):
        toks = []
        while not toks or toks[-1] != EOS:
            lp = step_lprobs(model, src, toks + [EOS], min_len=2)[-1]
            toks.append(EOS if len(toks) == 8 else int(lp.argmax()))
        assert hyp["tokens"].tolist() == toks
        check_hypothesis(model, src, hyp)


def test_min_len():
    model = ToyModel(bias={EOS: 4.0})  # eos is by far the likeliest token
    (short,) = run(model, [SRC], beam=3, nbest=3)
    assert min(len(h["tokens"]) for h in short) == 2  # min_len=1: one word, then eos
    (hyps,) = run(model, [SRC], beam=3, nbest=3, min_len=3)
    assert len(hyps) == 3 and all(len(h["tokens"]) >= 4 for h in hyps)  # >= 3 words, then eos
    for h in hyps:
        check_hypothesis(model, SRC, h)


def test_max_len_a_b_and_max_positions():
    model = ToyModel(bias={EOS: -20.0})  # never ends on its own
    out = run(model, [[4, 5, 6], [4, 5, 6, 7, 8, 9]], beam=2, nbest=2, max_len_a=0.5, max_len_b=1)
    assert [[len(h["tokens"]) for h in hyps] for hyps in out] == [[3, 3], [5, 5]]  # int(0.5*3+1)=2, 4 (+eos)
    model = ToyModel(bias={EOS: -20.0}, max_tgt=4)
    (hyps,) = run(model, [SRC], beam=2, nbest=2, max_len_b=10)
    assert [len(h["tokens"]) for h in hyps] == [4, 4]  # eos included, the decoder sees bos + 3 words
    for h in hyps:
        check_hypothesis(model, SRC, h)


def test_unkpen():
    model = ToyModel(bias={UNK: 2.0})
    (hyps,) = run(model, [SRC], beam=2, max_len_b=6)
    assert UNK in hyps[0]["tokens"].tolist()
    (hyps,) = run(model, [SRC], beam=2, nbest=2, max_len_b=6, unkpen=50.0)
    assert all(UNK not in h["tokens"].tolist() for h in hyps)
    (hyps,) = run(model, [SRC], beam=1, max_len_b=6, unkpen=0.5)  # the penalty is part of the score
    scores = forced_lprobs(model, SRC, hyps[0]["tokens"].tolist())
    scores -= 0.5 * (hyps[0]["tokens"] == UNK)
    torch.testing.assert_close(hyps[0]["positional_scores"], scores, atol=1e-5, rtol=0)


def repeats(toks, n):
    grams = [tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)]
    return len(grams) != len(set(grams))


def test_no_repeat_ngram_size():
    model = ToyModel(bias={EOS: -20.0})
    (hyps,) = run(model, [SRC], beam=3, nbest=3, max_len_b=8)
    assert any(repeats(h["tokens"].tolist()[:-1], 2) for h in hyps)
    (hyps,) = run(model, [SRC], beam=3, nbest=3, max_len_b=8, no_repeat_ngram_size=2)
    assert len(hyps) == 3 and not any(repeats(h["tokens"].tolist()[:-1], 2) for h in hyps)
    for h in hyps:
        check_hypothesis(model, SRC, h)
    (hyps,) = run(model, [SRC], beam=3, nbest=3, max_len_b=8, no_repeat_ngram_size=1)
    assert all(len(h["tokens"]) == 4 for h in hyps)  # the three words once each, then only eos is left


def test_ban_repeated_ngrams_matches_plain_loop():
    g = torch.Generator().manual_seed(0)
    gen = torch.randint(3, 6, (5, 7), generator=g)
    for n in (1, 2, 3):
        lprobs = torch.zeros(5, V)
        ban_repeated_ngrams(lprobs, gen, n)
        for r, row in enumerate(gen.tolist()):
            ctx = tuple(row[len(row) - n + 1 :]) if n > 1 else ()
            banned = {row[i + n - 1] for i in range(len(row) - n + 1) if tuple(row[i : i + n - 1]) == ctx}
            assert {t for t in range(V) if lprobs[r, t] == -math.inf} == banned


def test_sampling_topk1_and_tiny_topp_equal_greedy():
    model = ToyModel(seed=2)
    srcs = [SRC, [9, 8]]
    greedy = run(model, srcs, beam=1, max_len_b=8)
    torch.manual_seed(0)
    for extra in (dict(sampling_topk=1), dict(sampling_topp=1e-6)):
        sampled = run(model, srcs, beam=3, nbest=3, max_len_b=8, sampling=True, **extra)
        for g, s in zip(greedy, sampled):
            assert as_lists([s]) == as_lists([g * 3])


def test_sampling_reproducible_and_within_topk_topp():
    model = ToyModel(seed=2)
    cfg = dict(beam=4, nbest=4, max_len_b=8, sampling=True, sampling_topk=2)
    torch.manual_seed(7)
    first = run(model, [SRC, [9, 8]], **cfg)
    torch.manual_seed(7)
    assert as_lists(run(model, [SRC, [9, 8]], **cfg)) == as_lists(first)
    assert len({tuple(h["tokens"].tolist()) for h in first[0]}) > 1  # samples differ
    for src, hyps in zip([SRC, [9, 8]], first):
        assert [h["score"] for h in hyps] == sorted((h["score"] for h in hyps), reverse=True)
        for h in hyps:
            check_hypothesis(model, src, h)
            toks = h["tokens"].tolist()
            lp = step_lprobs(model, src, toks)
            assert all(t in lp[i].topk(2).indices.tolist() for i, t in enumerate(toks))
    p = 0.6
    torch.manual_seed(7)
    nucleus = run(model, [SRC, [9, 8]], beam=4, nbest=4, max_len_b=8, sampling=True, sampling_topp=p)
    for src, hyps in zip([SRC, [9, 8]], nucleus):
        for h in hyps:
            toks = h["tokens"].tolist()
            probs = step_lprobs(model, src, toks).exp()
            for i, t in enumerate(toks):  # inside the nucleus: the strictly likelier tokens hold < p
                assert float(probs[i][probs[i] > probs[i, t]].sum()) < p


def test_sampling_temperature_scales_scores():
    model = ToyModel(seed=2)
    torch.manual_seed(0)
    (hyps,) = run(model, [SRC], beam=2, nbest=2, max_len_b=8, sampling=True, temperature=2.0)
    for h in hyps:
        check_hypothesis(model, SRC, h, temperature=2.0)


def test_finished_sentences_leave_the_batch():
    model = ToyModel(bias={EOS: -20.0})
    run(model, [[4], [4, 5, 6, 7, 8, 9, 4, 5]], beam=2, max_len_a=1.0, max_len_b=0)
    # step 0 decodes one row per sentence; max lens 1 and 8: the first sentence leaves after step 1
    assert model.batch_sizes == [2, 4] + [2] * 7
    model = ToyModel(seed=2)
    torch.manual_seed(0)
    run(model, [SRC, [9, 8]], beam=4, max_len_b=30, sampling=True)
    sizes = model.batch_sizes
    assert sizes[:2] == [2, 8] and sizes[-1] < 8 and all(a >= b for a, b in zip(sizes[1:], sizes[2:]))


def test_bad_config_is_one_line_error():
    with pytest.raises(SeqkitError, match="nbest"):
        SequenceGenerator(Specials(V), GenerationConfig(beam=2, nbest=3))


@pytest.mark.parametrize("scale", [0.1, 5.0])  # flat: nucleus wider than the first topk try; peaky: inside it
def test_best_tokens_is_the_nucleus(scale):
    lprobs = torch.log_softmax(torch.randn(4, 100, generator=torch.Generator().manual_seed(0)) * scale, -1)
    vals, idx = best_tokens(lprobs, topk=-1, topp=0.7)
    for r in range(4):
        probs = lprobs[r].exp()
        nucleus = {t for t in range(100) if float(probs[probs > probs[t]].sum()) < 0.7}
        assert set(idx[r][vals[r] > -math.inf].tolist()) == nucleus
    vals, idx = best_tokens(lprobs, topk=3, topp=-1.0)
    assert idx.tolist() == lprobs.topk(3).indices.tolist()


@pytest.mark.parametrize("V_wide", [8008, 8011, 40])  # two passes, two passes + a ragged tail, plain topk
def test_row_topk_equals_topk(V_wide):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, V_wide, generator=g).mul_(3).round_()  # rounded: many ties
    x[0, 5:] = -math.inf  # a row with fewer finite values than k
    x[1] = -math.inf
    x[2, -1] = 100.0  # the best token in the tail
    for k in (1, 10):
        vals, idx = row_topk(x, k)
        ref = x.topk(k, dim=1).values
        assert torch.equal(vals, ref)
        assert torch.equal(x.gather(1, idx), vals)  # ties may be other tokens of the same value
        assert all(len(set(row)) == k for row in idx.tolist())


def test_transformer_cache_reorder_matches_full_decode():
    """The transformer's lazy self-attention reorder and per-sentence cross-attention cache, through
    beam expansion, re-ranking, whole sentences leaving, and single rows leaving (sampling)."""
    import seqkit.models.transformer  # noqa: F401
    from seqkit.data.dictionary import Dictionary
    from seqkit.models.transformer import TransformerConfig, TransformerModel

    d = Dictionary([f"w{i}" for i in range(12)])
    cfg = TransformerConfig(encoder_layers=2, decoder_layers=2, embed_dim=12, ffn_dim=16, attention_heads=4,
                            dropout=0.0, max_source_positions=32, max_target_positions=32)
    torch.manual_seed(0)
    model = TransformerModel(cfg, d, d).eval()
    src = torch.tensor([[5, 6, 7, 8, 9, 2], [10, 11, 2, 0, 0, 0], [4, 15, 14, 2, 0, 0]])
    lengths = src.ne(0).sum(1)
    g = torch.Generator().manual_seed(1)

    def rerank(sent):  # each row continues a random row of its own sentence
        rows = [(sent == s).nonzero().squeeze(1) for s in sent.unique_consecutive()]
        return torch.cat([r[torch.randint(0, r.numel(), (r.numel(),), generator=g)] for r in rows])

    with torch.inference_mode():
        enc = model.encode(src, lengths)
        cache = model.init_cache(enc, 8)
        sent = torch.arange(3)  # sentence of each row
        prefix = torch.full((3, 1), BOS)
        for step in range(7):
            logits = model.decode_step(prefix[:, -1:], model.reorder(enc, sent), cache, step)
            full = model.decode(prefix, model.reorder(enc, sent))[:, -1]
            torch.testing.assert_close(logits, full, atol=1e-5, rtol=1e-5)
            order, moved = rerank(sent), False
            if step == 0:  # beam expansion: 3 rows per sentence
                order, moved = torch.arange(3).repeat_interleave(3), True
            elif step == 2:  # sentence 1 leaves
                order, moved = (sent != 1).nonzero().squeeze(1), True
            elif step == 4:  # single rows leave: sentences now have 2 and 1 rows
                order, moved = torch.tensor([0, 2, 3]), True
            cache = model.reorder_cache(cache, order, moved)
            sent, prefix = sent[order], prefix[order]
            prefix = torch.cat([prefix, torch.randint(4, 16, (sent.numel(), 1), generator=g)], 1)
            if step == 2:
                assert cache["static:keep"].size(0) == 2  # one cross-attention row per sentence
        assert cache["static:keep"].size(0) == 3  # one per row once sentences have unequal rows
