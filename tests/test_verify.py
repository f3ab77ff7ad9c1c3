"""generation.verifier: per input, the first hypothesis of the beam that a registered verifier accepts
(seqkit.verify), checked in worker processes under a time limit; the V- lines and the "verified N
of M" summary of seqkit-generate, the Python API's same answer, and the one-line refusals."""

import hashlib
import math
import re
import time

import pytest

from label_fixtures import one_line_error, single, single_ckpt, translation_ckpt  # noqa: F401
from seqkit.cli.generate import main as generate
from seqkit.core.errors import SeqkitError
from seqkit.core.plugins import import_user_dir
from seqkit.verify import VerifierConfig, verifier_config
from seqkit.verify.numbers import digit_runs
from seqkit.verify.runner import VerifierPool

PROG = "seqkit-generate"
LN2 = math.log(2)  # scores are printed in base 2
# the tiny model's beams hold a sentence kept at rank 3, one at 1, one at 0 and one with none kept
SENTENCES = ["ein haus", "der hund läuft", "das kind spielt", "ein mann liest ein buch"]
GEN = ["common.threads=1", "generation.beam=4", "generation.max_len_b=5", "input=-"]
# the test plugin: a verifier accepting about half the hypotheses (a coin per source and hypothesis),
# one that hangs on what that one rejects, one that always raises, one whose build fails, and one
# whose process dies
PLUGIN = '''
import hashlib, os, time
from dataclasses import dataclass
from seqkit.verify import VERIFIERS, VerifierConfig


def coin(source, hypothesis):
    return hashlib.md5(f"{source}\t{hypothesis}".encode("utf-8")).digest()[0] % 2 == 1


def verifier(name, check):
    config = dataclass(type(f"{name}_config", (VerifierConfig,), {"__annotations__": {"name": str}, "name": name}))
    VERIFIERS.register(name, config)(check)


def hang_unless_coin(cfg):
    def check(source, hypothesis):
        if not coin(source, hypothesis):
            time.sleep(1000)
        return True
    return check


def raising(cfg):
    def check(source, hypothesis):
        raise ValueError("cannot check " + hypothesis)
    return check


def broken(cfg):
    raise RuntimeError("no such table")


verifier("coin", lambda cfg: coin)
verifier("hang_unless_coin", hang_unless_coin)
verifier("raising", raising)
verifier("broken", broken)
verifier("dies", lambda cfg: lambda source, hypothesis: os._exit(3))
'''


def coin(source, hypothesis):
    """The test plugin's rule: a fair coin per (source, hypothesis), the same on every run."""
    return hashlib.md5(f"{source}\t{hypothesis}".encode("utf-8")).digest()[0] % 2 == 1


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    folder = tmp_path_factory.mktemp("verifiers") / "seqkit_test_verifiers"
    folder.mkdir()
    (folder / "__init__.py").write_text(PLUGIN, encoding="utf-8")
    import_user_dir(str(folder))  # registered here too, as common.user_dir does for the CLI
    return folder


def lines(out, kind):
    """{sentence id: [(score, text) of each line of this kind]}."""
    found = {}
    for line in out.splitlines():
        head, *rest = line.split("\t")
        if head.split("-")[0] == kind:
            found.setdefault(int(head.split("-")[1]), []).append((rest[0], rest[-1]))
    return found


@pytest.fixture(scope="module")
def plain_nbest(translation_ckpt):  # noqa: F811
    """The plain beam of 4 for each sentence (Python API), best first: [(score in base 2, text)]."""
    from seqkit.generation.translator import Translator

    t = Translator.from_checkpoint(str(translation_ckpt), beam=4, nbest=4, max_len_b=5)
    return [[(f"{h['score'] / LN2:.4f}", h["text"]) for h in nbest]
            for nbest in t.translate_nbest(SENTENCES)]


def summary(err):
    found = re.findall(r"verified (\d+) of (\d+) \((\d+) timed out, (\d+) raised\)", err)
    assert len(found) == 1, err
    return tuple(map(int, found[0]))


def first_coin(source, nbest):
    """The rank of the first of ``nbest`` [(score, text)] that the coin verifier accepts; None: none."""
    return next((i for i, (_, text) in enumerate(nbest) if coin(source, text)), None)


