"""The commands of README.md and docs/*.md, checked so they cannot drift from the code.

Nothing long runs. For every fenced ``bash`` block of every page:
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
  comes from a variable the page sets (``raw=$(python examples/corpus.py multi30k)``);
- every ``examples/...`` (``benchmarks/``, ``docs/`` ...) path named exists; every script run
  with ``bash`` or ``python`` exists.
Every ``python`` block compiles and its ``from seqkit... import X`` lines resolve; every relative
link of a page points at a file that exists. README.md starts with the two set-up commands, stays
under 200 lines and keeps the "Choose on one split, report on another" rule.
"""
from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Set

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
SETUP = [
    'python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 . && '
    'PATH="$PWD/.venv/bin:$PATH" bash examples/quickstart/run.sh',
    'python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 ".[test]" && .venv/bin/pytest tests',
]
# written in parallel with these pages (the part 5); checked like any link once it exists
PENDING_LINKS = {ROOT / "docs" / "layout.md"}

REPO_PATH = re.compile(r"^(?:\./)?(?:examples|benchmarks|docs|tests|seqkit|cli|hydra_conf)/[^\s,\]'\"]*")
VAR = re.compile(r"\$\{?([A-Za-z_]\w*)\}?")
ASSIGN = re.compile(r"^([A-Za-z_]\w*)=(.*)$", re.S)
# commands a page may use besides seqkit's (anything else is a typo or a placeholder such as `...`)
SHELL = {"echo", "printf", "cat", "head", "tail", "grep", "cut", "sed", "gunzip", "zcat", "mkdir", "cp", "mv",
         "rm", "ls", "wc", "sort", "tee", "cd", ".", "source", "export", "pip", "python", "python3", "bash",
         "torchrun", "tensorboard", "nvidia-smi", "true", "test", "for", "do", "done", "git", "time",
         ".venv/bin/pip", ".venv/bin/pytest", "hf", "find", "awk", "xargs", "diff", "du", "which", "env", "nproc",
         "date", "sleep", "unzip", "tar", "curl", "wget", "ln", "touch", "chmod", "jq"}
# settings whose value is a file or folder a command reads / writes
READS = {"task.data", "path", "model.path", "vocab_from", "criterion.teacher", "checkpoint.restore_file", "hyp",
         "ref", "data", "text_file", "trainpref", "validpref", "testpref", "save_dir", "generator", "logs",
         "results"}
WRITES = {"destdir", "checkpoint.save_dir", "output", "results_path", "distill_to", "ctranslate2_dir",
          "common.tensorboard_logdir"}
SUBCOMMANDS_WITH_FILES = {"curves": "logs", "pruning": "results"}  # seqkit-plot's positional files


@dataclass
class Page:
    """What the commands of a page (after README.md's) have made so far."""

    name: str
    made: Set[str] = field(default_factory=set)  # files and folders, normalised
    variables: Set[str] = field(default_factory=set)
    trained: Dict[str, dict] = field(default_factory=dict)  # checkpoint.save_dir -> composed train config
    problems: List[str] = field(default_factory=list)

    def fail(self, where: str, message: str) -> None:
        self.problems.append(f"{self.name}: {where}: {message}")


def norm(path: str) -> str:
    return os.path.normpath(path.strip().strip("'\"")).rstrip("/")


def strip_comment(line: str) -> str:
    """The line without a shell comment (a ``#`` that starts a word, outside quotes)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def logical_lines(block: str):
    """(first line number in the block, text) of each command line: continuations joined, comments
    and heredoc bodies left out."""
    lines = block.split("\n")
    i, heredoc = 0, None
    while i < len(lines):
        start, text = i, strip_comment(lines[i])
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text.rstrip()[:-1] + " " + strip_comment(lines[i])
        i += 1
        if heredoc:
            if text.strip() == heredoc:
                heredoc = None
            continue
        m = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", text)
        if m:
            heredoc = m.group(1)
            text = text[:m.start()]
        if text.strip():
            yield start + 1, text


def simple_commands(text: str, page: Page, where: str):
    """Split a line into simple commands: (words, redirect targets in, redirect targets out)."""
    inner: List[str] = []

    def substitute(m):
        inner.append(m.group(1))
        return "SUBSTITUTED"

    text = re.sub(r"\$\(([^()]*)\)", substitute, text)
    for sub in inner:
        yield from simple_commands(sub, page, where)
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|<>")
    lex.whitespace_split, lex.commenters = True, ""
    try:
        tokens = list(lex)
    except ValueError as e:
        page.fail(where, f"cannot split {text.strip()!r}: {e}")
        return
    words: List[str] = []
    ins: List[str] = []
    outs: List[str] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t in ("|", "||", "&&", ";", "&"):
            if words:
                yield words, ins, outs
            words, ins, outs = [], [], []
        elif set(t) <= set("<>&"):
            if words and words[-1].isdigit():  # 2>, 2>&1
                words.pop()
            target = tokens[i + 1] if i + 1 < len(tokens) else ""
            if not (t.endswith("&") and target.isdigit()):
                (ins if t.startswith("<") else outs).append(target)
            i += 1
        else:
            words.append(t)
        i += 1
    if words:
        yield words, ins, outs


def is_made(path: str, page: Page) -> bool:
    p = norm(path)
    if VAR.match(p):
        return VAR.match(p).group(1) in page.variables
    if (ROOT / p).exists() or p in ("-", ""):
        return True
    parts = p.split("/")
    return any("/".join(parts[:k]) in page.made for k in range(1, len(parts) + 1))


def values(value: str) -> List[str]:
    """A setting's value as one or more paths (``[a,b]`` lists)."""
    value = value.strip().strip("'\"")
    if value.startswith("[") and value.endswith("]"):
        return [v for v in value[1:-1].split(",") if v.strip()]
    return [value] if value else []


