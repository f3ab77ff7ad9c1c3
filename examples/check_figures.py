"""Check that the figures a README quotes beside a log occur in that log.

    python examples/check_figures.py            # every examples/**/README.md, README.md and docs/*.md
    python examples/check_figures.py A.md B.md  # just these

A heuristic, not a proof. For each README:
- the text is cut into units: a table row is one unit, prose is cut into sentences (fenced code
  blocks are skipped);
- a unit is checked only if it names a log: a path (in backticks or a markdown link) with a
  `logs/` or `results/` component that exists relative to the README or the repository root. A
  folder or a glob (`logs/sst2/gpt-*/`, `logs/{rte,conll}/x/`) stands for every file under it;
- its figures are the numbers with a decimal point or thousands separators (38.79, 4,094) outside
  backticks; plain integers (epochs, layers, counts), dates, clock times, and signed (+1.95) or
  ×-suffixed (2.79×) numbers are left out: the first are too common to check, the last are
  usually differences or ratios the README derives from the log, which no log holds;
- a figure passes if some number in one of the unit's text files is within half a unit of its last
  digit (40.26 passes on 40.2623 and 0.485 on 0.4855; 4,094 also on 4094).
So a figure that sits beside the wrong log, one quoted in another unit than its log, or one that
happens to occur elsewhere in a long log is not caught; a figure converted to other units (MB
from bytes, minutes from seconds) or computed from logged numbers is reported though right.
Figures checked by hand (a setting, a split's size, a difference computed from logged figures)
are listed, with the reason, in `examples/figures_checked.tsv` and not reported.
Prints `README:line: figure not in file(s)` for each miss; exits 1 if any.
"""
import glob
import re
import sys
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATH = re.compile(r"`([^`\s]*(?:logs|results)/[^`\s]*)`|\]\(([^)\s]*(?:logs|results)/[^)\s]*)\)")
CODE = re.compile(r"`[^`]*`")
SKIP = re.compile(r"\d{4}-\d{2}-\d{2}|\d{1,2}:\d{2}(?::\d{2})?|\d+(?:\.\d+){2,}")
FIGURE = re.compile(r"(?<![\w.,+\-−±])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+)(?![\w.×]|,\d)")
NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z*(\[`-])")


def units(text):
    """Yield (text, line_of) for each table row and each prose sentence; line_of(offset) -> line."""
    para, in_code = [], False
    for no, line in enumerate(text.splitlines() + [""], 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        if line.startswith("|"):
            yield line, lambda off, no=no: no
            continue
        if not line.strip() or line.lstrip().startswith(("- ", "#")):
            yield from sentences(para)
            para = []
        if line.strip():
            para.append((no, line))
    yield from sentences(para)


def sentences(para):
    """Cut a paragraph [(line number, line)] into sentences."""
    text, starts = "", []
    for no, line in para:
        starts.append((len(text), no))
        text += line.strip() + " "
    pos = 0
    for part in SENTENCE_END.split(text) if para else []:
        pos = text.index(part, pos)
        yield part, lambda off, pos=pos: max(no for start, no in starts if start <= pos + off)
        pos += len(part)


def files_named(unit, base):
    """The existing files a unit's log paths name (folders and globs expanded)."""
    found = set()
    for m in PATH.finditer(unit):
        ref = (m.group(1) or m.group(2)).split("#")[0]
        for alt in expand_braces(ref):
            for root in (base, ROOT):
                for hit in glob.glob(str(root / alt)):
                    p = Path(hit)
                    found.update(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else found.add(p)
    return {f for f in found if f.suffix not in {".png", ".jpg", ".svg", ".pt"}}  # no figures to read


def expand_braces(ref):
    m = re.search(r"\{([^{}]*)\}", ref)
    if not m:
        return [ref]
    return [x for alt in m.group(1).split(",") for x in expand_braces(ref[:m.start()] + alt + ref[m.end():])]


def numbers_in(path, cache={}):
    if path not in cache:
        try:
            data = path.read_bytes() if path.stat().st_size < 20_000_000 else b""
            text = "" if b"\0" in data[:8192] else data.decode(errors="replace")  # images etc.: no figures
        except OSError:
            text = ""
        cache[path] = {Decimal(n.replace(",", "")) for n in NUMBER.findall(text)}
    return cache[path]


def found(figure, files):
    value = Decimal(figure.replace(",", ""))
    step = Decimal(1).scaleb(value.as_tuple().exponent)
    return any(abs(x - value) <= step / 2 for f in files for x in numbers_in(f))


def check(readme):
    """Return [(line number, figure, files)] for each figure not found in its unit's files."""
    readme = Path(readme)
    missing = []
    for unit, line_of in units(readme.read_text()):
        files = files_named(unit, readme.parent)
        if not files:
            continue
        blank = lambda m: " " * len(m.group())  # keeps offsets, so a figure's line is known
        prose = SKIP.sub(blank, CODE.sub(blank, unit))
        for m in FIGURE.finditer(prose):
            if not found(m.group(1), files):
                missing.append((line_of(m.start()), m.group(1), sorted(files)))
    return missing


def checked_by_hand(path=ROOT / "examples" / "figures_checked.tsv"):
    """{(README relative to the root, figure)} of the figures checked by hand."""
    if not path.is_file():
        return set()
    rows = (line.split("\t") for line in path.read_text(encoding="utf-8").splitlines())
    return {(row[0], row[1]) for row in rows if len(row) >= 3 and not row[0].startswith("#")}


def main(argv):
    readmes = argv or (sorted(glob.glob(str(ROOT / "examples/**/README.md"), recursive=True)) + [str(ROOT / "README.md")]
                       + sorted(glob.glob(str(ROOT / "docs" / "*.md"))))
    known = checked_by_hand()
    bad = 0
    for readme in readmes:
        rel = Path(readme).resolve()
        name = str(rel.relative_to(ROOT)) if rel.is_relative_to(ROOT) else readme
        for no, figure, files in check(readme):
            if (name, figure) in known:
                continue
            names = ", ".join(str(f.relative_to(ROOT)) if f.is_relative_to(ROOT) else str(f) for f in files[:3])
            more = f" (+{len(files) - 3} more)" if len(files) > 3 else ""
            print(f"{name}:{no}: {figure} not in {names}{more}")
            bad += 1
    print(f"{bad} figure(s) not found", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
