"""examples/corpus.py: a corpus found where it lies, else fetched (here from file:// sources) into
the shared layout, checked against its pinned sha256, and nothing half-written on failure."""
import hashlib
import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "examples" / "corpus.py"
_spec = importlib.util.spec_from_file_location("seqkit_examples_corpus", SCRIPT)
corpus = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = corpus  # dataclasses look their module up by name
_spec.loader.exec_module(corpus)


def _sources(tmp_path: Path, sha256: str | None = None) -> dict:
    """A plain-file corpus and a zipped one, served from tmp_path/server."""
    server = tmp_path / "server"
    server.mkdir()
    (server / "train.txt").write_text("a b c\n", encoding="utf-8")
    with zipfile.ZipFile(server / "pairs.zip", "w") as zf:
        zf.writestr("pairs/deu.txt", "Hi.\tHallo.\n")
        zf.writestr("pairs/other.txt", "not kept\n")
    digest = hashlib.sha256((server / "pairs.zip").read_bytes()).hexdigest()
    return {
        "plain": [corpus.Source((server / "train.txt").as_uri())],
        "zipped": [corpus.Source((server / "pairs.zip").as_uri(), {"pairs/deu.txt": "deu.txt"},
                                 sha256=sha256 or digest)],
    }


def test_fetches_plain_and_zipped_into_the_shared_layout(tmp_path):
    sources, cache = _sources(tmp_path), tmp_path / "cache"
    assert corpus.locate("plain", roots=[], cache=cache, sources=sources) == cache / "plain"
    assert (cache / "plain" / "train.txt").read_text(encoding="utf-8") == "a b c\n"
    assert corpus.locate("zipped", roots=[], cache=cache, sources=sources) == cache / "zipped"
    assert sorted(p.name for p in (cache / "zipped").iterdir()) == ["deu.txt"]  # only the named member
    assert (cache / "zipped" / "deu.txt").read_text(encoding="utf-8") == "Hi.\tHallo.\n"


def test_an_existing_copy_wins_over_the_cache_and_the_network(tmp_path):
    sources = _sources(tmp_path)
    (tmp_path / "shared" / "plain").mkdir(parents=True)
    (tmp_path / "shared" / "plain" / "train.txt").write_text("mine\n", encoding="utf-8")
    (tmp_path / "server" / "train.txt").unlink()  # a download would fail
    found = corpus.locate("plain", roots=[tmp_path / "nothing", tmp_path / "shared"], cache=tmp_path / "c",
                          sources=sources)
    assert found == tmp_path / "shared" / "plain" and not (tmp_path / "c").exists()


def test_a_wrong_checksum_keeps_nothing(tmp_path):
    sources, cache = _sources(tmp_path, sha256="0" * 64), tmp_path / "cache"
    with pytest.raises(corpus.CorpusError, match="sha256"):
        corpus.locate("zipped", roots=[], cache=cache, sources=sources)
    assert list((cache / "zipped").iterdir()) == []


def test_a_failed_download_is_one_line(tmp_path):
    sources = {"gone": [corpus.Source((tmp_path / "missing.txt").as_uri())]}
    with pytest.raises(corpus.CorpusError, match="cannot download"):
        corpus.locate("gone", roots=[], cache=tmp_path / "cache", sources=sources)


def test_command_line_unknown_corpus_is_one_line():
    run = subprocess.run([sys.executable, str(SCRIPT), "conll2002"], capture_output=True, text=True)
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "unknown corpus 'conll2002'" in run.stderr


def test_conll2003_is_found_where_it_lies_and_else_asked_for_in_one_line(tmp_path, monkeypatch):
    """Licensed text: read from the user's copy ($CONLL2003_DIR or a data root), never downloaded."""
    monkeypatch.delenv("CONLL2003_DIR", raising=False)
    with pytest.raises(corpus.CorpusError, match="licensed text and is never downloaded: put your own copy"):
        corpus.locate("conll2003", roots=[tmp_path / "none"], cache=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    for name in ("eng.train", "eng.testa", "eng.testb"):
        (mine / name).write_text("EU NNP B-NP B-ORG\n", encoding="utf-8")
    monkeypatch.setenv("CONLL2003_DIR", str(mine))
    assert corpus.locate("conll2003", roots=[tmp_path / "none"], cache=tmp_path / "cache") == mine
    run = subprocess.run([sys.executable, str(SCRIPT), "conll2003"], capture_output=True, text=True,
                         env={**os.environ, "CONLL2003_DIR": "", "SEQKIT_DATA": str(tmp_path / "none")},
                         cwd=tmp_path)
    if run.returncode == 0:  # ../shared/data/conll2003 is beside this checkout
        assert Path(run.stdout.strip(), "eng.train").is_file()
    else:
        assert run.returncode == 1 and run.stdout == "" and run.stderr.count("\n") == 1
        assert "put your own copy of eng.train, eng.testa, eng.testb" in run.stderr


def test_every_source_names_its_files():
    for name, sources in corpus.SOURCES.items():
        names = corpus._names(sources)
        assert names and len(names) == len(set(names)), name
