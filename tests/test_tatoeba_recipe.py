"""examples/translation/tatoeba: the split keeps every sentence of valid and test out of train, and
run.sh goes through prepare -> train -> checkpoint_best on valid -> test BLEU (on the CPU, toy pairs
written as a deu.txt, a tiny model: the GPU recipe's path with CPU settings)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seqkit.data.toy_corpus import make_corpus

RECIPE = Path(__file__).resolve().parent.parent / "examples" / "translation" / "tatoeba"
sys.path.insert(0, str(RECIPE))
import split  # noqa: E402  examples/translation/tatoeba/split.py

# (German, English): "Hallo!" and "Grüß Gott!" share "Hi.", "Grüß Gott!" also translates "Hello.";
# "Lauf!" shares "Run!" with "Renn!"
PAIRS = [("Hallo!", "Hi."), ("Grüß Gott!", "Hi."), ("Lauf!", "Run!"), ("Wer?", "Who?"), ("Renn!", "Run!"),
         ("Grüß Gott!", "Hello."), ("Feuer!", "Fire!"), ("Hilfe!", "Help!")]


def test_pairs_sharing_a_sentence_are_one_group():
    assert split.groups_of(PAIRS) == [[0, 1, 5], [2, 4], [3], [6], [7]]


def test_valid_and_test_share_no_sentence_with_train():
    parts = split.split(PAIRS, test=2, valid=1, seed=1)
    assert sorted(i for ids in parts.values() for i in ids) == list(range(len(PAIRS)))
    assert parts == {"test": [3, 6], "valid": [7], "train": [0, 1, 5, 2, 4]}  # frozen: seed 1's group order
    train = {s for i in parts["train"] for s in PAIRS[i]}
    assert not any(s in train for name in ("valid", "test") for i in parts[name] for s in PAIRS[i])
    assert split.split(PAIRS, 2, 1, seed=2) != parts and split.split(PAIRS, 2, 1, seed=1) == parts


def test_split_reads_deu_txt_and_refuses_a_folder_without_it(tmp_path):
    (tmp_path / "deu.txt").write_text("".join(f"{en}\t{de}\tCC-BY\n" for de, en in PAIRS) + "bad line\n",
                                      encoding="utf-8")
    assert split.read_pairs(str(tmp_path)) == PAIRS  # the attribution column and a line without a tab dropped
    done = subprocess.run([sys.executable, str(RECIPE / "split.py"), str(tmp_path / "nowhere"), str(tmp_path / "raw")],
                          capture_output=True, text=True)
    assert done.returncode != 0 and done.stderr.strip().splitlines() == [
        f"split.py: error: {tmp_path / 'nowhere'} holds no deu.txt (Tatoeba's English<TAB>German pairs)"]
    assert not (tmp_path / "raw").exists()


@pytest.fixture(scope="module")
def recipe_run(tmp_path_factory):
    """run.sh on 3,000 toy pairs (200 test, 200 valid), transformer_tiny on the CPU, 150 updates,
    validating and saving every 2nd epoch (the recipe's 10 scaled to this corpus): stopped by
    TRAIN_TIMEOUT=1 (seqkit-train needs longer than that to start: a timing-free stop; on a quiet CPU
    the whole training takes under 10 s), then the same command again."""
    root = tmp_path_factory.mktemp("tatoeba")
    make_corpus(str(root / "toy"), 3000, 0, 0, seed=1)
    de = (root / "toy" / "train.de").read_text(encoding="utf-8").splitlines()
    en = (root / "toy" / "train.en").read_text(encoding="utf-8").splitlines()
    (root / "deu").mkdir()
    (root / "deu" / "deu.txt").write_text("".join(f"{e}\t{d}\n" for d, e in zip(de, en)), encoding="utf-8")
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
           "DATA": str(root / "deu"), "VOCAB": "300", "TEST_PAIRS": "200", "VALID_PAIRS": "200"}
    cpu = ["common.device=cpu", "common.precision=fp32", "common.threads=2", "model=transformer_tiny",
           "model.dropout=0.1", "optimizer.lr=2e-3", "lr_scheduler.warmup_updates=100", "dataset.max_tokens=2048",
           "optimization.stop_time_hours=0", "optimization.max_update=150", "checkpoint.save_interval=2",
           "common.log_interval=50", "common.log_format=json"]
    run = ["bash", str(RECIPE / "run.sh"), str(root / "w"), *cpu]
    stopped = subprocess.run(run, capture_output=True, text=True, env={**env, "TRAIN_TIMEOUT": "1"}, timeout=600)
    done = subprocess.run(run, capture_output=True, text=True, env=env, timeout=600)  # the same command resumes
    return stopped, done, root / "w"


# 150 updates of transformer_tiny on these toy pairs: 65.97 when written (a model that outputs garbage: under 5)
RECIPE_BLEU_FLOOR = 50.0


def test_the_recipe_translates_test_with_the_best_checkpoint(recipe_run):
    stopped, done, work = recipe_run
    assert stopped.returncode == 3 and stopped.stderr.splitlines()[-1].startswith(
        "run.sh: training stopped after TRAIN_TIMEOUT=1 s"), stopped.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
    assert {"train.log", "generate-test.log", "score.txt"} <= set(os.listdir(work))
    lines = (work / "raw" / "test.de").read_text(encoding="utf-8").splitlines()
    assert len(lines) >= 200 and "translated" in (work / "generate-test.log").read_text(encoding="utf-8")
    bleu = [line for line in (work / "score.txt").read_text(encoding="utf-8").splitlines() if line.startswith("BLEU = ")]
    assert len(bleu) == 1 and float(bleu[0].split()[2]) >= RECIPE_BLEU_FLOOR, bleu
    with open(work / "checkpoints" / "train_log.jsonl", encoding="utf-8") as f:
        valid = [r for r in map(json.loads, f) if r["tag"] == "valid"]
    epochs = [r["epoch"] for r in valid]
    assert epochs[:-1] == list(range(2, 2 * len(epochs) - 1, 2)) and valid[-1]["update"] == 150
    assert valid[-1]["best_loss"] == min(r["loss"] for r in valid)
