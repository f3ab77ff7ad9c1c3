"""Sentence classifiers and taggers (cbow, kim_cnn, bilstm_*, transformer_*) at tiny dimensions:
frozen outputs, padding invariance, shapes, gradients, presets, segments, word dropout."""

import dataclasses

import pytest
import torch

import seqkit
from seqkit.core.config import check_ranges
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.models.base import EncoderClassifierModel
from seqkit.models.bilstm import BiLSTMClassifier, BiLSTMTagger
from seqkit.models.cbow import CBOWClassifier, word_dropout_mask
from seqkit.models.kim_cnn import KimCNNClassifier
from seqkit.models.transformer_encoder import TransformerClassifier, TransformerTagger

seqkit.import_builtin_components()

DICT = Dictionary([f"w{i}" for i in range(12)])  # 16 symbols: pad=0, <s>=1, </s>=2, unk=3
K = 3
# model name -> (tiny preset, kind)
TINY = {
    "cbow": ("cbow_tiny", "classifier"),
    "kim_cnn": ("kim_cnn_tiny", "classifier"),
    "bilstm_classifier": ("bilstm_classifier_tiny", "classifier"),
    "bilstm_tagger": ("bilstm_tagger_tiny", "tagger"),
    "transformer_classifier": ("transformer_classifier_tiny", "classifier"),
    "transformer_tagger": ("transformer_tagger_tiny", "tagger"),
}
PRESETS = {  # preset -> (kind, labels)
    "dan_small": ("classifier", 2), "cbow_tiny": ("classifier", 2),
    "kim_cnn_rand": ("classifier", 2), "kim_cnn_tiny": ("classifier", 2),
    "bilstm_classifier_small": ("classifier", 2), "bilstm_classifier_tiny": ("classifier", 2),
    "bilstm_tagger_small": ("tagger", 9), "bilstm_tagger_tiny": ("tagger", 9),
    "transformer_classifier_small": ("classifier", 2), "transformer_classifier_tiny": ("classifier", 2),
    "transformer_tagger_small": ("tagger", 9), "transformer_tagger_tiny": ("tagger", 9),
}


def build(name: str, seed: int = 0, train: bool = False, **kw) -> EncoderClassifierModel:
    torch.manual_seed(seed)
    cfg = MODELS.choices()[TINY[name][0]]
    fields = {f.name for f in dataclasses.fields(cfg)}
    off = {k: 0.0 for k in ("dropout", "word_dropout", "attention_dropout", "embed_dropout") if k in fields}
    if "layer_norm_impl" in fields:
        off["layer_norm_impl"] = "torch"
    cfg = dataclasses.replace(cfg, **{**off, **kw})
    model = MODELS.build(cfg, DICT, K).double()
    return model.train(train)


def single():
    # (B=3, S=6): <s> words </s>, right-padded with pad=0
    src = torch.tensor([[1, 5, 6, 7, 8, 2], [1, 10, 2, 0, 0, 0], [1, 4, 15, 14, 2, 0]])
    return src, src.ne(0).sum(1), None


def pairs():
    # (B=3, S=7): <s> a </s> b </s>; segments 0 up to and including the first </s>, then 1 (0 at pads)
    src = torch.tensor([[1, 5, 6, 2, 7, 8, 2], [1, 9, 2, 10, 2, 0, 0], [1, 4, 2, 4, 11, 2, 0]])
    seg = torch.tensor([[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1, 0]])
    return src, src.ne(0).sum(1), seg


def token_embedding(model) -> torch.nn.Embedding:
    (emb,) = [m for m in model.modules() if isinstance(m, torch.nn.Embedding) and m.num_embeddings == len(DICT)]
    return emb


# Obtained once (torch 2.13, CPU) by printing build(name)(*single())[FROZEN_AT[name]] to 6 decimals:
# logits[row] (classifiers) or logits[row, position] (taggers), all K=3 labels, float64.
FROZEN_AT = {"cbow": (0,), "kim_cnn": (0,), "bilstm_classifier": (2,), "bilstm_tagger": (2, 3),
             "transformer_classifier": (1,), "transformer_tagger": (0, 4)}
FROZEN = {
    "cbow": [-0.053398, -0.045928, 0.151783],
    "kim_cnn": [-0.218988, 0.208236, -0.031754],
    "bilstm_classifier": [0.026459, 0.056838, 0.203062],
    "bilstm_tagger": [-0.054939, 0.201922, 0.145690],
    "transformer_classifier": [0.041923, 0.593734, 0.610372],
    "transformer_tagger": [2.214335, 2.297986, 1.054694],
}


