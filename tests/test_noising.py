"""Masking / noising transforms: frozen outputs on a short example, rates on one long example each."""

import functools

import numpy as np
import pytest
import torch

from seqkit.data.noising import (
    BartNoise,
    NoiseSpecials,
    bart_noise,
    compose,
    document_rotate,
    mask_tokens,
    replaced_token_labels,
    sentence_permute,
    span_lengths,
    span_mask_tokens,
    t5_span_corrupt,
    text_infill,
    token_delete,
    token_mask,
    word_starts_from_pieces,
)
from seqkit.core.errors import SeqkitError

SP = NoiseSpecials(mask=30, vocab_size=30, sentinels=tuple(range(31, 41)))  # real symbols 4..29
X = torch.tensor([1] + list(range(4, 24)) + [2])  # <s> 4 .. 23 </s>
WS = torch.tensor([True] + [i % 3 == 0 for i in range(20)] + [True])  # words of 3 pieces: 4-6, 7-9, ...
BIG = NoiseSpecials(mask=100_000, vocab_size=100_000, sentinels=tuple(range(100_001, 100_401)))


def rng(seed=1):
    return np.random.default_rng(seed)


def half_up(x):
    return int(np.floor(x + 0.5))


def long_example(n):
    """<s> + n real ids (distinct and increasing, so order and deletions are visible) + </s>."""
    return torch.cat([torch.tensor([1]), torch.arange(4, 4 + n), torch.tensor([2])])


ALL = {
    "mask_tokens": lambda t, r: mask_tokens(t, r, SP)[0],
    "whole_word": lambda t, r: mask_tokens(t, r, SP, word_starts=torch.ones_like(t, dtype=torch.bool))[0],
    "span_mask": lambda t, r: span_mask_tokens(t, r, SP).input,
    "token_mask": lambda t, r: token_mask(t, r, SP, 0.3),
    "token_delete": lambda t, r: token_delete(t, r, SP, 0.3),
    "text_infill": lambda t, r: text_infill(t, r, SP),
    "sentence_permute": lambda t, r: sentence_permute(t, r, SP, [8, 15]),
    "document_rotate": lambda t, r: document_rotate(t, r, SP),
    "t5": lambda t, r: t5_span_corrupt(t, r, SP)[0],
}


# ---------------------------------------------------------------- frozen outputs


def test_frozen_mask_tokens():
    inp, tgt = mask_tokens(X, rng(), SP)  # 3 of 20 selected: 12 kept, 13 and 19 masked
    assert inp.tolist() == [1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 30, 14, 15, 16, 17, 18, 30, 20, 21, 22, 23, 2]
    assert tgt.tolist() == [0] * 9 + [12, 13] + [0] * 5 + [19] + [0] * 5
    inp, tgt = mask_tokens(X, rng(), SP, mask_prob=0.3, word_starts=WS)  # 2 of 7 words: 10-12, 13-15
    assert inp.tolist() == [1, 4, 5, 6, 7, 8, 9, 30, 11, 30, 30, 28, 30, 16, 17, 18, 19, 20, 21, 22, 23, 2]
    assert tgt.tolist() == [0] * 7 + [10, 11, 12, 13, 14, 15] + [0] * 9


def test_frozen_span_mask():
    s = span_mask_tokens(X, rng(), SP, mask_prob=0.3)  # 6 tokens in two spans of 3, all masked
    assert s.input.tolist() == [1, 4, 5, 6, 30, 30, 30, 10, 11, 12, 13, 14, 15, 16, 17, 30, 30, 30, 21, 22, 23, 2]
    assert s.target.tolist() == [0] * 4 + [7, 8, 9] + [0] * 8 + [18, 19, 20] + [0] * 4
    assert s.positions.tolist() == [4, 5, 6, 15, 16, 17]
    assert s.left.tolist() == [3, 3, 3, 14, 14, 14]
    assert s.right.tolist() == [7, 7, 7, 18, 18, 18]
    assert s.offset.tolist() == [0, 1, 2, 0, 1, 2]


