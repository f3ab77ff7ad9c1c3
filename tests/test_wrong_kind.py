"""A checkpoint or a data folder of the wrong kind (issue 60): one line naming the real cause
(what the checkpoint is, what the folder is), exit 1, nothing on stdout. And the language-model
settings seqkit-eval-lm used to pass over: its blocks follow the model unless given, a given block
takes effect, a setting the model trained with (eos_prefix) is refused when it differs."""

import json

import pytest
from label_fixtures import (one_line_error, single, single_ckpt, tagged, tagged_ckpt, tiny_translation,  # noqa: F401  (fixtures)
                            translation_ckpt)
from transfer_fixtures import binarize, make_text, pretrain

from seqkit.cli.eval_lm import main as eval_lm
from seqkit.cli.generate import main as generate
from seqkit.preprocess.text import PreprocessConfig, preprocess
from seqkit.tokenizers.char import CharConfig

THREADS = "common.threads=1"


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """A word-level GPT (2 updates on blocks of 24) over make_text's words, beside: its folder
    (lm/), a character-level folder of the same text (char/) and a classification folder in its
    vocabulary (cls/, labels 0 and 1)."""
    root = make_text(tmp_path_factory.mktemp("wrong_kind"))
    pretrain(root, "gpt", root / "gpt", updates=2)
    preprocess(PreprocessConfig(task="language_modeling", trainpref=str(root / "train.txt"),
                                validpref=str(root / "valid.txt"), destdir=str(root / "char"), tokenizer=CharConfig()))
    binarize(root, root / "cls", root / "gpt" / "checkpoint_last.pt")
    return root


@pytest.fixture(scope="module")
def convs2s_ckpt(toy_data, tmp_path_factory, tiny_train_args):
    return tiny_translation(toy_data[1], tmp_path_factory.mktemp("convs2s") / "ck", tiny_train_args, "model=convs2s_tiny")


def refused(r, prog, *fragments):
    """One error line holding every fragment, and nothing on stdout."""
    line = one_line_error(r, prog, *fragments, log_lines_allowed=True)
    assert r.out == "", r.out
    return line


def eval_json(r):
    assert r.code == 0, r.err
    return json.loads(r.out.strip().splitlines()[-1])


# -- 1. seqkit-eval-lm names the kind of checkpoint it was given ---------------------------------------
@pytest.mark.parametrize("which, extra, fragment", [
    ("translation_ckpt", [], "is a translation model (de→en)"),
    ("convs2s_ckpt", ["quantize=int8"], "is a translation model (de→en)"),
    ("single_ckpt", [], "is a sentence classifier (3 labels)"),
    ("tagged_ckpt", [], "is a tagger ("),
])
def test_eval_lm_names_the_kind_of_checkpoint(request, toy_data, run_cli, which, extra, fragment):
    path = request.getfixturevalue(which)
    if path.is_dir():
        path = path / "checkpoint_last.pt"
    r = run_cli(eval_lm, [f"path={path}", f"task.data={toy_data[1]}", THREADS, *extra])
    line = refused(r, "seqkit-eval-lm", fragment, "seqkit-eval-lm scores language models")
    assert "context_window" not in line


