"""The commands of README.md and docs/*.md, checked so they cannot drift from the code.

Nothing long runs. The pages are read in a clean copy of the repository (the files ``git ls-files
--cached --others --exclude-standard`` lists, uncommitted edits included, with ``../shared`` beside
it as beside the checkout), so what a user's earlier runs left in the checkout (``rte-bin/``, a
``*-pred.txt``) cannot stand in for a command that makes it. For every fenced ``bash`` block:
- ``bash -n`` parses it;
- every ``seqkit-*`` / ``seqkit SUB`` / ``torchrun -m seqkit.cli.SUB`` command is composed by the
  CLI itself with ``--cfg job`` appended (in this process; in a subprocess when it names a plugin
  with ``common.user_dir``): an unknown subcommand, key, component or value out of range fails
  here as it would for a reader; a ``--help`` line runs as written;
- a ``seqkit-train`` line has a stopping rule (epochs, updates, a time budget or patience), and a
  learning-rate schedule that needs a length gets one;
- a ``seqkit-eval-lm`` line reading a checkpoint that a ``seqkit-train`` line of the same page
  writes fits that run's positions: with learned positions, tokens_per_sample + context_window
  must not pass the trained task.tokens_per_sample (what seqkit-eval-lm refuses at run time);
- every file a command reads (``task.data=``, ``path=``, ``hyp=``, ``--config``, ``< FILE`` ...)
  is in the repository or made by an earlier command of README.md or the same page (an output
  setting such as ``destdir=``, a ``> FILE`` redirect, a recipe script's folder argument), or
  comes from a variable the page sets; ``$(python examples/corpus.py NAME)`` runs as written when
  NAME is on this machine (a corpus it would download is left unchecked), and every file then read
  from its folder (``trainpref=$src/eng.train``) must be there;
- every file or folder a command writes in the repository is ignored by ``.gitignore``;
- every ``examples/...`` (``benchmarks/``, ``docs/`` ...) path named exists; every script run
  with ``bash`` or ``python`` exists.
Every ``python`` block compiles and its ``from seqkit... import X`` lines resolve; every relative
link of a page points at a file that exists. README.md starts with the two set-up commands, stays
under 200 lines and keeps the "Choose on one split, report on another" rule.
"""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Dict

import pytest
from docs_check import PAGES, ROOT, SETUP, Page, check_links, check_page, clean_copy, fenced_blocks, ignored

@pytest.fixture(scope="module")
def components():
    import seqkit

    seqkit.import_builtin_components()


@pytest.fixture(scope="module")
def copy_root(tmp_path_factory) -> Path:
    return clean_copy(ROOT, tmp_path_factory.mktemp("clean") / "seqkit")


_CHECKED: Dict[tuple, Page] = {}


def checked(name: str, root: Path) -> Page:
    """The page ``name`` of the copy ``root``, checked after README.md's commands (each page once)."""
    if (name, root) not in _CHECKED:
        if name == "README.md":
            page = Page(name, root)
        else:
            first = checked("README.md", root)  # a page may go on from README.md's four commands
            page = Page(name, root, set(first.made), set(first.variables), dict(first.values), set(first.data),
                        set(first.files), dict(first.trained))
        check_page(root / name, page)
        _CHECKED[(name, root)] = page
    return _CHECKED[(name, root)]


def test_readme_starts_with_the_two_set_up_commands_and_fits_a_first_read():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [b.strip() for lang, b, _ in fenced_blocks(text) if lang == "bash"]
    assert blocks[:2] == SETUP, "README.md must start with the two set-up commands, unchanged"
    assert len(text.splitlines()) <= 200, f"README.md has {len(text.splitlines())} lines; a first read is <= 200"
    assert "## Choose on one split, report on another" in text


@pytest.mark.parametrize("page_path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_of_the_page_composes_and_reads_what_an_earlier_command_made(page_path, copy_root,
                                                                                   components):
    page = checked(str(page_path.relative_to(ROOT)), copy_root)
    assert not page.problems, "\n".join(page.problems)