def test_frozen_bart_noises():
    assert token_mask(X, rng(), SP, 0.3).tolist() == [
        1, 4, 5, 30, 7, 8, 9, 10, 11, 12, 30, 14, 15, 16, 17, 18, 19, 30, 21, 30, 30, 2]  # fmt: skip
    assert token_delete(X, rng(), SP, 0.3).tolist() == [1, 4, 5, 7, 8, 9, 10, 11, 12, 14, 15, 16, 17, 18, 19, 21, 2]
    # 6 tokens infilled: 6-9 and 17-18 each become one <mask>
    assert text_infill(X, rng(), SP).tolist() == [1, 4, 5, 30, 10, 11, 12, 13, 14, 15, 16, 30, 19, 20, 21, 22, 23, 2]
    # sentences "4..8" "9..15" "16..23" reordered 3, 2, 1
    assert sentence_permute(X, rng(3), SP, [8, 15]).tolist() == [1] + list(range(16, 24)) + list(range(9, 16)) + list(
        range(4, 9)
    ) + [2]
    assert document_rotate(X, rng(), SP).tolist() == [1] + list(range(13, 24)) + list(range(4, 13)) + [2]
    cfg = BartNoise(permute_sentences=True, full_stop_ids=(8, 15), infill_ratio=0.3, rotate=True)
    out = bart_noise(X, rng(), SP, cfg)
    assert out.tolist() == [1, 23, 4, 5, 30, 8, 9, 10, 11, 12, 13, 14, 30, 19, 20, 21, 22, 2]
    # the same as composing the three noises by hand, in fairseq's order
    by_hand = compose(
        functools.partial(sentence_permute, sp=SP, full_stop_ids=(8, 15)),
        functools.partial(text_infill, sp=SP, p=0.3),
        functools.partial(document_rotate, sp=SP),
    )
    assert by_hand(X, rng()).tolist() == out.tolist()


def test_frozen_t5():
    inp, tgt = t5_span_corrupt(X, rng(), SP, noise_density=0.3)  # 6 noise tokens in 2 spans
    assert inp.tolist() == [1, 4, 5, 6, 7, 8, 9, 10, 31, 14, 15, 16, 17, 18, 19, 20, 32, 2]
    assert tgt.tolist() == [31, 11, 12, 13, 32, 21, 22, 23, 2]


def test_same_seed_same_noise_and_seeds_differ():
    for name, fn in ALL.items():
        assert fn(X, rng(7)).tolist() == fn(X, rng(7)).tolist(), name
    assert mask_tokens(X, rng(7), SP)[1].tolist() != mask_tokens(X, rng(8), SP)[1].tolist()


def test_word_starts_from_pieces():
    assert word_starts_from_pieces(["<s>", "▁he", "llo", "▁world", ".", "</s>"]).tolist() == [
        True, True, False, True, False, True]  # fmt: skip
    assert word_starts_from_pieces(["<s>", "un", "##able", "to", "</s>"], wordpiece=True).tolist() == [
        True, True, False, True, True]  # fmt: skip


# ---------------------------------------------------------------- rates on a long example


def test_mask_tokens_rates_and_specials():
    r = rng(0)
    n = 20_000
    tokens = torch.from_numpy(r.integers(4, BIG.vocab_size, size=n))
    specials = torch.from_numpy(r.random(n) < 0.05)  # sprinkle pad/unk/eos/mask/sentinels inside
    tokens[specials] = torch.from_numpy(r.choice([0, 2, 3, BIG.mask, BIG.sentinels[0]], size=int(specials.sum())))
    tokens = torch.cat([torch.tensor([1]), tokens, torch.tensor([2])])
    inp, tgt = mask_tokens(tokens, r, BIG)
    maskable = BIG.is_real(tokens)
    selected = tgt != BIG.pad
    assert not (selected & ~maskable).any()  # specials never selected ...
    assert torch.equal(inp[~selected], tokens[~selected])  # ... nor changed
    assert abs(selected.sum().item() / maskable.sum().item() - 0.15) <= 0.01
    n_sel = selected.sum().item()
    masked = (inp == BIG.mask) & selected
    kept = (inp == tokens) & selected
    random = selected & ~masked & ~kept
    assert abs(masked.sum().item() / n_sel - 0.8) <= 0.03
    assert abs(kept.sum().item() / n_sel - 0.1) <= 0.03
    assert abs(random.sum().item() / n_sel - 0.1) <= 0.03
    assert BIG.is_real(inp[random]).all()  # random replacements are real symbols only


