"""examples/check_figures.py on a tiny README and log (not the repository's READMEs)."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "check_figures", Path(__file__).resolve().parent.parent / "examples" / "check_figures.py")
check_figures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_figures)


def test_matching_figures_pass_and_a_mismatch_is_reported_with_its_line(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "run.log").write_text(
        "| valid | epoch 3 | accuracy 80.05 | updates 4094 | bleu 40.2623\n")
    (tmp_path / "README.md").write_text(
        "# Recipe\n"
        "\n"
        "Dev accuracy 80.05 after 4,094 updates, BLEU 40.26 (`logs/run.log`).\n"
        "\n"
        "| row | accuracy | log |\n"
        "| --- | --- | --- |\n"
        "| full | 80.85 (+0.80) | [log](logs/run.log) |\n"
        "\n"
        "## Notes\n"
        "\n"
        "No log named in this section, so 99.99 is not checked.\n")
    missing = check_figures.check(tmp_path / "README.md")
    assert [(line, figure) for line, figure, _ in missing] == [(7, "80.85")]
    assert missing[0][2] == [tmp_path / "logs" / "run.log"]


def test_a_prose_sentence_naming_no_log_is_checked_against_its_sections_logs(tmp_path):
    """A sentence that names no log takes the logs of its section's rows (80.85 passes, 81.85 is
    reported against logs/run.log); one under another heading whose units name none is only
    counted, and so is a subsection's: a section's logs are its own units', not its parent's."""
    _write(tmp_path, {"logs/run.log": "| valid | accuracy 80.85 |\n"})
    text = ("# Recipe\n\n| row | accuracy | log |\n| --- | --- | --- |\n"
            "| full | 80.85 | [log](logs/run.log) |\n\nThe full row reaches 80.85 on dev.\n\n"
            "### Aside\n\nElsewhere 99.99 and 12.5 here.\n")
    (tmp_path / "README.md").write_text(text)
    counts = {}
    assert _missed(tmp_path / "README.md", counts=counts) == []
    assert counts == {"checked": 2, "by_section": 1, "unchecked": 2}
    (tmp_path / "README.md").write_text(text.replace("reaches 80.85", "reaches 81.85"))
    missing = check_figures.check(tmp_path / "README.md")
    assert [(line, figure) for line, figure, _ in missing] == [(7, "81.85")]
    assert missing[0][2] == [tmp_path / "logs" / "run.log"]


def test_help_prints_the_usage_and_a_missing_file_is_one_line_exit_2(tmp_path, capsys):
    assert check_figures.main(["--help"]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("usage: check_figures.py [-h] [README.md ...]") and out.err == ""
    assert check_figures.main(["-h"]) == 0 and "a section" in capsys.readouterr().out
    for argv, says in ([str(tmp_path / "nope.md")], "nope.md: no such file"), (["--bogus"], "unknown option --bogus"):
        assert check_figures.main(argv) == 2
        out = capsys.readouterr()
        assert out.out == "" and out.err.startswith(f"check_figures.py: error: ") and says in out.err
        assert out.err.count("\n") == 1, out.err


def test_every_readme_figure_beside_a_log_is_in_it_or_checked_by_hand(capsys):
    """The repository's READMEs: a figure quoted beside a log occurs in it, or is listed with its
    reason in examples/figures_checked.tsv (a setting, a split's size, a difference)."""
    assert check_figures.main([]) == 0, capsys.readouterr().out


def _write(root, files):
    """Write {relative path: text} under root."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _missed(readme, **kwargs):
    return [(line, figure) for line, figure, _ in check_figures.check(readme, **kwargs)]


def test_a_folder_stands_for_its_own_files_not_a_seed_folder_under_it(tmp_path):
    """83.72 → 84.72 in a row linking a folder of seeds fails, though another seed's log holds
    84.72; a row naming the seed's folder reads that seed's files."""
    _write(tmp_path, {"logs/bilstm/summary.md": "| mean ± sd | 83.72 ± 0.87 |\n",
                      "logs/bilstm/s3/train.log": "valid | accuracy 82.85 | f1 84.72\n"})
    row = "| BiLSTM | 3 | **{} ± 0.87** | [`logs/bilstm/`](logs/bilstm/summary.md) |\n"
    (tmp_path / "README.md").write_text("| model | seeds | dev | logs |\n| --- | --- | --- | --- |\n"
                                        + row.format("83.72") + "| seed 3 | 1 | 84.72 | `logs/bilstm/s3/` |\n")
    assert _missed(tmp_path / "README.md") == []
    (tmp_path / "README.md").write_text((tmp_path / "README.md").read_text().replace("**83.72", "**84.72"))
    assert _missed(tmp_path / "README.md") == [(3, "84.72")]


def test_a_row_naming_no_log_inherits_its_section_and_a_template_reads_only_summaries(tmp_path):
    """81.08 → 82.08 in a row that names no log fails: the row takes the logs its section names,
    and `roberta-MODE-sN/` (every mode, every seed) stands for each run's summary (row.json),
    not for the train log of another run that holds 82.08."""
    _write(tmp_path, {"logs/carved/sst2.md": "| roberta | full | 81.08 ± 0.31 |\n",
                      "logs/carved/roberta-full-s1/row.json": '{"accuracy": 81.19}\n',
                      "logs/carved/roberta-scratch-s3/row.json": '{"accuracy": 80.39}\n',
                      "logs/carved/roberta-scratch-s3/train.log": "train | accuracy 82.08\n"})
    (tmp_path / "README.md").write_text(
        "## Under the rule\n\n"
        "Rows: `logs/carved/sst2.md`, each seed's `row.json` in `logs/carved/roberta-MODE-sN/`.\n\n"
        "SST-2 (3 epochs):\n\n| mode | dev | seeds |\n| --- | --- | --- |\n"
        "| full | 81.08 ± 0.31 | 81.19 (3) |\n| scratch | 80.39 | 80.39 (3) |\n")
    assert _missed(tmp_path / "README.md") == []
    (tmp_path / "README.md").write_text((tmp_path / "README.md").read_text().replace("| 81.08", "| 82.08"))
    assert _missed(tmp_path / "README.md") == [(9, "82.08")]


def test_a_row_picks_its_own_run_from_a_glob_and_a_row_with_no_log_anywhere_is_reported(tmp_path):
    """`logs/run*/` in a table's caption: row 2 reads logs/run2/ only (run 1's 3,845 is not its);
    a table whose rows, caption, note and section name no log reports each figure (files [])."""
    _write(tmp_path, {"logs/run1/train.log": "update 3845\n", "logs/run2/train.log": "update 3437\n"})
    (tmp_path / "README.md").write_text(
        "# Runs\n\nGPT runs (`logs/run*/`):\n\n| run | updates |\n| --- | --- |\n"
        "| 1 | 3,845 |\n| 2 | 3,845 |\n\n## Elsewhere\n\n| model | BLEU |\n| --- | --- |\n| lstm | 39.37 |\n")
    missing = check_figures.check(tmp_path / "README.md")
    assert [(line, figure) for line, figure, _ in missing] == [(8, "3,845"), (14, "39.37")]
    assert missing[0][2] == [tmp_path / "logs" / "run2" / "train.log"] and missing[1][2] == []


def test_a_row_linking_a_page_section_reads_the_logs_of_that_section_and_sizes_convert(tmp_path):
    """docs/figures.md's rows link a topic page's section: its logs are the row's; a figure in MB
    or min also passes on the bytes or seconds a log holds."""
    _write(tmp_path, {"logs/a/score.txt": "BLEU = 39.88\n",
                      "logs/b/row.json": '{"weights_bytes": 21627912, "wall_s": 534}\n',
                      "topic.md": "# Topic\n\n## Figures\n\nBLEU 39.88 (`logs/a/score.txt`).\n\n"
                                  "## Other\n\nSee `logs/b/row.json`.\n"})
    (tmp_path / "figures.md").write_text(
        "| topic | figures | page |\n| --- | --- | --- |\n"
        "| translation | BLEU 39.88, 21.628 MB | [topic.md](topic.md#figures) |\n"
        "| transfer | 21.628 MB in 8.9 min, 22.1 MB | [topic.md](topic.md#other) |\n")
    assert _missed(tmp_path / "figures.md") == [(3, "21.628"), (4, "22.1")]


def test_the_real_readmes_fail_on_the_two_changed_figures(tmp_path):
    """A copy of the repository's READMEs, read against their own logs: 83.72 → 84.72 (SST-2's
    BiLSTM, a row linking a folder of seeds) and 81.08 → 82.08 (RoBERTa's full row under the rule,
    a row that names no log) each fail; the figures as they stand pass."""
    for readme, old, new, figure in [
            ("examples/classification/sst2/README.md", "**83.72 ± 0.87** (84.52", "**84.72 ± 0.87** (84.52", "84.72"),
            ("examples/transfer/README.md", "| full | 81.08 ± 0.31 |", "| full | 82.08 ± 0.31 |", "82.08")]:
        real = check_figures.ROOT / readme
        text = real.read_text(encoding="utf-8")
        assert text.count(old) == 1, readme
        (tmp_path / "README.md").write_text(text.replace(old, new), encoding="utf-8")
        before = set(_missed(real))
        after = [miss for miss in _missed(tmp_path / "README.md", base=real.parent) if miss not in before]
        line = text[:text.index(old)].count("\n") + 1
        assert after == [(line, figure)], readme