@pytest.mark.parametrize("page_path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files(page_path, copy_root):
    assert not check_links(copy_root / page_path.relative_to(ROOT), copy_root)


def test_gitignore_covers_what_the_commands_write(copy_root, components):
    """A user who ran the pages' commands from the root sees none of their outputs in ``git status``."""
    made = {p for page_path in PAGES for p in checked(str(page_path.relative_to(ROOT)), copy_root).made
            if not p.startswith(("/", "..", "$")) and p not in ("-", ".") and not (copy_root / p).exists()}
    files = {p for page_path in PAGES for p in checked(str(page_path.relative_to(ROOT)), copy_root).files}
    hits = ignored(ROOT, sorted(made | {p + "/" for p in made - files}))
    loose = sorted(p for p in made if p not in hits and p + "/" not in hits)
    assert not loose, f"the pages' commands write these, and .gitignore does not cover them: {loose}"


def test_the_check_fails_on_a_bad_key_a_missing_input_and_eval_lm_past_the_trained_positions(tmp_path, copy_root,
                                                                                             components):
    """The check itself: a page with the mistakes the issue found is refused, line by line."""
    bad = tmp_path / "bad.md"
    bad.write_text(
        "```bash\n"
        "bash examples/language_model/wikitext2/prepare.sh wt2-bin word\n"                              # 2
        "seqkit-train task=language_modeling task.data=wt2-bin task.tokens_per_sample=256 model=gpt_mini \\\n"
        "  optimization.max_update=100 checkpoint.save_dir=gpt\n"                                       # 3
        "seqkit-eval-lm path=gpt/checkpoint_best.pt task.data=wt2-bin tokens_per_sample=128 context_window=384\n"
        "seqkit-eval-lm path=gpt/checkpoint_best.pt task.data=wt2-bin tokens_per_sample=128 context_window=128\n"
        "seqkit-train task.data=wt2-bin optimizer.lr_typo=1 optimization.max_update=10\n"              # 7
        "seqkit-train task=classification task.data=rte-bin checkpoint.save_dir=rte\n"                  # 8
        "seqkit-generate path=nowhere/checkpoint_best.pt input=- ...\n"                                 # 9
        "seqkit-train --config examples/no/such.yaml\n"                                                  # 10
        "```\n"
        "\n"
        "```\n"                                                                                          # 13
        "text\n"
        "```bash\n"                                                                                      # 15
        "seqkit-score hyp=a.txt\n"                                                                        # 16
        "```\n")
    page = Page("bad.md", copy_root)
    check_page(bad, page)
    text = "\n".join(page.problems)
    assert "line 5: tokens_per_sample 128 + context_window 384 = 512 passes the 256 learned positions" in text
    assert "line 6" not in text
    assert "line 7: seqkit-train" in text and "unknown config key 'optimizer.lr_typo'" in text
    assert "line 8: seqkit-train without a stopping rule" in text
    assert "line 8: task.data=rte-bin: no earlier command" in text
    assert "line 9: seqkit-generate" in text and "'...'" in text
    assert "line 10: examples/no/such.yaml does not exist" in text
    assert "line 15: ```bash opens a block inside the block of line 13" in text
    assert "line 16: hyp=a.txt: no earlier command" in text
    assert len(page.problems) == 9, text


def test_the_check_runs_corpus_py_and_reads_the_folder_it_prints(tmp_path, copy_root, components, monkeypatch):
    """``$(python examples/corpus.py NAME)`` runs as written: an unknown name, or a file its folder lacks, fails."""
    data = tmp_path / "data" / "conll2003"
    data.mkdir(parents=True)
    for split in ("train", "testa", "testb"):
        (data / f"eng.{split}").write_text("EU NNP B-NP B-ORG\n", encoding="utf-8")
    monkeypatch.setenv("SEQKIT_DATA", str(tmp_path / "data"))
    monkeypatch.delenv("CONLL2003_DIR", raising=False)
    bad = tmp_path / "bad.md"
    bad.write_text(
        "```bash\n"
        "src=$(python examples/corpus.py conll2002)\n"                                                 # 2
        "src=$(python examples/corpus.py conll2003)\n"
        "seqkit-preprocess task=tagging word_column=0 tag_column=-1 trainpref=$src/eng.train \\\n"  # 4
        "  validpref=$src/eng.testa testpref=$src/eng.tstb destdir=ner-bin\n"
        "gunzip -c $(python examples/corpus.py conll2003)/eng.train.gz > x.txt\n"                     # 6
        "```\n")
    page = Page("bad.md", copy_root)
    check_page(bad, page)
    text = "\n".join(page.problems)
    assert "line 2: python examples/corpus.py conll2002: exit 1: corpus.py: error: unknown corpus 'conll2002'" in text
    assert f"line 4: {data}/eng.tstb: not in the corpus folder" in text
    assert f"line 6: {data}/eng.train.gz: not in the corpus folder" in text
    assert len(page.problems) == 3, text


def test_the_check_reads_a_clean_copy_not_what_a_user_left_in_the_checkout(tmp_path, components):
    """An ignored folder a user's earlier run left (``left-bin/``) is not in the copy, so a page that reads
    it without making it fails; an uncommitted, unignored file travels."""
    user = tmp_path / "checkout"
    (user / "left-bin").mkdir(parents=True)
    (user / "left-bin" / "pred.txt").write_text("S-0\tx\n", encoding="utf-8")
    (user / ".gitignore").write_text("/left-bin/\n", encoding="utf-8")
    (user / "page.md").write_text("```bash\nseqkit-score hyp=left-bin/pred.txt\n```\n", encoding="utf-8")
    subprocess.run(["git", "init", "-q", str(user)], check=True)
    subprocess.run(["git", "-C", str(user), "add", ".gitignore"], check=True)
    copy = clean_copy(user, tmp_path / "clean" / "checkout")
    assert sorted(p.name for p in copy.iterdir()) == [".gitignore", "page.md"]
    in_checkout, in_copy = Page("page.md", user), Page("page.md", copy)
    check_page(user / "page.md", in_checkout)
    check_page(copy / "page.md", in_copy)
    assert not in_checkout.problems  # what the old check saw
    assert in_copy.problems == ["page.md: line 2: hyp=left-bin/pred.txt: no earlier command of this page (or "
                                "README.md) makes it, and it is not in the repository"]
    assert ignored(user, ["left-bin/", "page.md", "x-pred.txt"]) == {"left-bin/"}