def test_the_first_hypothesis_of_the_beam_that_verifies_is_kept(translation_ckpt, plugin, plain_nbest, run_cli):  # noqa: F811
    ranks = [first_coin(src, nbest) for src, nbest in zip(SENTENCES, plain_nbest)]
    assert {None, 0} < set(ranks), f"the test needs kept ranks 0, > 0 and none, got {ranks}"
    r = run_cli(generate, [f"path={translation_ckpt}", *GEN, "generation.verifier=coin",
                           f"common.user_dir={plugin}"], stdin="\n".join(SENTENCES) + "\n")
    assert r.code == 0, r.err
    assert lines(r.out, "V") == {sid: [plain_nbest[sid][k]] for sid, k in enumerate(ranks) if k is not None}
    # generation.nbest (1) hypotheses printed, the beam's best, as without a verifier
    assert lines(r.out, "D") == {sid: nbest[:1] for sid, nbest in enumerate(plain_nbest)}
    assert summary(r.err) == (sum(k is not None for k in ranks), 4, 0, 0)


def test_the_python_api_returns_what_the_command_prints(translation_ckpt, plugin, plain_nbest):  # noqa: F811
    from seqkit.generation.translator import Translator

    t = Translator.from_checkpoint(str(translation_ckpt), beam=4, max_len_b=5)  # nbest=1: the beam is searched
    out = t.translate_verified(SENTENCES, "coin", timeout=5, user_dir=str(plugin))
    ranks = [first_coin(src, nbest) for src, nbest in zip(SENTENCES, plain_nbest)]
    assert [h and h["rank"] for h in out.hypotheses] == ranks
    assert [h and (f"{h['score'] / LN2:.4f}", h["text"]) for h in out.hypotheses] == \
           [k is not None and nbest[k] or None for k, nbest in zip(ranks, plain_nbest)]
    assert out.counts.summary() == f"verified {sum(k is not None for k in ranks)} of 4 (0 timed out, 0 raised)"


def test_a_hanging_check_is_cut_counted_and_the_next_hypothesis_tried(translation_ckpt, plugin, plain_nbest,  # noqa: F811
                                                                      run_cli):
    # a sentence whose best hypothesis hangs the verifier, and a later one does not
    hangs, sid = min((k, i) for i, k in enumerate(first_coin(*p) for p in zip(SENTENCES, plain_nbest)) if k)
    start = time.perf_counter()
    r = run_cli(generate, [f"path={translation_ckpt}", *GEN, "generation.verifier=hang_unless_coin",
                           "generation.verifier_timeout=0.5", f"common.user_dir={plugin}"], stdin=SENTENCES[sid] + "\n")
    assert r.code == 0, r.err
    assert summary(r.err) == (1, 1, hangs, 0)
    assert lines(r.out, "V") == {0: [plain_nbest[sid][hangs]]}
    assert time.perf_counter() - start < 0.5 * hangs + 5


def test_a_raising_verifier_is_counted_not_a_crash(translation_ckpt, plugin, run_cli):  # noqa: F811
    r = run_cli(generate, [f"path={translation_ckpt}", *GEN, "generation.verifier=raising",
                           f"common.user_dir={plugin}"], stdin="\n".join(SENTENCES[:2]) + "\n")
    assert r.code == 0, r.err
    assert summary(r.err) == (0, 2, 0, 8) and "V-" not in r.out
    assert r.err.count("ValueError: cannot check") == 1  # the first error is logged, the others counted


def test_a_split_with_results_path_gets_v_lines_in_the_file(translation_ckpt, toy_data, plugin, run_cli, tmp_path):  # noqa: F811
    r = run_cli(generate, [f"path={translation_ckpt}", f"task.data={toy_data[1]}", "gen_subset=valid",
                           "common.threads=1", "generation.beam=2", "generation.max_len_b=3",
                           "generation.verifier=coin", f"common.user_dir={plugin}", "generation.verifier_workers=2",
                           f"results_path={tmp_path}"])
    assert r.code == 0 and r.out == "", r.err
    text = (tmp_path / "generate-valid.txt").read_text(encoding="utf-8")
    sources, best, kept = lines(text, "S"), lines(text, "D"), lines(text, "V")
    assert len(best) == 40 and 0 < len(kept) < 40
    assert all(coin(sources[sid][0][1], v[0][1]) for sid, v in kept.items())
    assert any(coin(sources[sid][0][1], d[0][1]) != (sid in kept) for sid, d in best.items())  # best fails, 2nd kept
    assert summary(r.err) == (len(kept), 40, 0, 0)


@pytest.mark.parametrize("setting, fragments", [
    ("generation.verifier=nope", ("generation.verifier: unknown verifier 'nope'", "numbers", "common.user_dir")),
    ("generation.verifier=broken", ("verifier 'broken' could not be built: RuntimeError: no such table",)),
    ("generation.verifier_timeout=2", ("generation.verifier_timeout", "no generation.verifier is set", "drop it")),
    ("generation.verifier_workers=2", ("generation.verifier_workers", "no generation.verifier is set")),
])
def test_bad_verifier_settings_are_one_line(setting, fragments, translation_ckpt, plugin, run_cli):  # noqa: F811
    r = run_cli(generate, [f"path={translation_ckpt}", *GEN, setting, f"common.user_dir={plugin}"], stdin="ein haus\n")
    one_line_error(r, PROG, *fragments, log_lines_allowed=True)
    assert r.out == ""