@pytest.mark.parametrize("name", TINY)
def test_frozen_outputs(name):
    with torch.no_grad():
        out = build(name)(*single())
    torch.testing.assert_close(out[FROZEN_AT[name]], torch.tensor(FROZEN[name], dtype=torch.float64),
                               atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("make", [single, pairs])
def test_shapes_and_padding_invariance(name, make):
    model = build(name)
    src, lengths, seg = make()
    B, S = src.shape
    with torch.no_grad():
        together = model(src, lengths, seg)
        assert together.shape == ((B, K) if model.kind == "classifier" else (B, S, K))
        assert bool(torch.isfinite(together).all())
        for i in range(B):
            n = int(lengths[i])
            alone = model(src[i:i + 1, :n], lengths[i:i + 1], None if seg is None else seg[i:i + 1, :n])
            expected = together[i:i + 1] if model.kind == "classifier" else together[i:i + 1, :n]
            torch.testing.assert_close(alone, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", TINY)
def test_gradients_reach_the_embeddings(name):
    model = build(name, train=True, dropout=0.1)
    src, lengths, _ = single()
    model(src, lengths).square().sum().backward()
    grad = token_embedding(model).weight.grad
    used = torch.unique(src[src.ne(0)])
    assert bool((grad[used].abs().sum(1) > 0).all())
    assert float(grad[DICT.pad()].abs().sum()) == 0.0
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad and p.dim() > 1)


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_builds_in_range(preset):
    cfg = MODELS.choices()[preset]
    check_ranges(cfg, "model.")
    kind, labels = PRESETS[preset]
    model = MODELS.build(cfg, DICT, labels)
    assert model.kind == kind and TINY[cfg.name][1] == kind
    src, lengths, _ = single()
    with torch.no_grad():
        out = model.eval()(src, lengths)
    assert out.shape[-1] == labels
    assert model.max_positions()[0] == cfg.max_positions


def test_kinds():
    assert CBOWClassifier.kind == KimCNNClassifier.kind == BiLSTMClassifier.kind == "classifier"
    assert TransformerClassifier.kind == "classifier"
    assert BiLSTMTagger.kind == TransformerTagger.kind == "tagger"


@pytest.mark.parametrize("name", TINY)
def test_too_long_input_is_one_clear_error(name):
    model = build(name)
    n = model.max_positions()[0] + 1
    src = torch.full((1, n), 5)
    with pytest.raises(SeqkitError, match="max_positions"):
        model(src, torch.tensor([n]))


def test_transformer_segments_change_a_pair_and_none_means_type_0():
    model = build("transformer_classifier")
    src, lengths, seg = pairs()
    with torch.no_grad():
        with_seg, without = model(src, lengths, seg), model(src, lengths)
        zeros = model(src, lengths, torch.zeros_like(seg))
    assert float((with_seg - without).abs().min()) > 1e-4
    torch.testing.assert_close(without, zeros, atol=1e-12, rtol=0)
    with pytest.raises(SeqkitError, match="num_segments"):
        build("transformer_tagger", num_segments=0)(src, lengths, seg)


def test_transformer_encoder_moves_between_heads():
    """The classifier's and the tagger's encoders hold the same parameters (pretrain once, fine-tune both)."""
    clf, tag = build("transformer_classifier"), build("transformer_tagger", seed=1)
    assert all(k.split(".")[0] in ("encoder", "head") for k in clf.state_dict())
    tag.encoder.load_state_dict(clf.encoder.state_dict())
    src, lengths, _ = single()
    with torch.no_grad():
        torch.testing.assert_close(tag.encoder(src), clf.encoder(src))


def test_bilstm_final_states_are_the_ends_of_the_outputs():
    model = build("bilstm_classifier")
    src, lengths, _ = single()
    with torch.no_grad():
        out, final = model.encoder(src, lengths)  # (B, S, 2H), (B, 2H)
    H = out.size(2) // 2
    last = out[torch.arange(3), lengths - 1, :H]
    torch.testing.assert_close(final, torch.cat([last, out[:, 0, H:]], dim=1))
    assert float(out[src.eq(0)].abs().sum()) == 0.0


def test_word_dropout_only_in_training_and_never_empties_a_sentence():
    src, lengths, _ = single()
    real = src.ne(0)
    torch.manual_seed(0)
    for p in (0.0, 0.3, 0.9, 0.999):
        for _ in range(50):
            keep = word_dropout_mask(real, p)
            assert bool(keep.any(1).all()) and not bool((keep & ~real).any())
            if p == 0.0:
                assert torch.equal(keep, real)
    big = torch.ones(400, 50, dtype=torch.bool)
    assert abs(float(word_dropout_mask(big, 0.3).double().mean()) - 0.7) < 0.01
    model = build("cbow", word_dropout=0.5)
    with torch.no_grad():
        evals = [model(src, lengths) for _ in range(3)]
        assert all(torch.equal(e, evals[0]) for e in evals)
        model.train()
        trains = [model(src, lengths) for _ in range(5)]
    assert any(not torch.allclose(t, evals[0]) for t in trains)
    assert all(bool(torch.isfinite(t).all()) for t in trains)


@pytest.mark.parametrize("preset", ["kim_cnn_tiny", "kim_cnn_rand"])
def test_kim_cnn_on_sentences_shorter_than_its_filters(preset):
    torch.manual_seed(0)
    model = MODELS.build(MODELS.choices()[preset], DICT, K).double().eval()
    src = torch.tensor([[5, 0, 0, 0, 0, 0, 0], [1, 6, 2, 0, 0, 0, 0], [1, 5, 6, 7, 8, 9, 2]])
    lengths = src.ne(0).sum(1)
    with torch.no_grad():
        together = model(src, lengths)
        assert bool(torch.isfinite(together).all())
        for i in range(3):
            n = int(lengths[i])
            torch.testing.assert_close(model(src[i:i + 1, :n], lengths[i:i + 1]), together[i:i + 1], atol=1e-5, rtol=0)
