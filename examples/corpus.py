"""Find a public corpus the recipes read, or download it, and print the folder that holds it.

    python examples/corpus.py NAME        # e.g. wikitext2, multi30k, sst2, glue_rte, tatoeba_deu_eng

The folder is the first of ``$SEQKIT_DATA/NAME``, ``../shared/data/NAME`` (beside the checkout) and
``examples/raw/NAME`` that holds every file of NAME; when none does, the files are downloaded from
their public source into ``examples/raw/NAME``, in the same layout as ``../shared/data`` (one flat
folder per corpus, the same file names), so a recipe reads them the same way wherever they came
from. Zips are checked against their sha256 where the source is pinned, unpacked with Python (no
``unzip`` needed), and a file appears only once it is complete. CoNLL-2003 is licensed text and is
never downloaded: it is found in ``$CONLL2003_DIR`` or the folders above, else one line asks for the
user's own copy (as ``examples/tagging/conll2003/prepare.sh`` does).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from seqkit.core.io import file_sha256

EXAMPLES = Path(__file__).resolve().parent
REPO = EXAMPLES.parent


@dataclass
class Source:
    """Where one download comes from and which of its files a corpus keeps."""

    url: str
    """The address of one file or one zip."""
    files: dict[str, str] = field(default_factory=dict)
    """For a zip: member path -> file name in the corpus folder. Empty: the download is one file,
    kept under the url's last path component."""
    sha256: str | None = None
    """The download's sha256 when the source is pinned (checked before anything is kept)."""

    def names(self) -> list[str]:
        """The file names this download leaves in the corpus folder."""
        return list(self.files.values()) or [self.url.rsplit("/", 1)[-1]]


def _plain(base: str, names: list[str]) -> list[Source]:
    return [Source(f"{base}/{name}") for name in names]


_WIKITEXT = "https://raw.githubusercontent.com/pytorch/examples/main/word_language_model/data/wikitext-2"
_MULTI30K = ("https://raw.githubusercontent.com/multi30k/dataset/"
             "a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw")
_GLUE = "https://dl.fbaipublicfiles.com/glue/data"

SOURCES: dict[str, list[Source]] = {
    "wikitext2": _plain(_WIKITEXT, ["train.txt", "valid.txt", "test.txt"]),
    "multi30k": _plain(_MULTI30K, [f"{split}.{lang}.gz" for split in ("train", "val", "test_2016_flickr")
                                   for lang in ("de", "en", "fr", "cs")]),
    "sst2": [Source(f"{_GLUE}/SST-2.zip", {f"SST-2/{s}.tsv": f"{s}.tsv" for s in ("train", "dev", "test")})],
    "glue_rte": [Source(f"{_GLUE}/RTE.zip", {f"RTE/{s}.tsv": f"{s}.tsv" for s in ("train", "dev", "test")})],
    # Tatoeba via manythings.org/anki, the dated copies ../shared/data's SOURCE.md files name
    "tatoeba_deu_eng": [Source(
        "https://raw.githubusercontent.com/rioyshky/translation/de48b7027f7318d77010a6e08ed928c10748c23d/deu-eng.zip",
        {"deu.txt": "deu.txt", "_about.txt": "_about.txt"},
        sha256="b7688f84f99fa33c17397c14d8bd9cef1fdeb2ee0bf50074767023aee8926e28")],
    "tatoeba_fra_eng": [Source(
        "https://raw.githubusercontent.com/modelexlab/data/adddaf33ac35572bcfeb421efec29435e7ea9332/fra-eng.zip",
        {"fra-eng/fra.txt": "fra.txt", "fra-eng/_about.txt": "_about.txt"},
        sha256="161c93f18da3a7e6df611ed961426613260de8af06ccf8c79c977afe5135ac44")],
}


