"""The checker behind tests/test_readme_commands.py: a page's fenced blocks, read as a reader would
run them, in a clean copy of the repository (the rules are in that file's docstring)."""
from __future__ import annotations

import ast
import contextlib
import glob
import importlib
import importlib.util
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Set


ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
SETUP = [
    'python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 . && '
    'PATH="$PWD/.venv/bin:$PATH" bash examples/quickstart/run.sh',
    'python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 ".[test]" && .venv/bin/pytest tests',
]

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
    root: Path  # the clean copy the commands run in
    made: Set[str] = field(default_factory=set)  # files and folders, normalised
    variables: Set[str] = field(default_factory=set)
    values: Dict[str, str] = field(default_factory=dict)  # variable -> value, where known
    data: Set[str] = field(default_factory=set)  # corpus folders printed by examples/corpus.py
    files: Set[str] = field(default_factory=set)  # what `> FILE` writes (made holds it too)
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
        return corpus_folder(m.group(1), page, where) or "SUBSTITUTED"

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


def exists(path: Path) -> bool:
    """A file or folder, or the prefix of files (``trainpref=$raw/train`` for train.de.gz, train.en.gz)."""
    return path.exists() or (path.parent.is_dir() and any(path.parent.glob(glob.escape(path.name) + ".*")))


def is_made(path: str, page: Page) -> bool:
    p = norm(path)
    if VAR.match(p):
        return VAR.match(p).group(1) in page.variables
    if exists(page.root / p) or p in ("-", ""):
        return True
    parts = p.split("/")
    return any("/".join(parts[:k]) in page.made for k in range(1, len(parts) + 1))


def values(value: str) -> List[str]:
    """A setting's value as one or more paths (``[a,b]`` lists)."""
    value = value.strip().strip("'\"")
    if value.startswith("[") and value.endswith("]"):
        return [v for v in value[1:-1].split(",") if v.strip()]
    return [value] if value else []


def corpus_folder(command: str, page: Page, where: str) -> Optional[str]:
    """What ``$(python examples/corpus.py NAME)`` prints, run as written in the clean copy; None when
    NAME is not on this machine (the command would download it) or the command is another."""
    words, script = shlex.split(command), page.root / "examples/corpus.py"
    if len(words) != 3 or words[0] not in ("python", "python3") or words[1:2] != ["examples/corpus.py"] \
            or not script.is_file():
        return None
    spec = importlib.util.spec_from_file_location("doc_corpus", script)
    corpus = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = corpus  # its dataclasses look their module up by name
    spec.loader.exec_module(corpus)
    try:
        if corpus.local(words[2]) is None:
            return None
    except corpus.CorpusError:
        pass  # an unknown name: the command below fails as it would for a reader
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    r = subprocess.run(["bash", "-c", command], cwd=page.root, env=env, capture_output=True, text=True, timeout=120)
    if r.returncode or not r.stdout.strip():
        page.fail(where, f"{command}: exit {r.returncode}: {(r.stderr or r.stdout).strip()[-400:]}")
        return None
    page.data.add(r.stdout.strip())
    return r.stdout.strip()


def in_data(path: str, page: Page) -> bool:
    """Whether the path lies in a corpus folder (checked by check_repo_paths)."""
    return any(path == d or path.startswith(d + "/") for d in page.data)


def expand(text: str, page: Page) -> str:
    """The line with the variables of known value replaced (``$src/eng.train`` -> the folder's file)."""
    return VAR.sub(lambda m: page.values.get(m.group(1), m.group(0)), text)


def check_repo_paths(words: List[str], page: Page, where: str) -> None:
    for w in words:
        for candidate in [w] + [w.split("=", 1)[1]] if "=" in w else [w]:
            for v in values(candidate):
                m = REPO_PATH.match(v)
                if m and not list(page.root.glob(norm(m.group(0)))) and not (page.root / norm(m.group(0))).exists():
                    page.fail(where, f"{m.group(0)} does not exist")
                if in_data(v, page) and not exists(Path(v)):
                    page.fail(where, f"{v}: not in the corpus folder examples/corpus.py printed")