def test_random_replacements_stay_real_in_a_tiny_vocab():
    sp = NoiseSpecials(mask=6, vocab_size=6, sentinels=(7,))  # real symbols: 4 and 5 only
    tokens = torch.tensor([1] + [4, 5] * 200 + [2])
    inp, _ = mask_tokens(tokens, rng(0), sp, mask_prob=0.5, leave_unmasked_prob=0.0, random_token_prob=1.0)
    assert set(inp[1:-1].tolist()) <= {4, 5} and inp[0] == 1 and inp[-1] == 2


def test_whole_word_and_span_masking_take_all_or_none_of_a_word():
    r = rng(0)
    n = 5000
    tokens = long_example(n)
    starts = torch.from_numpy(r.random(n + 2) < 0.4)
    starts[0] = starts[1] = starts[-1] = True
    word = torch.cumsum(starts.long(), 0) - 1
    size = torch.bincount(word)
    n_words = int(starts[1:-1].sum())
    whole_word = mask_tokens(tokens, r, BIG, word_starts=starts)[1]
    for tgt in [whole_word, span_mask_tokens(tokens, r, BIG, word_starts=starts).target]:
        selected = (tgt != BIG.pad).long()
        chosen = torch.zeros(int(word.max()) + 1, dtype=torch.long).index_add_(0, word, selected)
        assert ((chosen == 0) | (chosen == size)).all()
        assert (chosen > 0).sum().item() == half_up(0.15 * n_words)


def test_span_lengths_follow_truncated_geometric():
    p, k = 0.2, np.arange(1, 11)
    w = p * (1 - p) ** (k - 1)
    expected = float((k * w).sum() / w.sum())  # 3.797
    lens = span_lengths(rng(0), 20_000, p, 10)
    assert abs(expected - 3.8) < 0.01
    assert lens.min() >= 1 and lens.max() <= 10
    assert abs(lens.mean() - expected) <= 0.06


def test_span_mask_coverage_boundaries_and_per_span_decision():
    n = 20_000
    tokens = long_example(n)
    s = span_mask_tokens(tokens, rng(0), BIG)
    pos, left, right, off = s.positions, s.left, s.right, s.offset
    assert len(pos) == half_up(0.15 * n)  # exact coverage
    assert torch.equal(s.target[pos], tokens[pos]) and (s.target != BIG.pad).sum() == len(pos)
    selected = s.target != BIG.pad
    assert not selected[left].any() and not selected[right].any()  # spans never touch or overlap
    assert torch.equal(pos, left + 1 + off)
    span_len = right - left - 1
    assert span_len.max() <= 10
    starts = off == 0
    # ~790 spans; over seeds this mean is 3.79 +- 0.09 (seed 0 gives 3.96): 3 sd
    assert abs(span_len[starts].float().mean().item() - 3.8) <= 0.3
    # the 80/10/10 choice is per span: a span is all <mask> or holds none
    sid = torch.cumsum(starts.long(), 0) - 1
    n_mask = torch.zeros(int(starts.sum()), dtype=torch.long).index_add_(0, sid, (s.input[pos] == BIG.mask).long())
    assert ((n_mask == 0) | (n_mask == span_len[starts])).all()
    assert (n_mask > 0).float().mean().item() == pytest.approx(0.8, abs=0.05)


