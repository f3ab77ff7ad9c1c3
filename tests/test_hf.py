"""HuggingFace checkpoints in and out (seqkit.hf): tiny models built by ``transformers`` itself,
imported, compared (logits within 1e-5, greedy and beam search token for token, tokenization), exported
back bit for bit; seqkit-trained models exported and compared; bad input in one line each."""

import json
import os

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from hf_fixtures import fine_tune_two_updates, make_gpt2, shared_lines, toy_english  # noqa: E402
from test_bad_input import assert_one_line_error  # noqa: E402

from seqkit.cli.export import main as export_cli  # noqa: E402
from seqkit.cli.import_hf import main as import_cli  # noqa: E402


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """(HF folder, imported seqkit checkpoint)."""
    from seqkit.hf.convert import import_folder

    root = tmp_path_factory.mktemp("gpt2")
    folder = make_gpt2(str(root / "hf"), toy_english())
    return folder, import_folder(folder, str(root / "gpt2.pt"))


def hf_ids(path):
    from seqkit.core import checkpoints

    return checkpoints.load(path)["hf"]["vocab"]["hf_ids"]


def test_imported_gpt2_gives_hf_logits(gpt2):
    from transformers import GPT2LMHeadModel

    from seqkit.core.checkpoints import load_for_inference

    folder, path = gpt2
    hf = GPT2LMHeadModel.from_pretrained(folder).eval()
    task, model = load_for_inference(path)
    ids = torch.tensor(hf_ids(path))
    known = ids >= 0
    for line in toy_english(20, seed=7):
        src = task.encode_source(line)  # </s> then the pieces: GPT-2's <|endoftext|> first
        with torch.no_grad():
            ours = model.eval()(torch.tensor([src]), torch.tensor([len(src)]))[0]  # (T, V)
            theirs = hf(ids[torch.tensor([src])]).logits[0]  # (T, W)
        assert (ours[:, known] - theirs[:, ids[known]]).abs().max() < 1e-5
        assert torch.isinf(ours[:, ~known]).all() and (ours[:, ~known] < 0).all()  # GPT-2 has no pad, <s>, <unk>


@pytest.mark.parametrize("beam", [1, 4])
def test_imported_gpt2_searches_as_hf_generate(gpt2, beam):
    from transformers import GPT2LMHeadModel

    from seqkit.generation.translator import Translator

    folder, path = gpt2
    hf = GPT2LMHeadModel.from_pretrained(folder).eval()
    ids = hf_ids(path)
    eos = ids[2]
    translator = Translator.from_checkpoint(path, beam=beam, max_len_b=12, min_len=1, lenpen=1.0)
    finished, lengths = 0, []
    for line in toy_english(20, seed=3):
        src = translator.task.encode_source(line)
        ours = [ids[i] for i in next(translator.generate_batches([src], 1))["hypos"][0]["tokens"].tolist()]
        theirs = hf.generate(torch.tensor([[ids[i] for i in src]]), num_beams=beam, do_sample=False, max_new_tokens=12,
                             min_new_tokens=1, early_stopping=True, length_penalty=1.0, pad_token_id=eos)
        theirs = theirs[0, len(src):].tolist()
        finished += theirs[-1] == eos
        lengths.append(len(theirs))
        if len(theirs) == 12 and theirs[-1] != eos:  # at the length limit seqkit ends with eos, HF stops
            ours = ours[:-1]
        assert ours == theirs, line
    # most searches end on their own (where both engines' rules are the same), at varied lengths
    assert finished >= 12 and len(set(lengths)) >= 3


def test_tokenization_as_autotokenizer(gpt2):
    from transformers import AutoTokenizer

    from seqkit.core.checkpoints import load_for_inference

    folder, path = gpt2
    theirs = AutoTokenizer.from_pretrained(folder)
    task, _ = load_for_inference(path)
    ids = hf_ids(path)
    lines = shared_lines(300) or toy_english(300, seed=5)
    for line in lines:
        ours = [ids[i] for i in task.encode_source(line)]  # an imported GPT-2: no <|endoftext|> before the text
        assert ours == theirs(line)["input_ids"], line
        assert task.tokenizer().decode(task.tokenizer().encode(line)) == theirs.decode(theirs(line)["input_ids"])