def check_repo_paths(words: List[str], page: Page, where: str) -> None:
    for w in words:
        for candidate in [w] + [w.split("=", 1)[1]] if "=" in w else [w]:
            for v in values(candidate):
                m = REPO_PATH.match(v)
                if m and not list(ROOT.glob(norm(m.group(0)))) and not (ROOT / norm(m.group(0))).exists():
                    page.fail(where, f"{m.group(0)} does not exist")


def run_cli(module: str, argv: List[str]):
    """(exit status, stdout, stderr) of ``seqkit.cli.<module>.main(argv)`` in this process."""
    mod = importlib.import_module(f"seqkit.cli.{module}")
    out, err = io.StringIO(), io.StringIO()
    code: Optional[int] = 0
    malloc = os.environ.get("SEQKIT_MALLOC_TUNING")
    os.environ["SEQKIT_MALLOC_TUNING"] = "0"  # leave this process's malloc settings to the other tests
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            mod.main(argv)
    except SystemExit as e:
        code = e.code
    finally:
        if malloc is None:
            del os.environ["SEQKIT_MALLOC_TUNING"]
        else:
            os.environ["SEQKIT_MALLOC_TUNING"] = malloc
    return code, out.getvalue(), err.getvalue()


def run_cli_subprocess(module: str, argv: List[str]):
    # run from the repository root (the page's relative paths), but import the installed seqkit: the
    # root's seqkit/ folder has no cli/ (setup.cfg installs the repository's cli/ as seqkit.cli)
    code = ("import runpy, sys; sys.path = [p for p in sys.path if p not in ('', '.')]; "
            f"sys.argv = ['seqkit-{module}'] + sys.argv[1:]; runpy.run_module('seqkit.cli.{module}', run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def seqkit_command(sub: str, args: List[str], page: Page, where: str) -> None:
    from omegaconf import OmegaConf

    from seqkit.cli.main import MODULES, SUBCOMMANDS

    if sub not in SUBCOMMANDS:
        page.fail(where, f"seqkit has no subcommand {sub!r} (valid: {', '.join(SUBCOMMANDS)})")
        return
    module = MODULES.get(sub, sub.replace("-", "_"))
    # a variable stands for a path: hydra reads ${x} as an interpolation, so name it plainly
    argv = [VAR.sub(lambda m: "VAR_" + m.group(1), a) for a in args]
    helping = any(a in ("-h", "--help") for a in argv)
    if not helping and "--cfg" not in argv:
        argv += ["--cfg", "job"]
    plugin = any(a.startswith("common.user_dir=") for a in argv)
    code, out, err = (run_cli_subprocess if plugin else run_cli)(module, argv)
    if code != 0:
        page.fail(where, f"seqkit-{sub} {' '.join(args)}: exit {code}: {(err or out).strip()[-400:]}")
        return
    if helping:
        return
    cfg = OmegaConf.to_container(OmegaConf.create(out)) if out.strip() else {}
    settings = dict(a.split("=", 1) for a in args if "=" in a and not a.startswith("-"))
    if "--config" in args:
        settings["--config"] = args[args.index("--config") + 1]
    for key, value in settings.items():
        for v in values(value):
            if (key in READS or key == "--config") and not is_made(v, page):
                page.fail(where, f"{key}={v}: no earlier command of this page (or README.md) makes it, and "
                                 f"it is not in the repository")
    if sub == "plot" and args and args[0] in SUBCOMMANDS_WITH_FILES:
        for v in args[1:]:
            if "=" not in v and not is_made(v, page):
                page.fail(where, f"{v}: no earlier command of this page (or README.md) makes it")
    for key in WRITES:
        value = dig(cfg, key) if key not in settings else settings[key]
        if isinstance(value, str) and value:
            page.made.add(norm(value))
    if sub == "train":
        check_train(cfg, page, where)
    if sub == "eval-lm":
        check_eval_lm(cfg, page, where)


def dig(cfg: dict, key: str):
    for part in key.split("."):
        if not isinstance(cfg, dict) or part not in cfg:
            return None
        cfg = cfg[part]
    return cfg


def check_train(cfg: dict, page: Page, where: str) -> None:
    opt, sched = cfg["optimization"], cfg["lr_scheduler"]
    if not (opt["max_epoch"] or opt["max_update"] or opt["stop_time_hours"] or opt["patience"] > 0):
        page.fail(where, "seqkit-train without a stopping rule (optimization.max_epoch, max_update, stop_time_hours "
                         "or patience): it would train forever")
    if sched["name"] == "cosine" and not sched.get("period_updates") and opt["max_update"] <= sched["warmup_updates"]:
        page.fail(where, "lr_scheduler=cosine needs lr_scheduler.period_updates or an optimization.max_update")
    if sched["name"] in ("polynomial_decay", "slanted_triangular") and not (sched.get("total_num_update")
                                                                             or opt["max_update"]):
        page.fail(where, f"lr_scheduler={sched['name']} needs lr_scheduler.total_num_update or optimization.max_update")
    page.trained[norm(cfg["checkpoint"]["save_dir"])] = cfg


def check_eval_lm(cfg: dict, page: Page, where: str) -> None:
    train = page.trained.get(norm(os.path.dirname(cfg["path"])))
    if train is None or train["task"].get("name") != "language_modeling":
        return
    trained = int(train["task"].get("tokens_per_sample") or 0)
    block = cfg["tokens_per_sample"] or trained
    length = block + cfg["context_window"]
    model = train["model"]
    if model.get("learned_positions") and trained and length > trained:
        page.fail(where, f"tokens_per_sample {block} + context_window {cfg['context_window']} = {length} passes the "
                         f"{trained} learned positions {train['checkpoint']['save_dir']} trained "
                         f"(seqkit-eval-lm refuses it)")
    elif model.get("max_positions") and length > model["max_positions"]:
        page.fail(where, f"tokens_per_sample + context_window = {length} passes the model's "
                         f"{model['max_positions']} positions")


def check_command(words: List[str], ins: List[str], outs: List[str], page: Page, where: str) -> None:
    while words and ASSIGN.match(words[0]):  # NAME=value before a command, or a lone assignment
        page.variables.add(ASSIGN.match(words.pop(0)).group(1))
    if not words:
        return
    check_repo_paths(words + ins, page, where)
    for f in ins:
        if not is_made(f, page):
            page.fail(where, f"< {f}: no earlier command of this page (or README.md) makes it")
    cmd, args = words[0], words[1:]
    if cmd.startswith("seqkit-"):
        seqkit_command(cmd[len("seqkit-"):], args, page, where)
    elif cmd == "seqkit":
        if args and args[0] not in ("-h", "--help", "help", "-V", "--version"):
            seqkit_command(args[0], args[1:], page, where)
    elif cmd == "torchrun":
        if "-m" not in args or not args[args.index("-m") + 1].startswith("seqkit.cli."):
            page.fail(where, "torchrun lines run seqkit as a module: torchrun ... -m seqkit.cli.train ...")
        else:
            k = args.index("-m")
            seqkit_command(args[k + 1][len("seqkit.cli."):].replace("_", "-"), args[k + 2:], page, where)
    elif cmd in ("bash", "sh", "python", "python3"):
        if args[:1] == ["-m"]:
            if importlib.util.find_spec(args[1].split()[0]) is None:
                page.fail(where, f"python -m {args[1]}: no such module")
            rest = args[2:]
        elif args and not args[0].startswith("-"):
            if not (ROOT / args[0]).is_file():
                page.fail(where, f"{cmd} {args[0]}: no such file in the repository")
            rest = args[1:]
        else:
            rest = []
        # a recipe script's positional arguments are the folders it makes; without them, its default
        # work folder (`work="${1:-quickstart-run}"`)
        page.made.update(norm(a) for a in rest if not a.startswith("-") and "=" not in a)
        script = ROOT / args[0] if args and not args[0].startswith("-") else None
        if cmd in ("bash", "sh") and script and script.is_file() and not rest:
            page.made.update(re.findall(r'^\w+="\$\{1:-([^}$]+)\}"', script.read_text(encoding="utf-8"), re.M))
    elif cmd in ("mkdir", "cp", "mv", "tensorboard"):
        if cmd != "tensorboard" and args:
            page.made.add(norm(args[-1]))
    elif cmd not in SHELL:
        page.fail(where, f"{cmd!r} is not a command this check knows (a placeholder such as '...'?)")
    for option in ("--local-dir", "--output-dir"):  # hf download ... --local-dir DIR
        if option in args[:-1]:
            page.made.add(norm(args[args.index(option) + 1]))
    page.made.update(norm(o) for o in outs if o and not o.isdigit())


def fenced_blocks(text: str, page: Optional[Page] = None):
    """(language, text, line number of its first line) of each fenced block. A block opens with
    ```LANG and closes with a bare ```: a fence that opens inside a block, or a block never closed,
    is a problem (the blocks after it would be misread)."""
    lang, start, body = None, 0, []
    for no, line in enumerate(text.split("\n"), 1):
        m = re.match(r"^```\s*([\w-]*)\s*$", line)
        if not m:
            if lang is not None:
                body.append(line)
            continue
        if lang is None:
            lang, start, body = m.group(1), no + 1, []
        elif m.group(1):
            if page:
                page.fail(f"line {no}", f"```{m.group(1)} opens a block inside the block of line {start - 1}")
            lang, start, body = m.group(1), no + 1, []
        else:
            yield lang, "\n".join(body) + "\n", start
            lang = None
    if lang is not None and page:
        page.fail(f"line {start - 1}", "a fenced block that is never closed")


def check_page(page_path: Path, page: Page) -> None:
    """Check every bash block of the page, in order; the page's outputs accumulate in ``page``."""
    text = page_path.read_text(encoding="utf-8")
    for lang, block, first in fenced_blocks(text, page):
        if lang in ("bash", "sh", "shell"):
            r = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True)
            if r.returncode:
                page.fail(f"line {first}", f"bash -n: {r.stderr.strip()}")
            for no, line in logical_lines(block):
                for words, ins, outs in simple_commands(line, page, f"line {first + no - 1}"):
                    check_command(words, ins, outs, page, f"line {first + no - 1}")
        elif lang == "python":
            check_python(block, page, f"line {first}")