# corpora that are never downloaded (licensed text): file names, and the variable naming the user's copy
LOCAL_ONLY: dict[str, tuple[list[str], str]] = {
    "conll2003": (["eng.train", "eng.testa", "eng.testb"], "CONLL2003_DIR"),
}


class CorpusError(Exception):
    """A corpus that cannot be found or fetched (one line for the user)."""


def _names(sources: list[Source]) -> list[str]:
    return [name for s in sources for name in s.names()]


def _download(url: str, dest: Path) -> None:
    try:
        with urllib.request.urlopen(url, timeout=120) as response, open(dest, "wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as err:  # URLError and HTTPError are OSErrors
        raise CorpusError(f"cannot download {url}: {err}") from None


def fetch(name: str, dest: Path, sources: list[Source]) -> None:
    """Download ``sources`` into ``dest`` (made if missing); each file is moved in only when whole."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        for i, source in enumerate(sources):
            if all((dest / n).is_file() for n in source.names()):
                continue
            got = Path(tmp) / f"download-{i}"
            print(f"corpus.py: downloading {source.url}", file=sys.stderr)
            _download(source.url, got)
            sha = file_sha256(str(got)) if source.sha256 else None
            if sha != source.sha256:
                raise CorpusError(f"{source.url}: sha256 {sha} is not the pinned {source.sha256}")
            if not source.files:
                os.replace(got, dest / source.names()[0])
                continue
            try:
                with zipfile.ZipFile(got) as zf:
                    for member, target in source.files.items():
                        part = Path(tmp) / f"{target}.part"
                        with zf.open(member) as src, open(part, "wb") as out:
                            shutil.copyfileobj(src, out)
                        os.replace(part, dest / target)
            except (zipfile.BadZipFile, KeyError) as err:
                raise CorpusError(f"{source.url}: not the expected zip for {name} ({err})") from None


def local(name: str, roots: list[Path] | None = None, cache: Path | None = None,
          sources: dict[str, list[Source]] | None = None) -> Path | None:
    """The folder on this machine holding every file of corpus ``name``, or None (nothing fetched)."""
    sources = SOURCES if sources is None else sources
    if name not in sources and name not in LOCAL_ONLY:
        known = sorted([*sources, *LOCAL_ONLY])
        raise CorpusError(f"unknown corpus '{name}' (known: {', '.join(known)})")
    if roots is None:
        roots = [Path(p) for p in [os.environ.get("SEQKIT_DATA", "")] if p] + [REPO.parent / "shared" / "data"]
    cache = EXAMPLES / "raw" if cache is None else cache
    names, folders = _names(sources.get(name, [])), [root / name for root in [*roots, cache]]
    if name in LOCAL_ONLY:
        names, variable = LOCAL_ONLY[name]
        folders = [Path(p) for p in [os.environ.get(variable, "")] if p] + folders
    return next((f for f in folders if all((f / n).is_file() for n in names)), None)


def locate(name: str, roots: list[Path] | None = None, cache: Path | None = None,
           sources: dict[str, list[Source]] | None = None) -> Path:
    """The folder holding every file of corpus ``name``: an existing one, else a fresh download."""
    found = local(name, roots, cache, sources)
    if found is not None:
        return found
    if name in LOCAL_ONLY:
        names, variable = LOCAL_ONLY[name]
        raise CorpusError(f"{name} is licensed text and is never downloaded: put your own copy of "
                          f"{', '.join(names)} in $SEQKIT_DATA/{name} or ../shared/data/{name} beside the "
                          f"checkout, or set {variable} to the folder that holds it")
    sources = SOURCES if sources is None else sources
    cache = EXAMPLES / "raw" if cache is None else cache
    fetch(name, cache / name, sources[name])
    return cache / name


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(f"usage: corpus.py NAME   (NAME: {' '.join(sorted([*SOURCES, *LOCAL_ONLY]))})", file=sys.stderr)
        return 2
    try:
        print(locate(argv[0]))
    except CorpusError as err:
        print(f"corpus.py: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