# -- 2. the default block follows the model -------------------------------------------------------------
def test_eval_lm_of_a_seqkit_gpt_exported_and_imported_back(tmp_path, toy_data, tiny_train_args, run_cli):
    """Trained on blocks of 32 with 256 learned positions, exported to HuggingFace and imported:
    no tokens_per_sample= given, the blocks are the imported model's positions (was: the task's
    default 512, refused as longer than the positions)."""
    pytest.importorskip("transformers")
    from seqkit.cli.export import main as export_cli
    from seqkit.cli.import_hf import main as import_cli
    from seqkit.cli.preprocess import main as preprocess_cli
    from seqkit.cli.train import main as train_cli

    raw, _ = toy_data
    r = run_cli(preprocess_cli, ["task=language_modeling", f"trainpref={raw}/train.en", f"validpref={raw}/valid.en",
                                 f"destdir={tmp_path / 'bin'}", "tokenizer=sentencepiece_bpe",
                                 "tokenizer.vocab_size=120", "tokenizer.num_threads=1"])
    assert r.code == 0, r.err
    r = run_cli(train_cli, ["task=language_modeling", f"task.data={tmp_path / 'bin'}", "model=gpt_tiny",
                            "task.tokens_per_sample=32", "optimization.max_update=1", "dataset.valid_subset=''",
                            f"checkpoint.save_dir={tmp_path / 'ck'}",
                            *[a for a in tiny_train_args if not a.startswith(("task", "model", "optimization"))]])
    assert r.code == 0, r.err
    r = run_cli(export_cli, ["format=huggingface", f"path={tmp_path / 'ck' / 'checkpoint_last.pt'}",
                             f"output={tmp_path / 'hf'}"])
    assert r.code == 0, r.err
    r = run_cli(import_cli, [f"path={tmp_path / 'hf'}", f"output={tmp_path / 'back.pt'}"])
    assert r.code == 0, r.err
    out = eval_json(run_cli(eval_lm, [f"path={tmp_path / 'back.pt'}", f"task.data={tmp_path / 'bin'}",
                                      "gen_subset=valid", THREADS]))
    assert out["tokens_per_sample"] == 256 and out["context_window"] == 0
    # the original: its own training block
    original = eval_json(run_cli(eval_lm, [f"path={tmp_path / 'ck' / 'checkpoint_last.pt'}",
                                           f"task.data={tmp_path / 'bin'}", "gen_subset=valid", THREADS]))
    assert original["tokens_per_sample"] == 32 and original["tokens"] == out["tokens"]


def test_eval_lm_default_block_leaves_room_for_the_context(lm, run_cli):
    """Trained on blocks of 24 (learned positions): with context_window=8 and no block given, blocks
    of 16; given, a block that passes the trained positions is still refused."""
    base = [f"path={lm / 'gpt' / 'checkpoint_last.pt'}", f"task.data={lm / 'lm'}", "gen_subset=valid", THREADS]
    out = eval_json(run_cli(eval_lm, [*base, "context_window=8"]))
    assert (out["tokens_per_sample"], out["context_window"]) == (16, 8)
    refused(run_cli(eval_lm, [*base, "context_window=8", "tokens_per_sample=24"]), "seqkit-eval-lm",
            "= 32 reaches learned positions the model never trained")


# -- 3. task.* settings: used or refused --------------------------------------------------------------
def test_eval_lm_task_settings_take_effect_or_are_refused(lm, run_cli):
    base = [f"path={lm / 'gpt' / 'checkpoint_last.pt'}", f"task.data={lm / 'lm'}", "gen_subset=valid", THREADS]
    default = eval_json(run_cli(eval_lm, base))
    assert default["tokens_per_sample"] == 24
    eight = eval_json(run_cli(eval_lm, [*base, "task.tokens_per_sample=8"]))
    assert eight["tokens_per_sample"] == 8 and eight["tokens"] == default["tokens"]
    assert eight["ppl"] != default["ppl"]  # shorter blocks: less context for the same tokens
    assert eval_json(run_cli(eval_lm, [*base, "tokens_per_sample=8"]))["ppl"] == eight["ppl"]
    windowed = eval_json(run_cli(eval_lm, [*base, "task.context_window=4", "task.tokens_per_sample=8"]))
    assert (windowed["tokens_per_sample"], windowed["context_window"]) == (8, 4)
    eos = eval_json(run_cli(eval_lm, [*base, "task.sample_break_mode=eos"]))
    assert eos["ppl"] != default["ppl"] and eos["tokens"] == default["tokens"]
    refused(run_cli(eval_lm, [*base, "tokens_per_sample=8", "task.tokens_per_sample=9"]), "seqkit-eval-lm",
            "tokens_per_sample=8 and task.tokens_per_sample=9 disagree")
    refused(run_cli(eval_lm, [*base, "task.eos_prefix=false"]), "seqkit-eval-lm",
            "task.eos_prefix=false", "trained with task.eos_prefix=true", "drop it")
    assert eval_json(run_cli(eval_lm, [*base, "task.eos_prefix=true"]))["ppl"] == default["ppl"]  # its own: fine
    refused(run_cli(eval_lm, [*base, "task=masked_lm"]), "seqkit-eval-lm", "is a language_modeling checkpoint",
            "drop task=")


