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
        "No log named here, so 99.99 is not checked.\n")
    missing = check_figures.check(tmp_path / "README.md")
    assert [(line, figure) for line, figure, _ in missing] == [(7, "80.85")]
    assert missing[0][2] == [tmp_path / "logs" / "run.log"]


def test_every_readme_figure_beside_a_log_is_in_it_or_checked_by_hand(capsys):
    """The repository's READMEs: a figure quoted beside a log occurs in it, or is listed with its
    reason in examples/figures_checked.tsv (a setting, a split's size, a difference)."""
    assert check_figures.main([]) == 0, capsys.readouterr().out
