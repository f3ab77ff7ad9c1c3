"""generation.verifier=attributes: a language model's continuation has the attributes its prompt asks
for (words=N sentiment=S :), measured by the word-count rule and a classifier checkpoint given as
generation.verifier_model; the refusals around that model, and a prompt that is no request."""

import math
import re

import pytest

from label_fixtures import one_line_error, single, single_ckpt, single_rows  # noqa: F401
from seqkit.cli.generate import main as generate
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers.space import SpaceConfig
from seqkit.verify.attributes import (Request, SentimentMeter, count_words, format_request, parse_request,
                                      satisfies, sentiment_names)

PROG = "seqkit-generate"
LN2 = math.log(2)
GEN = ["common.threads=1", "generation.beam=4", "generation.max_len_b=6", "input=-"]


@pytest.fixture(scope="module")
def clf(single_ckpt):  # noqa: F811 - the fixture
    """The tiny classifier (labels neg, neu, pos) as the verifier's model."""
    return single_ckpt / "checkpoint_best.pt"


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """A 2-update gpt_tiny on lines prefixed with their own attributes, as the recipe trains one."""
    from transfer_fixtures import trainer_for

    root = tmp_path_factory.mktemp("attributes_lm")
    lines = [format_request(count_words(s), label, s) for s, label in single_rows(120, 5)]
    (root / "train.txt").write_text("\n".join(lines[:100]) + "\n", encoding="utf-8")
    (root / "valid.txt").write_text("\n".join(lines[100:]) + "\n", encoding="utf-8")
    preprocess(PreprocessConfig(task="language_modeling", trainpref=str(root / "train.txt"),
                                validpref=str(root / "valid.txt"), destdir=str(root / "lm"), tokenizer=SpaceConfig()))
    trainer_for(["task=language_modeling", "model=gpt_tiny", f"task.data={root / 'lm'}", "task.tokens_per_sample=24",
                 "task.sample_break_mode=eos", "optimization.max_update=2", f"checkpoint.save_dir={root / 'ck'}"]).run()
    return root / "ck" / "checkpoint_last.pt"


class Meter:
    """A stand-in classifier: every text is 'pos', and each call is counted."""

    names = ["neg", "pos"]

    def __init__(self):
        self.calls = 0

    def __call__(self, texts):
        self.calls += 1
        return ["pos"] * len(texts)


def test_words_are_whitespace_tokens_and_a_request_reads_back():
    assert count_words("a gorgeous , witty movie 's end .") == 8
    assert count_words("  two\twords\n") == 2 and count_words("") == 0
    line = format_request(3, "positive", "a fine film ")
    assert line == "words=3 sentiment=positive : a fine film"
    assert parse_request(line[: line.index(":") + 1]) == Request(3, "positive")
    assert parse_request("sentiment=neg words=12 :") == Request(12, "neg")
    assert parse_request("words=2 :") == Request(2) and Request(None, "pos").prompt() == "sentiment=pos :"
    meter = Meter()
    assert satisfies(Request(2, "pos"), "good film", meter) and meter.calls == 1
    assert not satisfies(Request(3, "pos"), "good film", meter) and meter.calls == 1  # no classifier for a wrong count
    assert not satisfies(Request(2, "neg"), "good film", meter)
    assert satisfies(Request(2), "a b", meter) and not satisfies(Request(None, "pos"), " ", meter)
    with pytest.raises(ValueError, match="sentiment=happy: the classifier's sentiments are neg, pos"):
        satisfies(Request(2, "happy"), "a b", meter)
    assert sentiment_names(["1", "0"]) == ["positive", "negative"] and sentiment_names(["neg", "pos"]) == ["neg", "pos"]


@pytest.mark.parametrize("prompt, fragment", [
    ("a fine film", "is not an attribute request"),
    ("words=3 : a fine", "holds text after ':'"),
    (":", "asks for no attribute"),
    ("length=3 :", "'length=3' is not an attribute"),
    ("words=0 :", "words=0 is not a count"),
    ("words=2 words=3 :", "asks for words twice"),
])
def test_a_prompt_that_is_no_request_is_named(prompt, fragment):
    with pytest.raises(ValueError, match=re.escape(fragment)):
        parse_request(prompt)