# -- 4. a folder binarized with another dictionary --------------------------------------------------------
def test_eval_lm_refuses_a_folder_of_another_dictionary(lm, run_cli):
    ck = lm / "gpt" / "checkpoint_last.pt"
    refused(run_cli(eval_lm, [f"path={ck}", f"task.data={lm / 'char'}", "gen_subset=valid", THREADS]),
            "seqkit-eval-lm", "another dictionary (char tokenizer, ", "than this checkpoint's (space tokenizer, ",
            "vocab_from=")
    refused(run_cli(eval_lm, [f"path={ck}", f"task.data={lm / 'cls'}", "gen_subset=valid", THREADS]),
            "seqkit-eval-lm", "is a classification data folder (2 labels)", "a language model (space tokenizer")


# -- 5. seqkit-generate on a data folder of another kind --------------------------------------------------
@pytest.mark.parametrize("ckpt, folder, fragments", [
    ("single_ckpt", "tagged", ["is a tagging data folder (", "this checkpoint is a sentence classifier (3 labels)"]),
    ("single_ckpt", "toy_data", ["is a translation data folder (de→en)", "sentence classifier"]),
    ("translation_ckpt", "single", ["is a classification data folder (3 labels)",
                                    "this checkpoint is a translation model (de→en)"]),
    ("tagged_ckpt", "single", ["is a classification data folder (3 labels)", "this checkpoint is a tagger"]),
])
def test_generate_names_the_folders_kind(request, run_cli, ckpt, folder, fragments):
    path = request.getfixturevalue(ckpt)
    path = path / "checkpoint_best.pt" if path.is_dir() else path
    root = request.getfixturevalue(folder)
    data = root[1] if folder == "toy_data" else root[0] / "bin"
    r = run_cli(generate, [f"path={path}", f"task.data={data}", "gen_subset=valid" if folder == "toy_data" else
                           "gen_subset=test", THREADS])
    refused(r, "seqkit-generate", *fragments)


# -- 6. a folder where a checkpoint file belongs ----------------------------------------------------------------
def test_a_folder_given_as_the_checkpoint(tmp_path, single, single_ckpt, run_cli):
    hf = tmp_path / "gpt2-hf"
    hf.mkdir()
    (hf / "config.json").write_text('{"architectures": ["GPT2LMHeadModel"]}')
    (hf / "model.safetensors").write_bytes(b"")
    (tmp_path / "empty").mkdir()
    cases = [(hf, ["is a HuggingFace folder", f"seqkit-import path={hf} output={hf}.pt"]),
             (single_ckpt, ["is a folder: name a checkpoint file in it", f"path={single_ckpt / 'checkpoint_best.pt'}"]),
             (single[0] / "bin", ["is a data folder written by seqkit-preprocess", "task.data="]),
             (tmp_path / "empty", ["is a folder, not a checkpoint file"])]
    for folder, fragments in cases:
        refused(run_cli(generate, [f"path={folder}", "input=-", THREADS], stdin="a b\n"), "seqkit-generate", *fragments)
    refused(run_cli(eval_lm, [f"path={hf}", THREADS]), "seqkit-eval-lm", "seqkit-import it first")


# -- 7. in-context classification: a verbalizer the language model does not know ------------------------
def test_in_context_verbalizer_outside_the_vocabulary(lm, run_cli):
    r = run_cli(generate, [f"path={lm / 'gpt' / 'checkpoint_last.pt'}", f"task.data={lm / 'cls'}", "gen_subset=valid",
                           "icl.verbalizers=[v1,great]", "icl.shots=0", THREADS])
    refused(r, "seqkit-generate", "icl.verbalizers: 'great' is not in the language model's vocabulary", "<unk>")