def test_import_export_round_trip_is_bit_exact(gpt2, tmp_path, run_cli):
    from safetensors.torch import load_file

    folder, path = gpt2
    r = run_cli(export_cli, ["format=huggingface", f"path={path}", f"output={tmp_path / 'out'}"])
    assert r.code == 0, r.err
    before, after = load_file(os.path.join(folder, "model.safetensors")), load_file(str(tmp_path / "out" / "model.safetensors"))
    assert set(before) == set(after)
    for k in before:
        assert before[k].dtype == after[k].dtype and torch.equal(before[k], after[k]), k
    old, new = (json.load(open(os.path.join(p, "config.json"))) for p in (folder, tmp_path / "out"))
    skip = {"transformers_version", "dtype", "torch_dtype"}
    assert {k: v for k, v in old.items() if k not in skip} == {k: v for k, v in new.items() if k not in skip}
    with open(os.path.join(folder, "tokenizer.json")) as a, open(tmp_path / "out" / "tokenizer.json") as b:
        assert a.read() == b.read()


def test_exported_gpt_loads_in_transformers_with_the_same_logits(tmp_path, toy_data, tiny_train_args, run_cli):
    """A seqkit-trained GPT (its own vocabulary: HF ids = seqkit ids) exported as GPT2LMHeadModel."""
    from transformers import GPT2LMHeadModel

    from seqkit.core.checkpoints import load_for_inference

    path = train_tiny_gpt(tmp_path, toy_data, tiny_train_args, run_cli)
    r = run_cli(export_cli, ["format=huggingface", f"path={path}", f"output={tmp_path / 'hf'}"])
    assert r.code == 0, r.err
    hf = GPT2LMHeadModel.from_pretrained(str(tmp_path / "hf")).eval()
    task, model = load_for_inference(path)
    src = torch.tensor([task.encode_source(line) for line in ("ein Hund läuft", "eine Katze schläft")])
    with torch.no_grad():
        assert (model.eval()(src, torch.tensor([src.size(1)] * 2)) - hf(src).logits).abs().max() < 1e-5
    config = json.load(open(tmp_path / "hf" / "config.json"))
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (2, 2, 0)
    card = (tmp_path / "hf" / "README.md").read_text()  # the model card, from the checkpoint itself
    assert "GPT2LMHeadModel" in card and "| updates | 3 (epoch" in card and '"name": "gpt_tiny"' not in card
    assert '"activation": "gelu_tanh"' in card


def train_tiny_gpt(tmp_path, toy_data, tiny_train_args, run_cli):
    from seqkit.cli.preprocess import main as preprocess
    from seqkit.cli.train import main as train

    raw, _ = toy_data
    r = run_cli(preprocess, ["task=language_modeling", f"trainpref={raw}/train.de", f"validpref={raw}/valid.de",
                             f"destdir={tmp_path / 'lm-bin'}", "tokenizer=space"])
    assert r.code == 0, r.err
    r = run_cli(train, ["task=language_modeling", f"task.data={tmp_path / 'lm-bin'}", "model=gpt_tiny",
                        "model.activation=gelu_tanh", "task.tokens_per_sample=32", "optimization.max_update=3",
                        f"checkpoint.save_dir={tmp_path / 'ck'}", *[a for a in tiny_train_args if not a.startswith(
                            ("task", "model", "optimization.max_update", "checkpoint.save_dir"))]])
    assert r.code == 0, r.err
    return str(tmp_path / "ck" / "checkpoint_last.pt")


def test_slow_tokenizer_files_are_read_through_transformers(tmp_path):
    from transformers import AutoTokenizer

    from seqkit.core.checkpoints import load_for_inference
    from seqkit.hf.convert import import_folder

    folder = make_gpt2(str(tmp_path / "hf"), toy_english(), slow_files=True)
    assert not os.path.exists(os.path.join(folder, "tokenizer.json"))
    path = import_folder(folder, str(tmp_path / "gpt2.pt"))
    task, _ = load_for_inference(path)
    ids, theirs = hf_ids(path), AutoTokenizer.from_pretrained(folder)
    for line in toy_english(50, seed=9):
        assert [ids[i] for i in task.encode_source(line)] == theirs(line)["input_ids"]


