"""Shared fixtures: a tiny binarized toy corpus, and running a CLI's ``main`` in-process."""

import os
import re
import sys
from dataclasses import dataclass
from typing import Callable, List, Optional

import pytest

# shared helper modules beside the tests (label_fixtures.py) import by plain name
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# a logging line as seqkit.cli.common.setup_logging formats it
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| [A-Z]+ \| ")


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    @property
    def messages(self) -> List[str]:
        """stderr without logging lines: what a failing command says to its user."""
        return [line for line in self.err.splitlines() if line.strip() and not LOG_LINE.match(line)]


@pytest.fixture(autouse=True)
def _root_logging_restored():
    """The root logger's handlers as they were before each test: a command's setup_logging (run by
    a test or by a fixture's training) points them at that test's captured stderr, which a later
    test that logs without a command would write to after it is closed ("--- Logging error ---")."""
    import logging

    handlers, level = logging.root.handlers[:], logging.root.level
    yield
    logging.root.handlers[:], logging.root.level = handlers, level


@pytest.fixture
def run_cli(capsys, monkeypatch) -> Callable[..., CliResult]:
    """``run_cli(main, [overrides...], stdin=None)``: call a CLI's ``main`` in this process."""

    def run(main: Callable, argv: List[str], stdin: Optional[str] = None) -> CliResult:
        import io

        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        capsys.readouterr()
        code = 0
        try:
            main([str(a) for a in argv])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run


def make_toy_data(root, vocab_size: int = 200, raw=None):
    """The toy de->en corpus (300/40/40 lines) in ``root/raw``, binarized into ``root/bin``."""
    from seqkit.cli.preprocess import main as preprocess
    from seqkit.data.toy_corpus import make_corpus

    if raw is None:
        raw = root / "raw"
        make_corpus(str(raw), 300, 40, 40, seed=1)
    dest = root / "bin"
    preprocess([
        "source_lang=de", "target_lang=en", f"trainpref={raw}/train", f"validpref={raw}/valid",
        f"testpref={raw}/test", f"destdir={dest}", "tokenizer=sentencepiece_bpe",
        f"tokenizer.vocab_size={vocab_size}", "tokenizer.num_threads=1",
    ])
    return raw, dest


@pytest.fixture(scope="session")
def toy_data_factory():
    """``make_toy_data(root, vocab_size=200, raw=None)`` for tests that need a second data folder."""
    return make_toy_data


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory):
    """(raw text folder, binarized data folder) shared by one test module; treat as read-only."""
    return make_toy_data(tmp_path_factory.mktemp("toy"))


# a few seconds of training on one core; lr fixed and high so 40 updates already learn eos
TINY_TRAIN = [
    "model=transformer_tiny", "model.dropout=0", "common.threads=1", "optimizer.lr=3e-3", "lr_scheduler=fixed",
    "dataset.max_tokens=2048",
]
# short outputs and a small beam keep an undertrained model's generation quick
FAST_GEN = ["common.threads=1", "generation.beam=2", "generation.max_len_b=40"]


@pytest.fixture(scope="session")
def tiny_train_args():
    return list(TINY_TRAIN)


@pytest.fixture(scope="session")
def fast_gen_args():
    return list(FAST_GEN)


def _check_alignment_lines(text: str) -> int:
    """Assert every hypothesis of a generate output with print_alignment has a well-formed A- line:
    one ``src-tgt`` pair per target piece (eos excluded), positions inside the sentence. Returns the
    number of A- lines."""
    src_len, hyp_len, count = {}, {}, 0
    for line in text.splitlines():
        kind, rest = line.split("\t", 1)
        k, sid = kind.split("-")
        if k == "S":
            src_len[sid] = None  # pieces unknown here: checked against the H- line's length below
        elif k == "H":
            hyp_len[sid] = len(rest.split("\t")[1].split())
        elif k == "A":
            count += 1
            pairs = [tuple(map(int, p.split("-"))) for p in rest.split()]
            assert [t for _, t in pairs] == list(range(hyp_len[sid])), line
            assert all(0 <= s < 200 for s, _ in pairs), line
    return count


@pytest.fixture(scope="session")
def check_alignment_lines():
    return _check_alignment_lines


# tests/e2e/translation.sh trains 250 updates on 2,000 toy pairs: a working model scores 85-97 on
# its 40 test sentences, one that outputs garbage under 5
E2E_BLEU_FLOOR = 80.0


def _bleu_of(stdout: str) -> float:
    """The score of the one sacreBLEU line of a seqkit-score output, asserted >= the e2e floor."""
    lines = [line for line in stdout.splitlines() if line.startswith("BLEU = ")]
    assert len(lines) == 1, stdout
    score = float(lines[0].split()[2])
    assert score >= E2E_BLEU_FLOOR, f"BLEU {score} below the floor {E2E_BLEU_FLOOR}: {lines[0]}"
    return score


@pytest.fixture(scope="session")
def bleu_floor():
    """``bleu_floor(stdout)``: the BLEU of a seqkit-score output, checked against the e2e floor."""
    return _bleu_of