def test_a_verifier_with_distillation_is_refused(translation_ckpt, toy_data, run_cli, tmp_path):  # noqa: F811
    r = run_cli(generate, [f"path={translation_ckpt}", f"task.data={toy_data[1]}", "common.threads=1",
                           f"distill_to={tmp_path / 'distilled'}", "generation.verifier=numbers"])
    one_line_error(r, PROG, "generation.verifier", "distill_to= writes each sentence's best hypothesis",
                   log_lines_allowed=True)


def test_a_verifier_on_a_classifier_is_refused(single, single_ckpt, run_cli):  # noqa: F811
    r = run_cli(generate, [f"path={single_ckpt / 'checkpoint_best.pt'}", "input=-", "common.threads=1",
                           "generation.verifier=numbers"], stdin="a b c\n")
    one_line_error(r, PROG, "generation.verifier", "classification checkpoint", "generates none", "drop it",
                   log_lines_allowed=True)


def test_a_language_model_continuation_is_verified(plugin, tmp_path_factory, run_cli):
    from transfer_fixtures import make_text, pretrain

    from seqkit.generation.translator import Translator

    root = tmp_path_factory.mktemp("lm")
    pretrain(make_text(root), "gpt", root / "ck", updates=1)
    ck, prompts = root / "ck" / "checkpoint_last.pt", ["v1 v2", "v3"]
    r = run_cli(generate, [f"path={ck}", *GEN, "generation.verifier=coin", f"common.user_dir={plugin}"],
                stdin="\n".join(prompts) + "\n")
    assert r.code == 0, r.err
    out = Translator.from_checkpoint(str(ck), beam=4, max_len_b=5).translate_verified(prompts, "coin")
    assert any(h is not None for h in out.hypotheses), "the test needs a continuation kept"
    assert lines(r.out, "V") == {i: [(f"{h['score'] / LN2:.4f}", h["text"])]
                                 for i, h in enumerate(out.hypotheses) if h is not None}
    assert summary(r.err) == (sum(h is not None for h in out.hypotheses), 2, 0, 0)


# -- the runner and the built-in verifier, without a model --------------------------------------------


def test_numbers_keeps_the_digit_runs_of_the_source():
    check = lambda s, h: digit_runs(s) == digit_runs(h)  # noqa: E731 - the rule numbers registers
    assert check("Am 3. Mai kostet es 1.000,50 Euro.", "On 3 May it costs 1,000.50 euros.")
    assert not check("Am 3. Mai", "On 4 May") and not check("3 und 3", "3 and three")
    assert check("٣ Hunde", "3 dogs") and not check("007", "7")
    with VerifierPool(verifier_config("numbers"), timeout=5) as pool:  # a built-in, found by a bare worker
        verdicts = pool.first_verified([("Zimmer 12", ["room 21", "room 12"]), ("", []), ("1", ["one"])])
    assert [(v.rank, v.statuses) for v in verdicts] == [(1, ["rejected", "verified"]), (None, []), (None, ["rejected"])]
    assert pool.counts.summary() == "verified 1 of 3 (0 timed out, 0 raised)"


def test_workers_side_by_side_keep_the_same_hypotheses(plugin):
    jobs = [(str(i), [f"h{j}" for j in range(4)]) for i in range(6)]
    found = []
    for workers in (1, 3):
        with VerifierPool(verifier_config("coin"), timeout=5, workers=workers, user_dir=str(plugin)) as pool:
            found.append(([v.rank for v in pool.first_verified(jobs)], pool.counts))
    assert found[0] == found[1]
    assert found[0][0] == [next((j for j, h in enumerate(c) if coin(src, h)), None) for src, c in jobs]


def test_an_unknown_verifier_config_is_one_line():
    with pytest.raises(SeqkitError, match=r"unknown verifier 'nope'; valid: .*numbers"):
        verifier_config(VerifierConfig(name="nope"))


def test_a_worker_that_dies_is_counted_and_replaced(plugin):
    with VerifierPool(verifier_config("dies"), timeout=5, user_dir=str(plugin)) as pool:
        verdicts = pool.first_verified([("a", ["b", "c"])])
    assert verdicts[0].statuses == ["error", "error"]
    assert pool.counts.summary() == "verified 0 of 1 (0 timed out, 2 raised)"