def test_untied_gpt2_and_generate_cli(tmp_path, run_cli):
    from transformers import GPT2LMHeadModel

    from seqkit.cli.generate import main as generate
    from seqkit.core.checkpoints import load_for_inference
    from seqkit.hf.convert import import_folder

    folder = make_gpt2(str(tmp_path / "hf"), toy_english(), tie=False, activation_function="relu")
    path = import_folder(folder, str(tmp_path / "gpt2.pt"))
    task, model = load_for_inference(path)
    assert not model.cfg.share_input_output_embed and model.cfg.activation == "relu"
    hf = GPT2LMHeadModel.from_pretrained(folder).eval()
    ids = torch.tensor(hf_ids(path))
    src = task.encode_source("a dog runs in the park")
    with torch.no_grad():
        ours = model.eval()(torch.tensor([src]), torch.tensor([len(src)]))[0]
        theirs = hf(ids[torch.tensor([src])]).logits[0]
    assert (ours[:, ids >= 0] - theirs[:, ids[ids >= 0]]).abs().max() < 1e-5
    r = run_cli(generate, [f"path={path}", "input=-", "generation.beam=2", "generation.max_len_b=5"], stdin="a dog\n")
    assert r.code == 0, r.err
    assert any(line.startswith("H-0\t") for line in r.out.splitlines())


# -- bad input: one line, exit 1, nothing written --------------------------------------------------
def _break(folder, how):
    if how == "no_config":
        os.remove(os.path.join(folder, "config.json"))
    elif how == "architecture":
        config = json.load(open(os.path.join(folder, "config.json")))
        config["architectures"] = ["GPTNeoXForCausalLM"]
        json.dump(config, open(os.path.join(folder, "config.json"), "w"))
    elif how == "blocking_field":
        config = json.load(open(os.path.join(folder, "config.json")))
        config["scale_attn_by_inverse_layer_idx"] = True
        json.dump(config, open(os.path.join(folder, "config.json"), "w"))
    elif how == "vocab_size":
        config = json.load(open(os.path.join(folder, "config.json")))
        config["vocab_size"] = 100
        json.dump(config, open(os.path.join(folder, "config.json"), "w"))
    elif how == "missing_shard":
        os.rename(os.path.join(folder, "model.safetensors"), os.path.join(folder, "model-00001-of-00002.safetensors"))
        index = {"weight_map": {"transformer.wte.weight": "model-00001-of-00002.safetensors",
                                "transformer.wpe.weight": "model-00002-of-00002.safetensors"}}
        json.dump(index, open(os.path.join(folder, "model.safetensors.index.json"), "w"))
    elif how == "no_tokenizer":
        for name in ("tokenizer.json", "tokenizer_config.json"):
            os.remove(os.path.join(folder, name))


@pytest.mark.parametrize("how, fragments", [
    ("no_config", ["config.json"]),
    ("architecture", ["GPTNeoXForCausalLM", "GPT2LMHeadModel"]),
    ("blocking_field", ["scale_attn_by_inverse_layer_idx"]),
    ("vocab_size", ["vocabulary size disagrees"]),
    ("missing_shard", ["model-00002-of-00002.safetensors"]),
    ("no_tokenizer", ["no tokenizer files"]),
])
def test_bad_folders_are_one_line(tmp_path, run_cli, how, fragments):
    folder = make_gpt2(str(tmp_path / "hf"), toy_english(100))
    _break(folder, how)
    out = tmp_path / "out.pt"
    r = run_cli(import_cli, [f"path={folder}", f"output={out}"])
    assert_one_line_error(r, "seqkit-import", *fragments, log_lines_allowed=True)
    assert not out.exists()