def check_python(block: str, page: Page, where: str) -> None:
    try:
        tree = ast.parse(block)
    except SyntaxError as e:
        page.fail(where, f"python block does not parse: {e}")
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "seqkit":
            try:
                mod = importlib.import_module(node.module)
            except ImportError as e:
                page.fail(where, f"from {node.module} import ...: {e}")
                continue
            for alias in node.names:
                if not hasattr(mod, alias.name):
                    page.fail(where, f"{node.module} has no {alias.name}")


def check_links(page_path: Path) -> List[str]:
    text = page_path.read_text(encoding="utf-8")
    for _, block, _ in fenced_blocks(text):
        text = text.replace(block, "")
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page_path.parent / target.split("#")[0]).resolve()
        if not path.exists() and path not in PENDING_LINKS:
            bad.append(f"{page_path.relative_to(ROOT)}: link to {target}: no such file")
    return bad


@pytest.fixture(scope="module")
def components():
    import seqkit

    seqkit.import_builtin_components()


_README: List[Page] = []


def readme_state(name: str) -> Page:
    """A fresh page that starts where README.md's commands leave off (README.md checked once)."""
    if not _README:
        _README.append(Page("README.md"))
        check_page(ROOT / "README.md", _README[0])
    first = _README[0]
    problems = list(first.problems) if name == "README.md" else []
    return Page(name, set(first.made), set(first.variables), dict(first.trained), problems)


def test_readme_starts_with_the_two_set_up_commands_and_fits_a_first_read():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [b.strip() for lang, b, _ in fenced_blocks(text) if lang == "bash"]
    assert blocks[:2] == SETUP, "README.md must start with the two set-up commands, unchanged"
    assert len(text.splitlines()) <= 200, f"README.md has {len(text.splitlines())} lines; a first read is <= 200"
    assert "## Choose on one split, report on another" in text


@pytest.mark.parametrize("page_path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_of_the_page_composes_and_reads_what_an_earlier_command_made(page_path, components):
    name = str(page_path.relative_to(ROOT))
    page = readme_state(name)  # a page may go on from README.md's four commands
    if name != "README.md":
        check_page(page_path, page)
    assert not page.problems, "\n".join(page.problems)


@pytest.mark.parametrize("page_path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files(page_path):
    assert not check_links(page_path)


def test_the_check_fails_on_a_bad_key_a_missing_input_and_eval_lm_past_the_trained_positions(tmp_path, components):
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
    page = Page("bad.md")
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