def test_the_measured_sentiment_is_the_classifiers_own_label(single, clf, run_cli):  # noqa: F811
    _, rows = single
    texts = [s for s, _ in rows["dev"]] + ["good", "the film was awful and dull"]
    r = run_cli(generate, [f"path={clf}", "input=-", "common.threads=1"], stdin="\n".join(texts) + "\n")
    assert r.code == 0, r.err
    labels = [line.split("\t")[1] for line in r.out.splitlines() if line.startswith("L-")]
    measured = SentimentMeter(str(clf))(texts, batch_size=4)  # padded batches of unequal lengths
    assert measured == labels and len(set(labels)) > 1


@pytest.mark.parametrize("settings, fragments", [
    (["generation.verifier_model=x.pt"], ("generation.verifier_model", "no generation.verifier is set", "drop it")),
    (["generation.verifier=numbers", "generation.verifier_model=x.pt"],
     ("generation.verifier_model", "the numbers verifier measures without a checkpoint", "drop it")),
    (["generation.verifier=attributes"], ("verifier 'attributes' measures with a sentence classifier checkpoint",
                                          "generation.verifier_model=CHECKPOINT")),
    (["generation.verifier=attributes", "generation.verifier_model=LM"],
     ("could not be built", "holds a language model (lm)", "sentence classifier checkpoint")),
    (["generation.verifier=attributes", "generation.verifier_model=nothing.pt"],
     ("verifier 'attributes': checkpoint not found: nothing.pt",)),
])
def test_the_verifier_model_is_refused_in_one_line(settings, fragments, lm, run_cli):
    settings = [s.replace("=LM", f"={lm}") for s in settings]
    r = run_cli(generate, [f"path={lm}", *GEN, *settings], stdin="words=2 :\n")
    one_line_error(r, PROG, *fragments, log_lines_allowed=True)
    assert r.out == ""


ASKED = [(n, s) for n in (2, 3, 4, 5) for s in ("neg", "neu", "pos")]
REQUESTS = [f"words={n} sentiment={s} :" for n, s in ASKED]


@pytest.fixture(scope="module")
def kept(lm, clf):
    """{request index: the V- line the verifier must print}: the first of the beam with the words
    asked (whitespace tokens) and the sentiment asked (the classifier's label), measured here."""
    from seqkit.generation.translator import Translator

    meter = SentimentMeter(str(clf))
    t = Translator.from_checkpoint(str(lm), beam=4, nbest=4, max_len_b=6)
    expected = {}
    for i, nbest in enumerate(t.translate_nbest(REQUESTS)):
        n, sentiment = ASKED[i]
        h = next((h for h in nbest if len(h["text"].split()) == n and meter([h["text"]]) == [sentiment]), None)
        if h is not None:
            expected[i] = f"V-{i}\t{h['score'] / LN2:.4f}\t{h['text']}"
    assert 0 < len(expected) < len(REQUESTS), f"the tests need kept and unkept requests, got {sorted(expected)}"
    return expected


def test_a_continuation_is_kept_only_when_it_has_the_attributes(lm, clf, kept, run_cli):
    prompts = REQUESTS + ["the film was", "words=2 sentiment=happy :"]  # no request; a sentiment not measured
    r = run_cli(generate, [f"path={lm}", *GEN, "generation.verifier=attributes", f"generation.verifier_model={clf}"],
                stdin="\n".join(prompts) + "\n")
    assert r.code == 0, r.err
    assert [line for line in r.out.splitlines() if line.startswith("V-")] == list(kept.values())
    # the two bad prompts: each of their 4 hypotheses raised, and the first cause is logged
    assert f"verified {len(kept)} of {len(prompts)} (0 timed out, 8 raised)" in r.err
    assert "prompt 'the film was' is not an attribute request" in r.err


def test_the_python_api_measures_with_the_translators_verifier_model(lm, clf, kept):
    from seqkit.generation.translator import Translator

    t = Translator.from_checkpoint(str(lm), beam=4, max_len_b=6, verifier="attributes", verifier_model=str(clf))
    out = t.translate_verified(REQUESTS)
    assert {i: f"V-{i}\t{h['score'] / LN2:.4f}\t{h['text']}" for i, h in enumerate(out.hypotheses) if h} == kept
    assert out.counts.summary() == f"verified {len(kept)} of {len(REQUESTS)} (0 timed out, 0 raised)"
