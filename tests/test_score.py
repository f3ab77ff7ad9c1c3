"""seqkit-score and the `seqkit` umbrella command: frozen sacreBLEU values on tiny files.

The expected scores were computed once with sacrebleu 2.6 and pasted here (2 decimals).
"""

from __future__ import annotations

import io
import json
import sys

import pytest

from seqkit.cli import main as seqkit_main
from seqkit.cli import score as score_cli
from seqkit.core.errors import SeqkitError
from seqkit.scoring.text import TOK_LC_NAME, ScoreConfig, corpus_scores, score_files

HYP = ["The cat sat on the mat.", "A quick brown fox jumps over the dog.", "It is raining today."]
REF1 = ["The cat is on the mat.", "The quick brown fox jumped over the lazy dog.", "Today it is raining."]
REF2 = ["A cat sat on the mat.", "A fast brown fox jumps over the dog.", "It rains today."]

# signatures without the sacrebleu version, which may change under us
SIG_BLEU = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:"
SIG_CHRF = "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:"
SIG_TER = "nrefs:1|case:lc|tok:tercom|norm:no|punct:yes|asian:no|version:"

GENERATE_OUT = """\
S-2\tEs regnet heute.
T-2\tToday it is raining.
H-2\t-0.41\tIt is rain@@ ing today .
D-2\t-0.41\tIt is raining today.
P-2\t-0.1 -0.2 -0.9 -0.3 -0.5 -0.4
H-2\t-0.93\tIt was rain@@ ing today .
D-2\t-0.93\tIt was raining today.
2024-01-01 00:00:00 | INFO | seqkit.generate | a log line captured with 2>&1
S-0\tDie Katze sass auf der Matte.
D-0\t-0.20\tThe cat sat on the mat.
T-0\tThe cat is on the mat.
H-0\t-0.20\tThe cat sat on the mat .
D-0\t-0.70\tA cat sat on a mat.
T-1\tThe quick brown fox jumped over the lazy dog.
D-1\t-0.33\tA quick brown fox jumps over the dog.
S-1\tEin schneller brauner Fuchs springt ueber den Hund.
"""


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


@pytest.fixture
def files(tmp_path):
    return write(tmp_path / "hyp.txt", HYP), write(tmp_path / "ref1.txt", REF1), write(tmp_path / "ref2.txt", REF2)


def run_score(capsys, *args, entry=None):
    (entry or score_cli.main)(list(args))
    out, err = capsys.readouterr()
    return out.strip().splitlines()


def run_error(capsys, *args):
    with pytest.raises(SystemExit) as e:
        score_cli.main(list(args))
    out, err = capsys.readouterr()
    assert e.value.code == 1
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("seqkit-score: error: ")
    assert "Traceback" not in err
    return lines[0]


# --------------------------------------------------------------------------- library


def test_corpus_scores_frozen_values():
    results = corpus_scores(HYP, [REF1], metrics=["bleu", "chrf", "chrf++", "ter"])
    got = {r["metric"]: (r["name"], round(r["score"], 2)) for r in results}
    assert got == {"bleu": ("BLEU", 26.92), "chrf": ("chrF2", 63.84), "chrf++": ("chrF2++", 63.04), "ter": ("TER", 36.84)}
    assert results[0]["signature"].startswith(SIG_BLEU)
    assert results[0]["text"].startswith("BLEU = 26.92 76.2/50.0/20.0/8.3 (BP = 0.953 ratio = 0.955 hyp_len = 21 "
                                          "ref_len = 22) " + SIG_BLEU)


def test_corpus_scores_multiple_refs_and_sentence_level():
    results = corpus_scores(HYP, [REF1, REF2], sentence_level=True)
    assert [round(r["score"], 2) for r in results] == [75.45, 78.44, 22.22]
    assert all(r["signature"].startswith("nrefs:2|") for r in results)
    assert [[round(x, 2) for x in r["sentence_scores"]] for r in results] == [
        [88.01, 84.09, 31.95],
        [89.78, 81.01, 62.48],
        [16.67, 11.76, 57.14],
    ]
    assert "|eff:yes|" in results[0]["sentence_signature"]  # sentence BLEU uses effective order


def test_corpus_scores_lowercase():
    results = corpus_scores([h.upper() for h in HYP], [REF1], lowercase=True)
    assert [round(r["score"], 2) for r in results] == [30.58, 67.0, 36.84]
    assert "|case:lc|" in results[0]["signature"]