def test_text_infill_span_lengths_and_coverage():
    n = 6000
    tokens = long_example(n)
    out = text_infill(tokens, rng(0), BIG, p=0.3, poisson_lambda=3.0)
    body = out[1:-1]
    kept = body[body != BIG.mask]
    assert torch.all(kept[1:] > kept[:-1])  # kept tokens keep their order
    covered = n - len(kept)
    spans = (body == BIG.mask).sum().item()  # one <mask> per span, length-0 spans included
    assert covered == half_up(0.3 * n)
    assert abs(covered / spans - 3.0) <= 0.3  # mean Poisson(3) length


def t5_reconstruct(inp, tgt, sp):
    """Put each target span back in place of its sentinel in the input."""
    spans, k = {}, None
    for t in tgt.tolist()[:-1]:
        if t in sp.sentinels:
            k = t
            spans[k] = []
        else:
            spans[k].append(t)
    out = []
    for t in inp.tolist():
        out.extend(spans[t] if t in sp.sentinels else [t])
    return out


@pytest.mark.parametrize("n", [2, 3, 10, 37, 5000])
def test_t5_counts_and_round_trip(n):
    tokens = long_example(n)
    inp, tgt = t5_span_corrupt(tokens, rng(n), BIG)
    noise = min(max(half_up(0.15 * n), 1), n - 1)
    spans = min(max(1, half_up(noise / 3.0)), noise, n - noise)
    sentinels = [t for t in inp.tolist() if t in BIG.sentinels]
    assert sentinels == list(BIG.sentinels[:spans])
    assert len(tgt) == noise + spans + 1 and tgt[-1] == BIG.eos and tgt[0] == BIG.sentinels[0]
    assert inp[0] == BIG.bos and inp[-1] == BIG.eos and len(inp) == n - noise + spans + 2
    assert t5_reconstruct(inp, tgt, BIG) == tokens.tolist()
    assert inp[1] not in BIG.sentinels  # a kept run comes first


# ---------------------------------------------------------------- edges


@pytest.mark.parametrize("name", list(ALL))
def test_bos_eos_stay_at_the_ends(name):
    for seed in range(5):
        out = ALL[name](X, rng(seed))
        assert out[0] == 1 and out[-1] == 2, name
        assert (out == 1).sum() == 1 and (out == 2).sum() == 1, name


@pytest.mark.parametrize("name", list(ALL))
@pytest.mark.parametrize("tokens", [[], [1], [2], [1, 2]])
def test_empty_and_bos_eos_only_come_back_unchanged(name, tokens):
    t = torch.tensor(tokens, dtype=torch.long)
    assert ALL[name](t, rng()).tolist() == tokens


def test_short_inputs_targets():
    t = torch.tensor([1, 2])
    assert mask_tokens(t, rng(), SP)[1].tolist() == [0, 0]
    assert len(span_mask_tokens(t, rng(), SP).positions) == 0
    assert t5_span_corrupt(t, rng(), SP)[1].tolist() == [2]


def test_specials_validation():
    with pytest.raises(SeqkitError):
        NoiseSpecials(mask=5, vocab_size=30)  # <mask> among the real symbols
    with pytest.raises(SeqkitError):
        t5_span_corrupt(X, rng(), NoiseSpecials(mask=30, vocab_size=30))  # no sentinels
    with pytest.raises(SeqkitError):
        bart_noise(X, rng(), SP, BartNoise(permute_sentences=True))  # no full stops


def test_replaced_token_labels():
    original = torch.tensor([[1, 5, 6, 7, 2, 0], [1, 8, 9, 2, 0, 0]])
    corrupted = torch.tensor([[1, 5, 9, 7, 2, 0], [1, 4, 9, 2, 3, 0]])  # a pad changed is not a label
    assert replaced_token_labels(original, corrupted, pad=0).tolist() == [
        [False, False, True, False, False, False],
        [False, True, False, False, False, False],
    ]