def test_a_model_without_hf_counterpart_is_refused(tmp_path, toy_data, tiny_train_args, run_cli):
    from seqkit.cli.preprocess import main as preprocess
    from seqkit.cli.train import main as train

    raw, _ = toy_data
    run_cli(preprocess, ["task=language_modeling", f"trainpref={raw}/train.de", f"destdir={tmp_path / 'bin'}",
                         "tokenizer=space"])
    r = run_cli(train, ["task=language_modeling", f"task.data={tmp_path / 'bin'}", "model=lstm_lm_tiny",
                        "task.tokens_per_sample=16", "optimization.max_update=1", "dataset.valid_subset=''",
                        f"checkpoint.save_dir={tmp_path / 'ck'}", *[a for a in tiny_train_args if not a.startswith(
                            ("task", "model", "optimization.max_update", "checkpoint.save_dir", "dataset.valid"))]])
    assert r.code == 0, r.err
    r = run_cli(export_cli, ["format=huggingface", f"path={tmp_path / 'ck' / 'checkpoint_last.pt'}",
                             f"output={tmp_path / 'hf'}"])
    assert_one_line_error(r, "seqkit-export", "LSTM", "no HuggingFace counterpart", log_lines_allowed=True)
    assert not (tmp_path / "hf").exists()


def test_missing_extra_is_one_line(tmp_path, run_cli, monkeypatch):
    import sys

    folder = make_gpt2(str(tmp_path / "hf"), toy_english(100))
    for name in ("safetensors", "safetensors.torch"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    r = run_cli(import_cli, [f"path={folder}", f"output={tmp_path / 'x.pt'}"])
    assert_one_line_error(r, "seqkit-import", "safetensors is not installed", "pip install 'seqkit[hf]'",
                          log_lines_allowed=True)
    assert not (tmp_path / "x.pt").exists()


@pytest.mark.parametrize("mode", ["full", "lora"])
def test_imported_gpt2_fine_tunes_as_a_classifier(gpt2, tmp_path, mode):
    """model=pretrained_classifier takes an imported checkpoint as model.path, in any adaptation mode."""
    fine_tune_two_updates(gpt2[1], tmp_path, mode)


@pytest.mark.parametrize("kind", ["sentencepiece_bpe", "sentencepiece_unigram", "wordpiece"])
def test_exported_seqkit_tokenizer_gives_seqkit_ids(tmp_path, toy_data, tiny_train_args, run_cli, kind):
    """A seqkit-trained model's sentencepiece or WordPiece tokenizer exported as tokenizer.json over
    seqkit's dictionary: AutoTokenizer gives seqkit's ids, unknown characters included."""
    from transformers import AutoTokenizer

    from seqkit.cli.preprocess import main as preprocess
    from seqkit.cli.train import main as train
    from seqkit.core.checkpoints import load_for_inference

    raw, _ = toy_data
    r = run_cli(preprocess, ["task=language_modeling", f"trainpref={raw}/train.en", f"destdir={tmp_path / 'bin'}",
                             f"tokenizer={kind}", f"tokenizer.vocab_size={70 if kind.endswith('unigram') else 120}",
                             *(["tokenizer.num_threads=1"] if kind.startswith("sentencepiece") else [])])
    assert r.code == 0, r.err
    r = run_cli(train, ["task=language_modeling", f"task.data={tmp_path / 'bin'}", "model=gpt_tiny", "task.tokens_per_sample=32",
                        "optimization.max_update=1", "dataset.valid_subset=''", f"checkpoint.save_dir={tmp_path / 'ck'}",
                        *[a for a in tiny_train_args if not a.startswith(("task", "model", "optimization", "checkpoint"))]])
    assert r.code == 0, r.err
    path = str(tmp_path / "ck" / "checkpoint_last.pt")
    r = run_cli(export_cli, ["format=huggingface", f"path={path}", f"output={tmp_path / 'hf'}"])
    assert r.code == 0, r.err
    theirs = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    task, _ = load_for_inference(path)
    lines = (shared_lines(300) or []) + toy_english(50, seed=11)
    if kind.endswith("unigram"):  # a "<unk>" written in the text: one vocabulary entry to HF's unigram, pieces to
        lines = [line for line in lines if "<unk>" not in line]  # sentencepiece (the README says so)
    differ = [line for line in lines if task.encode_source(line)[1:] != theirs(line)["input_ids"]]
    assert not differ, (len(differ), differ[:3])
    assert len(lines) >= 100