def test_corpus_scores_rejects_bad_input():
    with pytest.raises(SeqkitError, match="reference set 1 has 2 lines but there are 3 hypotheses"):
        corpus_scores(HYP, [REF1[:2]])
    with pytest.raises(SeqkitError, match="no hypotheses"):
        corpus_scores([], [[]])


def test_score_files_python_api(files):
    hyp, ref1, _ = files
    results = score_files(ScoreConfig(hyp=hyp, ref=ref1, metrics="bleu"))  # single strings become lists
    assert [(r["metric"], round(r["score"], 2)) for r in results] == [("bleu", 26.92)]


# --------------------------------------------------------------------------- seqkit-score


def test_cli_text_output_with_signatures(files, capsys):
    hyp, ref1, _ = files
    lines = run_score(capsys, f"hyp={hyp}", f"ref={ref1}")
    assert len(lines) == 3
    assert lines[0].startswith("BLEU = 26.92 76.2/50.0/20.0/8.3 (BP = 0.953 ") and SIG_BLEU in lines[0]
    assert lines[1].startswith("chrF2 = 63.84 " + SIG_CHRF)
    assert lines[2].startswith("TER = 36.84 " + SIG_TER)


def test_cli_multiple_refs(files, capsys):
    hyp, ref1, ref2 = files
    lines = run_score(capsys, f"hyp={hyp}", f"ref=[{ref1},{ref2}]")
    assert [line.split()[:3] for line in lines] == [["BLEU", "=", "75.45"], ["chrF2", "=", "78.44"], ["TER", "=", "22.22"]]
    assert all("nrefs:2|" in line for line in lines)


def test_cli_json_output(files, capsys):
    hyp, ref1, _ = files
    lines = run_score(capsys, f"hyp={hyp}", f"ref={ref1}", "metrics=[bleu,ter]", "output_format=json")
    records = [json.loads(line) for line in lines]
    assert [(r["name"], r["score"]) for r in records] == [("BLEU", 26.9153), ("TER", 36.8421)]
    assert records[0]["signature"].startswith(SIG_BLEU)


def test_cli_sentence_level_table(files, capsys):
    hyp, ref1, _ = files
    lines = run_score(capsys, f"hyp={hyp}", f"ref={ref1}", "sentence_level=true")
    assert lines[-4:] == ["id\tBLEU\tchrF2\tTER", "0\t48.89\t67.17\t16.67", "1\t23.34\t62.82\t33.33", "2\t23.64\t62.48\t75.00"]
    assert lines[3].startswith("sentence-level BLEU: nrefs:1|case:mixed|eff:yes|")


def test_cli_tok_lc_bleu_is_labelled_not_sacrebleu(files, capsys):
    hyp, ref1, _ = files
    lines = run_score(capsys, f"hyp={hyp}", f"ref={ref1}", "metrics=[bleu]", "tok_lc_bleu=true")
    assert lines[0].startswith("BLEU = 26.92 ")
    assert lines[1].startswith("tok-lc-BLEU (multi-bleu style, NOT sacreBLEU) = 30.58 85.7/55.6/26.7/8.3 ")
    assert "case:lc" in lines[1] and "smooth:none" in lines[1] and "version:" not in lines[1]
    records = [json.loads(x) for x in run_score(capsys, f"hyp={hyp}", f"ref={ref1}", "metrics=[]",
                                                "tok_lc_bleu=true", "output_format=json")]
    assert [(r["metric"], r["name"], r["score"]) for r in records] == [("tok_lc_bleu", TOK_LC_NAME, 30.5817)]
    assert "not a sacreBLEU signature" in records[0]["signature"]


def test_cli_generate_output_mode(tmp_path, capsys):
    gen = tmp_path / "gen.out"
    gen.write_text(GENERATE_OUT, encoding="utf-8")
    # out-of-order ids, nbest (first D per id wins), P-/H-/S- and a log line; references from T-
    lines = run_score(capsys, f"hyp={gen}", "sentence_level=true")
    assert [line.split()[:3] for line in lines[:3]] == [["BLEU", "=", "26.92"], ["chrF2", "=", "63.84"], ["TER", "=", "36.84"]]
    assert [row.split("\t")[:2] for row in lines[-3:]] == [["0", "48.89"], ["1", "23.34"], ["2", "23.64"]]
    # ref= wins over T- lines
    ref2 = write(tmp_path / "ref2.txt", REF2)
    lines = run_score(capsys, f"hyp={gen}", f"ref=[{write(tmp_path / 'ref1.txt', REF1)},{ref2}]", "metrics=[bleu]")
    assert lines[0].startswith("BLEU = 75.45 ") and "nrefs:2|" in lines[0]