def run_cli(module: str, argv: List[str], root: Path):
    """(exit status, stdout, stderr) of ``seqkit.cli.<module>.main(argv)`` in this process, run in ``root``."""
    mod = importlib.import_module(f"seqkit.cli.{module}")
    out, err = io.StringIO(), io.StringIO()
    code: Optional[int] = 0
    malloc = os.environ.get("SEQKIT_MALLOC_TUNING")
    os.environ["SEQKIT_MALLOC_TUNING"] = "0"  # leave this process's malloc settings to the other tests
    try:
        with contextlib.chdir(root), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            mod.main(argv)
    except SystemExit as e:
        code = e.code
    finally:
        if malloc is None:
            del os.environ["SEQKIT_MALLOC_TUNING"]
        else:
            os.environ["SEQKIT_MALLOC_TUNING"] = malloc
    return code, out.getvalue(), err.getvalue()


def run_cli_subprocess(module: str, argv: List[str], root: Path):
    # run from the repository root (the page's relative paths), but import the installed seqkit: the
    # root's seqkit/ folder has no cli/ (setup.cfg installs the repository's cli/ as seqkit.cli)
    code = ("import runpy, sys; sys.path = [p for p in sys.path if p not in ('', '.')]; "
            f"sys.argv = ['seqkit-{module}'] + sys.argv[1:]; runpy.run_module('seqkit.cli.{module}', run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code, *argv], cwd=root, capture_output=True, text=True, timeout=120)
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
    code, out, err = (run_cli_subprocess if plugin else run_cli)(module, argv, page.root)
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
            if (key in READS or key == "--config") and not in_data(v, page) and not is_made(v, page):
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
        name, value = ASSIGN.match(words.pop(0)).groups()
        page.variables.add(name)
        page.values.pop(name, None)  # a value from before, unless this one is known
        if value and "$" not in value and "SUBSTITUTED" not in value:
            page.values[name] = value
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
            if not (page.root / args[0]).is_file():
                page.fail(where, f"{cmd} {args[0]}: no such file in the repository")
            rest = args[1:]
        else:
            rest = []
        # a recipe script's first argument is the folder it makes (`work="${1:-quickstart-run}"`, its default
        # without one; the others name a body, a size, a unit); a python script's paths it is not given are
        # those it writes; examples/corpus.py's argument is a corpus's name
        paths = [a for a in rest if not a.startswith("-") and "=" not in a]
        if cmd in ("bash", "sh"):
            page.made.update(norm(a) for a in paths[:1])
        elif args[:1] != ["examples/corpus.py"]:
            page.made.update(norm(a) for a in paths if not re.fullmatch(r"\w+", a) and not is_made(a, page))
        script = page.root / args[0] if args and not args[0].startswith("-") else None
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
    page.files.update(norm(o) for o in outs if o and not o.isdigit())


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
                for words, ins, outs in simple_commands(expand(line, page), page, f"line {first + no - 1}"):
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


def check_links(page_path: Path, root: Path) -> List[str]:
    text = page_path.read_text(encoding="utf-8")
    for _, block, _ in fenced_blocks(text):
        text = text.replace(block, "")
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        if not (page_path.parent / target.split("#")[0]).exists():
            bad.append(f"{page_path.relative_to(root)}: link to {target}: no such file")
    return bad


def clean_copy(root: Path, dest: Path) -> Path:
    """``root``'s files as git lists them (tracked, and untracked but not ignored; as the working tree
    has them, edits included) copied to ``dest``. The corpora stay where they are: ``dest/../shared``
    is ``root/../shared`` and ``examples/raw`` (corpus.py's downloads) is root's, when they exist."""
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, listed):
        if (root / rel).is_file():  # a tracked file deleted from the working tree stays out
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, dest / rel)
    for data, link in ((root.parent / "shared", dest.parent / "shared"),
                       (root / "examples/raw", dest / "examples/raw")):
        if data.is_dir() and not link.exists():
            link.symlink_to(data)
    return dest


def ignored(root: Path, paths: List[str]) -> Set[str]:
    """The paths (a folder's with its trailing /) that root's .gitignore ignores."""
    r = subprocess.run(["git", "-C", str(root), "check-ignore", "--no-index", "--stdin"], input="\n".join(paths) + "\n",
                       capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr
    return set(r.stdout.splitlines())
