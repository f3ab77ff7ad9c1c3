"""In-context classification with a causal language model (seqkit.generation.in_context): the
prompt it builds, the scores it reads, and seqkit-generate -> seqkit-score on a task a small LM
learned to continue."""

import random
import re

import pytest
import torch
from transfer_fixtures import run

from seqkit.core.checkpoints import load_for_inference
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import TASKS
from seqkit.generation.config import InContextConfig
from seqkit.generation.in_context import InContextClassifier, template_parts
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers.space import SpaceConfig

WORDS = [f"v{i}" for i in range(1, 10)]
TRAIN = {"gpt_tiny": (3e-3, 150), "lstm_lm_tiny": (1e-2, 400)}  # (rate, updates): the tiny LSTM learns v0 -> good later


def review(rng, positive):
    words = [rng.choice(WORDS) for _ in range(rng.randint(2, 5))]
    if positive:
        words.insert(rng.randint(0, len(words)), "v0")
    return " ".join(words)


@pytest.fixture(scope="module", params=["gpt_tiny", "lstm_lm_tiny"])
def lm_and_task(request, tmp_path_factory):
    """A causal LM (GPT, LSTM) trained on lines '<review> It was good|bad .' (good exactly when v0
    occurs), and a classification folder of such reviews in its vocabulary."""
    root = tmp_path_factory.mktemp("icl")
    lr, updates = TRAIN[request.param]
    rng = random.Random(0)
    lines = []
    for _ in range(1500):
        positive = rng.random() < 0.5
        lines.append(f"{review(rng, positive)} It was {'good' if positive else 'bad'} .")
    (root / "lm.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    preprocess(PreprocessConfig(task="language_modeling", trainpref=str(root / "lm.txt"), validpref=str(root / "lm.txt"),
                                destdir=str(root / "lm"), tokenizer=SpaceConfig()))
    run(["task=language_modeling", f"task.data={root / 'lm'}", f"model={request.param}", "task.tokens_per_sample=64",
         "criterion=cross_entropy", f"optimizer.lr={lr}", f"optimization.max_update={updates}", "dataset.max_tokens=2048",
         "model.dropout=0", f"checkpoint.save_dir={root / 'ck'}"])
    for split, n in (("train", 40), ("dev", 60)):
        rows = []
        for _ in range(n):
            positive = rng.random() < 0.5
            rows.append(f"{review(rng, positive)}\t{'pos' if positive else 'neg'}")
        (root / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n", encoding="utf-8")
    preprocess(PreprocessConfig(task="classification", trainpref=str(root / "train.tsv"), validpref=str(root / "dev.tsv"),
                                destdir=str(root / "cls"), tokenizer=SpaceConfig(), vocab_from=str(root / "ck" / "checkpoint_last.pt")))
    return root / "ck" / "checkpoint_last.pt", root / "cls"


def classifier(ck, data, **settings):
    _, lm = load_for_inference(str(ck))
    task = TASKS.build(TASKS.make_config({"name": "classification", "data": str(data)}))
    cfg = InContextConfig(verbalizers=["bad", "good"], **settings)  # labels neg, pos
    return InContextClassifier(task, lm, torch.device("cpu"), cfg)


def test_template_parts():
    assert template_parts("{0} It was {label} .", 1) == ["{0}", "It was", "{label}", "."]
    assert template_parts("{0} ? {1} : {label}", 2) == ["{0}", "?", "{1}", ":", "{label}"]
    for bad, columns in (("{0} {label} {1}", 2), ("{label} {0}", 1), ("{0}", 1), ("{0} {label}", 2)):
        with pytest.raises(SeqkitError, match="icl.template="):
            template_parts(bad, columns)


def test_the_prompt_is_demonstrations_then_the_query(lm_and_task):
    ck, data = lm_and_task
    c = classifier(ck, data, shots=2, seed=3)
    d = c.task.src_dict
    ids = lambda text: [d.index(w) for w in text.split()]  # noqa: E731
    example = [d.bos()] + ids("v3 v0") + [d.eos()]
    prompt = c.prompt(7, example)
    again = classifier(ck, data, shots=2, seed=3).prompt(7, example)
    assert prompt == again  # the same demonstrations for the same seed and example
    lines = " ".join(d.symbols[t] for t in prompt).split("</s>")
    assert lines[0] == "" and len(lines) == 4  # </s> demo </s> demo </s> query
    for demo in lines[1:3]:
        words = demo.split()
        assert words[-4:-1] == ["It", "was", "good" if "v0" in words[:-4] else "bad"] and words[-1] == "."
    assert lines[3].split() == ["v3", "v0", "It", "was"]
    assert classifier(ck, data, shots=2, seed=4).prompt(7, example) != prompt


def test_a_language_model_without_eos_prefix_reads_no_eos_first(lm_and_task):
    """An imported GPT-2 (task.eos_prefix=false) sees its tokenizer's ids as they are: no </s>
    before the first demonstration, the rest of the prompt unchanged."""
    ck, data = lm_and_task
    c = classifier(ck, data, shots=2, seed=3)
    d = c.task.src_dict
    example = [d.bos()] + [d.index("v3"), d.index("v0")] + [d.eos()]
    _, lm = load_for_inference(str(ck))
    plain = InContextClassifier(c.task, lm, torch.device("cpu"), c.cfg, eos_prefix=False)
    assert c.prompt(7, example)[0] == d.eos()
    assert plain.prompt(7, example) == c.prompt(7, example)[1:]


def test_scores_are_the_language_models_log_probabilities(lm_and_task):
    ck, data = lm_and_task
    c = classifier(ck, data, shots=0)
    prompt = c.prompt(0, [c.task.src_dict.bos(), c.task.src_dict.index("v4"), c.task.src_dict.eos()])
    scores = c.label_scores([prompt])[0]
    with torch.no_grad():
        logp = torch.log_softmax(c.model(torch.tensor([prompt]), torch.tensor([len(prompt)]))[0, -1], -1)
    expected = torch.stack([logp[v[0]] for v in c.verbalizers])
    torch.testing.assert_close(scores, expected, atol=1e-5, rtol=0)


def test_calibration_divides_by_the_content_free_probabilities(lm_and_task):
    ck, data = lm_and_task
    c = classifier(ck, data, shots=3, seed=5, calibrate=True, content_free="v9")
    d = c.task.src_dict
    example = [d.bos(), d.index("v2"), d.index("v0"), d.eos()]
    prompt, free = c.prompts(0, example)  # example 0's demonstrations, as predict_ids draws them below
    assert prompt == classifier(ck, data, shots=3, seed=5).prompt(0, example)  # the uncalibrated prompt
    query = [d.index(w) for w in "v2 v0 It was".split()]
    cf_query = [d.index(w) for w in "v9 It was".split()]
    assert prompt[-len(query):] == query and free[-len(cf_query):] == cf_query
    assert prompt[: -len(query)] == free[: -len(cf_query)]  # the same demonstrations before both
    # the expectation straight from the LM, not from label_scores: p(label | query) / p(label | content-free),
    # each a softmax over the verbalizers' next-token probabilities, renormalized over the labels
    verbalizers = [d.index(w) for w in ("bad", "good")]

    def label_probs(p):
        with torch.no_grad():
            logp = torch.log_softmax(c.model(torch.tensor([p]), torch.tensor([len(p)]))[0, -1].double(), -1)
        return logp[verbalizers].softmax(-1)

    ds = c.task.load_dataset("valid")
    examples = [example] + [ds.src[i].tolist() for i in range(12)]
    got = c.predict_ids(examples)
    for i, (ex, g) in enumerate(zip(examples, got)):
        query, content_free = c.prompts(i, ex)
        expected = label_probs(query) / label_probs(content_free)
        expected = expected / expected.sum()
        assert g["prob"] == pytest.approx(float(expected.max()), abs=1e-5), i
        assert g["label"] == c.labels[int(expected.argmax())], i
    assert abs(float(label_probs(free)[0]) - 0.5) > 0.01  # the division matters: the content-free query is not neutral


@pytest.mark.parametrize("shots,calibrate", [(0, False), (4, False), (4, True)])
def test_generate_and_score_in_context(lm_and_task, run_cli, shots, calibrate):
    from seqkit.cli.generate import main as generate
    from seqkit.cli.score import main as score

    ck, data = lm_and_task
    r = run_cli(generate, [f"path={ck}", f"task.data={data}", "gen_subset=valid", f"icl.shots={shots}",
                           "icl.verbalizers=[bad,good]", f"icl.calibrate={calibrate}", "common.threads=1"])
    assert r.code == 0, r.err
    assert len(re.findall(r"^L-\d+\t(pos|neg)\t", r.out, re.M)) == 60
    if calibrate:  # the command predicts what the Python API does, line for line (the arithmetic:
        # test_calibration_...; no accuracy floor: this LM's content-free query is itself confidently "bad")
        c = classifier(ck, data, shots=shots, calibrate=True)
        ds = c.task.load_dataset("valid")
        want = c.predict_ids([ds.src[i].tolist() for i in range(len(ds))])
        got = re.findall(r"^L-\d+\t(pos|neg)\t([\d.]+)", r.out, re.M)
        assert [g[0] for g in got] == [w["label"] for w in want]
        assert [float(g[1]) for g in got] == pytest.approx([w["prob"] for w in want], abs=1e-4)
        assert "calibrated on 'N/A'" in r.err
        return
    out = data.parent / f"pred{shots}{calibrate}.txt"
    out.write_text(r.out, encoding="utf-8")
    s = run_cli(score, [f"hyp={out}"])
    accuracy = float(re.search(r"^accuracy = ([\d.]+)", s.out, re.M).group(1))
    assert accuracy >= 90, s.out  # the LM learned good after v0: a wrong reading of its scores is near 50


def test_bad_settings_are_one_line(lm_and_task, run_cli, tmp_path):
    from seqkit.cli.generate import main as generate

    ck, data = lm_and_task
    r = run_cli(generate, [f"path={ck}", f"task.data={data}", "gen_subset=valid", "icl.verbalizers=[bad]"])
    assert r.code == 1 and "icl.verbalizers has 1 word(s) for the 2 labels" in r.err
    r = run_cli(generate, [f"path={ck}", f"task.data={data}", "gen_subset=valid", "icl.verbalizers=[bad,good]",
                           "icl.template='{label} {0}'"])
    assert r.code == 1 and "icl.template=" in r.err and "Traceback" not in r.err