def test_cli_reads_stdin(files, capsys, monkeypatch):
    _, ref1, _ = files
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("\n".join(HYP).encode("utf-8"))))
    lines = run_score(capsys, "hyp=-", f"ref={ref1}", "metrics=[chrf]")
    assert lines[0].startswith("chrF2 = 63.84 ")


# --------------------------------------------------------------------------- errors


def test_error_missing_file(files, capsys, tmp_path):
    hyp, _, _ = files
    msg = run_error(capsys, f"hyp={hyp}", f"ref={tmp_path / 'nope.txt'}")
    assert "file not found" in msg and "nope.txt" in msg


def test_error_line_counts_differ(files, capsys, tmp_path):
    hyp, _, _ = files
    short = write(tmp_path / "short.txt", REF1[:2])
    msg = run_error(capsys, f"hyp={hyp}", f"ref={short}")
    assert "line counts differ" in msg
    assert f"{hyp} has 3 lines" in msg and f"{short} has 2 lines" in msg


def test_error_not_utf8(files, capsys, tmp_path):
    _, ref1, _ = files
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"The cat.\n\xff\xfe oops\nIt rains.\n")
    msg = run_error(capsys, f"hyp={bad}", f"ref={ref1}")
    assert "bad.txt" in msg and "not valid UTF-8" in msg


def test_error_unknown_key(files, capsys):
    hyp, ref1, _ = files
    msg = run_error(capsys, f"hyp={hyp}", f"ref={ref1}", "foo=1")
    assert "unknown config key 'foo'" in msg and "metrics" in msg


def test_error_unknown_metric(files, capsys):
    hyp, ref1, _ = files
    msg = run_error(capsys, f"hyp={hyp}", f"ref={ref1}", "metrics=[bleu,meteor]")
    assert msg.endswith("unknown metric 'meteor'; valid: bleu, chrf, chrf++, ter")


def test_error_empty_hypothesis_file(files, capsys, tmp_path):
    _, ref1, _ = files
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    assert "is empty" in run_error(capsys, f"hyp={empty}", f"ref={ref1}")


def test_error_generate_output_without_d_line(tmp_path, capsys):
    gen = tmp_path / "gen.out"
    gen.write_text("S-0\ta\nT-0\tb\nD-0\t-0.1\tb\nS-1\tc\nT-1\td\nH-1\t-0.2\td\n", encoding="utf-8")
    msg = run_error(capsys, f"hyp={gen}")
    assert "1 of 2 sentence ids have no D- line (ids 1)" in msg


def test_error_no_references(files, capsys):
    hyp, _, _ = files
    assert "no references" in run_error(capsys, f"hyp={hyp}")


# --------------------------------------------------------------------------- seqkit umbrella


def test_seqkit_dispatches_to_score(files, capsys):
    hyp, ref1, _ = files
    lines = run_score(capsys, "score", f"hyp={hyp}", f"ref={ref1}", "metrics=[bleu]", entry=seqkit_main.main)
    assert len(lines) == 1 and lines[0].startswith("BLEU = 26.92 ")


def test_seqkit_unknown_subcommand(capsys):
    with pytest.raises(SystemExit) as e:
        seqkit_main.main(["scroe", "hyp=x"])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == ""
    assert err.strip().splitlines() == [
        "seqkit: error: unknown subcommand 'scroe'; valid subcommands: preprocess, train, generate, score, "
        "eval-lm, average, prune, probe, embed, export, import, plot (see seqkit --help)"
    ]


def test_seqkit_help_and_version(capsys):
    with pytest.raises(SystemExit) as e:
        seqkit_main.main(["--help"])
    out, _ = capsys.readouterr()
    assert e.value.code == 0
    for sub in ("preprocess", "train", "generate", "score"):
        assert f"\n  {sub} " in out
    with pytest.raises(SystemExit) as e:
        seqkit_main.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out == "seqkit 0.1.0\n"
    with pytest.raises(SystemExit) as e:
        seqkit_main.main([])
    assert e.value.code == 2 and "subcommands:" in capsys.readouterr().err
