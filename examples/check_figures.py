"""Check that the figures a README quotes beside a log occur in that log.

    python examples/check_figures.py            # every examples/**/README.md, README.md and docs/*.md
    python examples/check_figures.py A.md B.md  # just these

A heuristic, not a proof. For each README:
- the text is cut into units: a table row is one unit, prose is cut into sentences (fenced code
  blocks are skipped); a heading opens a section; a table's caption is the paragraph just before
  it and its note the paragraph just after it, in the same section;
- a unit's files are the logs it names: a path (in backticks or a markdown link) with a `logs/` or
  `results/` component that exists relative to the README or the repository root. A file stands
  for itself. A folder stands for the files directly in it (`logs/bilstm_sentence_carve/`: its
  summary.md), never for those of the seed or run folders under it: a figure of one seed is
  checked against that seed's folder or file, which the unit names. A path that names several
  folders (a glob `logs/gpt_run*/`, braces `logs/{rte,conll}/x/`, or a placeholder, a part in
  capitals or in <> that is not there: `logs/gpt-MODE-sN/`, `logs/<run>/`) stands, in a table
  row, for the folders whose varying parts are the row's keys (the first word of each cell, a
  number only in the first: row `| 2 | ...` takes `logs/gpt_run2/`; failing that, the parts that
  begin with a key and a hyphen: `lora-all` for `lora`), else for every one's summary files (all
  but a run's logs and predictions: *.log, train_log.jsonl, generate-*.txt, samples.txt);
- a table row that names no log takes those of the markdown sections it links
  (`[translation.md](translation.md#figures)`: the logs that page's section names; the whole
  page's without an `#anchor`), else those of its table's caption and note, else those the prose
  of its section names; a row that still has none is reported, figure by figure. A prose
  sentence that names no log takes its section's: the files that the units under its heading
  (its rows and sentences, not those of a subsection) are checked against; one in a section that
  names none is not checked, only counted;
- its figures are the numbers with a decimal point or thousands separators (38.79, 4,094) outside
  backticks; plain integers (epochs, layers, counts), dates, clock times, and signed (+1.95) or
  ×-suffixed (2.79×) numbers are left out: the first are too common to check, the last are
  usually differences or ratios the README derives from the log, which no log holds;
- a figure passes if some number in one of the unit's text files is within half a unit of its last
  digit (40.26 passes on 40.2623 and 0.485 on 0.4855; 4,094 also on 4094); a figure followed by
  MB, KB, GB, min or h also on a byte or second count (21.628 MB on 21627912, 8.9 min on 534).
So a figure that sits beside the wrong log of the same summary, or one that happens to occur
elsewhere in a long log the unit names, is not caught; a figure computed from logged numbers (a
mean of seeds, a median, a difference) is reported though right. Figures checked by hand (a
setting, a split's size, a figure computed from logged ones) and figures no log holds are listed,
with the reason, in `examples/figures_checked.tsv` and not reported.
Prints `README:line: figure not in file(s)` (or `... in a table row that names no log`) for each
miss and, on stderr, how many figures were checked (how many of them through their section) and
how many stand in prose whose section names no log; exits 1 if any miss, 2 (one line, nothing
checked) on an unknown option or a path that is not a file.
"""
import bisect
import functools
import glob
import re
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
PATH = re.compile(r"`([^`\s]*(?:logs|results)/[^`\s]*)`|\]\(([^)\s]*(?:logs|results)/[^)\s]*)\)")
PAGE = re.compile(r"\]\(([^)\s:]*\.md)(?:#([^)\s]*))?\)")
CODE = re.compile(r"`[^`]*`")
SKIP = re.compile(r"\d{4}-\d{2}-\d{2}|\d{1,2}:\d{2}(?::\d{2})?|\d+(?:\.\d+){2,}")
FIGURE = re.compile(r"(?<![\w.,+\-−±])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+)(?![\w.×]|,\d)")
UNIT = re.compile(r"\s?(MB|KB|GB|min|h)\b")
SCALE = {"KB": Decimal(10**3), "MB": Decimal(10**6), "GB": Decimal(10**9), "min": Decimal(60), "h": Decimal(3600)}
NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z*(\[`-])")
PLACEHOLDER = re.compile(r"[A-Z]+|<[^<>/]*>")  # logs/gpt-MODE-sN/, logs/<run>/: every MODE, N, run
HEADING = re.compile(r"(#{1,6})\s+(.*)")
RUN_LOG = re.compile(r".*\.log|.*train_log\.jsonl|(generate|gen|predict)-.*\.txt|samples\.txt")
NOT_TEXT = {".png", ".jpg", ".svg", ".pt", ".bin", ".idx", ".gz"}  # no figures to read


@dataclass
class Table:
    """A table's caption (the paragraph just before it) and note (the one just after), as indices
    of their sentences among the README's units."""
    caption: list = field(default_factory=list)
    note: list = field(default_factory=list)


@dataclass
class Unit:
    """A table row or a prose sentence of a README."""
    text: str
    line_of: Callable[[int], int]  # offset in text -> line number in the README
    section: int                   # index of the heading it stands under (0: before any)
    table: Table | None = None     # a row's table; None for prose


@dataclass
class Section:
    """A heading: its level and GitHub anchor, and the units under it (subsections included)."""
    level: int
    anchor: str
    units: list = field(default_factory=list)


def anchor_of(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def parse(text: str) -> tuple[list[Unit], list[Section]]:
    """Cut a README into units (rows and sentences) and sections."""
    units: list[Unit] = []
    sections = [Section(0, "")]
    para: list[tuple[int, str]] = []
    caption: list[int] = []
    waiting: list[Table] = []  # tables of this section that no paragraph has followed yet
    table, in_code = None, False

    def flush():
        nonlocal caption
        if para:
            start = len(units)
            units.extend(Unit(t, lo, len(sections) - 1) for t, lo in sentences(para))
            caption = list(range(start, len(units)))
            for done in waiting:
                done.note = caption
            waiting.clear()
            para.clear()

    for no, line in enumerate(text.splitlines() + [""], 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        if line.startswith("|"):
            flush()
            if table is None:
                table = Table(caption)
                waiting.append(table)
            units.append(Unit(line, lambda off, no=no: no, len(sections) - 1, table))
            continue
        table = None
        heading = HEADING.match(line)
        if heading or not line.strip() or line.lstrip().startswith("- "):
            flush()
        if heading:
            sections.append(Section(len(heading.group(1)), anchor_of(heading.group(2))))
            caption, waiting = [], []
        if line.strip():
            para.append((no, line))
    flush()
    for i, unit in enumerate(units):
        sections[unit.section].units.append(i)
    for s, sec in enumerate(sections):  # a section holds its subsections' units too
        for sub in sections[s + 1:]:
            if sub.level <= sec.level:
                break
            sec.units.extend(sub.units)
    return units, sections


def sentences(para):
    """Cut a paragraph [(line number, line)] into sentences: [(text, line_of)]."""
    text, starts = "", []
    for no, line in para:
        starts.append((len(text), no))
        text += line.strip() + " "
    pos, out = 0, []
    for part in SENTENCE_END.split(text) if para else []:
        pos = text.index(part, pos)
        out.append((part, lambda off, pos=pos: max(no for start, no in starts if start <= pos + off)))
        pos += len(part)
    return out


def files_named(unit: str, base: Path, keys: set[str] | None = None) -> set[Path]:
    """The existing files a unit's log paths name: a file itself, a folder its own files. A path
    that matches several folders (a glob, braces, a placeholder) stands for the files of those
    whose wildcard parts are a row's keys (`logs/gpt_run*/` in row 2: `logs/gpt_run2/`; else those
    whose parts begin with a key and a hyphen: `lora-all` for `lora`), else for each one's summary."""
    found: set[Path] = set()
    for m in PATH.finditer(unit):
        hits: dict[Path, tuple[str, ...]] = {}
        for alt, chosen in expand_braces((m.group(1) or m.group(2)).split("#")[0]):
            for root in (base, ROOT):
                found_here = matches(root, alt) or matches(root, PLACEHOLDER.sub("*", alt))
                hits.update((path, chosen + wild) for path, wild in found_here.items())
        folders = [p for p in hits if p.is_dir()]
        found.update(p for p in hits if p.is_file())
        parts = {p: [x for x in hits[p] if x and x[0] != "-"] for p in folders}  # {,-random}: no key
        mine = ([p for p in folders if keys and parts[p] and set(parts[p]) <= keys]
                or [p for p in folders if keys and parts[p] and all(x.split("-")[0] in keys for x in parts[p])])
        for folder in mine or folders:
            found.update(folder_files(folder, summary_only=len(folders) > 1 and not mine))
    return {f for f in found if f.suffix not in NOT_TEXT}


@functools.lru_cache(maxsize=None)
def matches(root: Path, pattern: str) -> dict[Path, tuple[str, ...]]:
    """{path: the parts its wildcards matched} for each existing path that a glob pattern names."""
    wild = re.compile(re.escape(str(root / pattern)).replace(r"\*", "([^/]*)").rstrip("/") + "/?")
    return {Path(hit).resolve(): wild.fullmatch(hit).groups() if wild.fullmatch(hit) else ()
            for hit in glob.glob(str(root / pattern))}


def row_keys(row: str) -> set[str]:
    """The first word of each cell of a table row, or of each side of a " / " in a cell; a number
    only in the first cell (`| [2](logs/s2/) | full (rank 8) | lora / adapter | 3 |`: 2, full,
    lora, adapter)."""
    keys = set()
    for n, cell in enumerate(row.strip().strip("|").split("|")):
        for part in re.sub(r"\[([^\]]*)\]\([^)]*\)|[*`]", r"\1", cell).split(" / "):  # lora / adapter
            word = part.replace(",", " ").split()[:1]
            keys.update(w for w in word if n == 0 or not re.match(r"[\d.,]+$", w))  # 2 (seed 2), not 6 (epochs)
    return keys


def folder_files(folder: Path, summary_only: bool) -> set[Path]:
    """What a folder stands for: the files directly in it, never those of the folders under it;
    only its summary files (all but a run's logs and predictions) when a path names several."""
    own = {f for f in folder.iterdir() if f.is_file()}
    return {f for f in own if not RUN_LOG.fullmatch(f.name)} if summary_only else own


def expand_braces(ref: str) -> list[tuple[str, tuple[str, ...]]]:
    """[(path, the alternatives chosen)] for each way of reading a path's braces."""
    m = re.search(r"\{([^{}]*)\}", ref)
    if not m:
        return [(ref, ())]
    return [(path, (alt,) + chosen) for alt in m.group(1).split(",")
            for path, chosen in expand_braces(ref[:m.start()] + alt + ref[m.end():])]


def page_logs(unit: str, base: Path) -> set[Path]:
    """The logs named in the markdown sections a unit links (the whole page when no anchor)."""
    found: set[Path] = set()
    for m in PAGE.finditer(unit):
        page = (base / m.group(1)).resolve()
        if not page.is_file() or PATH.fullmatch(f"`{m.group(1)}`"):
            continue
        units, sections = parse(page.read_text(encoding="utf-8"))
        chosen = [s for s in sections if s.anchor == m.group(2)] if m.group(2) else [
            Section(0, "", list(range(len(units))))]
        for sec in chosen:
            for i in sec.units:
                found |= files_named(units[i].text, page.parent)
    return found


@functools.lru_cache(maxsize=None)
def numbers_in(path: Path) -> list[Decimal]:
    """The numbers a text file holds, sorted (none for a binary or a huge file)."""
    try:
        data = path.read_bytes() if path.stat().st_size < 20_000_000 else b""
        text = "" if b"\0" in data[:8192] else data.decode(errors="replace")  # images etc.: no figures
    except OSError:
        text = ""
    return sorted({Decimal(n.replace(",", "")) for n in NUMBER.findall(text)})


def found(figure: str, files, suffix: str = "") -> bool:
    """Whether a number of the files rounds to the figure; in bytes or seconds too for a figure
    in MB, KB, GB, min or h."""
    value = Decimal(figure.replace(",", ""))
    half = Decimal(1).scaleb(value.as_tuple().exponent) / 2
    scales = (1,) + ((SCALE[suffix],) if suffix in SCALE else ())
    for f, s in ((f, s) for f in files for s in scales):
        numbers = numbers_in(f)
        i = bisect.bisect_left(numbers, (value - half) * s)
        if i < len(numbers) and numbers[i] <= (value + half) * s:
            return True
    return False


def figures(unit: str):
    """The figures of a unit, as regex matches on its text with code spans, dates etc. blanked."""
    blank = lambda m: " " * len(m.group())  # keeps offsets, so a figure's line is known
    return FIGURE.finditer(SKIP.sub(blank, CODE.sub(blank, unit)))


def unit_files(readme: Path, base: Path | None = None) -> list[tuple[Unit, set[Path], bool]]:
    """Each unit of a README with the files its figures are checked against (empty: none named)
    and whether they are its section's (a prose sentence that names no log); paths are read from
    base (default: the README's folder)."""
    units, sections = parse(readme.read_text(encoding="utf-8"))
    base, out = base or readme.parent, []
    text_of = lambda indices: " ".join(units[i].text for i in indices)
    for unit in units:
        keys = row_keys(unit.text) if unit.table else None
        files = files_named(unit.text, base, keys)
        if unit.table and not files:
            prose = [i for i in sections[unit.section].units if not units[i].table]
            files = (page_logs(unit.text, base)
                     or files_named(text_of(unit.table.caption + unit.table.note), base, keys)
                     or files_named(text_of(prose), base, keys))
        out.append((unit, files))
    own: dict[int, set[Path]] = {}  # a heading's own units' files, its subsections' left out
    for unit, files in out:
        own.setdefault(unit.section, set()).update(files)
    return [(unit, files, False) if files or unit.table else (unit, own[unit.section], True)
            for unit, files in out]


def check(readme, counts: dict | None = None, base: Path | None = None):
    """Return [(line number, figure, files)] for each figure not found in its unit's files, and
    each figure of a table row that names no log, not even by inheritance (files: []); counts, if
    given, gets the number of figures "checked" ("by_section": those of them in prose that takes
    its section's logs) and "unchecked" (in prose whose section names no log); base: the folder
    its paths are read from (default: the README's)."""
    readme = Path(readme)
    missing = []
    for unit, files, by_section in unit_files(readme, base):
        found_here = list(figures(unit.text))
        if counts is not None:
            keys = ["checked", "by_section"] if files and by_section else [
                "checked" if files or unit.table else "unchecked"]
            for key in keys:
                counts[key] = counts.get(key, 0) + len(found_here)
        for m in found_here if files or unit.table else []:
            suffix = UNIT.match(unit.text, m.end())
            if not files or not found(m.group(1), files, suffix.group(1) if suffix else ""):
                missing.append((unit.line_of(m.start()), m.group(1), sorted(files)))
    return missing


def checked_by_hand(path=ROOT / "examples" / "figures_checked.tsv"):
    """{(README relative to the root, figure)} of the figures checked by hand."""
    if not path.is_file():
        return set()
    rows = (line.split("\t") for line in path.read_text(encoding="utf-8").splitlines())
    return {(row[0], row[1]) for row in rows if len(row) >= 3 and not row[0].startswith("#")}


def main(argv: list[str]) -> int:
    """Check the READMEs argv names (every one when none); 0 if all figures are found, 1 if not,
    2 on an option or a path that is not a file (one line on stderr)."""
    if {"-h", "--help"} & set(argv):
        print(f"usage: check_figures.py [-h] [README.md ...]\n\n{__doc__.strip()}")
        return 0
    for arg in argv:
        problem = (f"unknown option {arg}; the only one is -h/--help" if arg.startswith("-") else
                   None if Path(arg).is_file() else
                   f"{arg}: no such file; name README or docs .md files that exist, or none to check them all")
        if problem:
            print(f"check_figures.py: error: {problem}", file=sys.stderr)
            return 2
    readmes = argv or (sorted(glob.glob(str(ROOT / "examples/**/README.md"), recursive=True)) + [str(ROOT / "README.md")]
                       + sorted(glob.glob(str(ROOT / "docs" / "*.md"))))
    known = checked_by_hand()
    bad, counts, used = 0, {}, set()
    for readme in readmes:
        rel = Path(readme).resolve()
        name = str(rel.relative_to(ROOT)) if rel.is_relative_to(ROOT) else readme
        for no, figure, files in check(readme, counts):
            if (name, figure) in known:
                used.add((name, figure))
                continue
            names = ", ".join(str(f.relative_to(ROOT)) if f.is_relative_to(ROOT) else str(f) for f in files[:3])
            more = f" (+{len(files) - 3} more)" if len(files) > 3 else ""
            print(f"{name}:{no}: {figure} not in {names}{more}" if files else
                  f"{name}:{no}: {figure} in a table row that names no log (nor its caption, note or section)")
            bad += 1
    for name, figure in sorted(known - used) if not argv else []:
        print(f"examples/figures_checked.tsv: {name} {figure} is found now; drop its line", file=sys.stderr)
    print(f"{bad} figure(s) not found; {counts.get('checked', 0)} checked against a log "
          f"({counts.get('by_section', 0)} of them in prose that takes its section's logs), "
          f"{counts.get('unchecked', 0)} in prose whose section names none (not checked)", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
