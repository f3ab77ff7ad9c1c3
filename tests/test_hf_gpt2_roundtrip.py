"""An imported GPT-2 reads the ids its own tokenizer gives (no ``</s>`` before a prompt, as
``transformers`` feeds it): seqkit-generate's P- scores and the language-model data's log-probs equal
transformers' on a tiny random GPT-2. A seqkit-trained GPT exported and imported back gives the
original's log-probs. The HF families share one activation map."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from hf_fixtures import make_gpt2, toy_english  # noqa: E402
from test_bad_input import assert_one_line_error  # noqa: E402

from seqkit.cli.export import main as export_cli  # noqa: E402
from seqkit.cli.import_hf import main as import_cli  # noqa: E402
from test_hf import gpt2, hf_ids  # noqa: E402,F401  (an imported tiny GPT-2: a fixture)

PROMPTS = ["a dog runs in the park", "the cat sleeps", "where is my"]


def hf_log2probs(hf, prompt, continuation):
    """transformers' log2-probability of each continuation id after the prompt ids."""
    ids = torch.tensor([prompt + continuation])
    with torch.no_grad():
        lprobs = torch.log_softmax(hf(ids).logits[0].double(), dim=-1)  # (T, W)
    rows = torch.arange(len(prompt) - 1, ids.size(1) - 1)
    return (lprobs[rows, ids[0, len(prompt):]] / math.log(2)).tolist()


@pytest.fixture(scope="module")
def gpt2_24(tmp_path_factory):
    """(HF folder, imported checkpoint) of another shape: 24 wide, 3 heads of 8, 2 layers."""
    from seqkit.hf.convert import import_folder

    root = tmp_path_factory.mktemp("gpt2_24")
    folder = make_gpt2(str(root / "hf"), toy_english(), n_embd=24, n_head=3, n_layer=2)
    return folder, import_folder(folder, str(root / "gpt2.pt"))


@pytest.mark.parametrize("which", ["gpt2", "gpt2_24"])
def test_imported_gpt2_p_scores_are_transformers(which, request, run_cli):
    """seqkit-generate's P- lines (bits per token, printed to 4 places) and greedy texts on an
    imported GPT-2 are those of transformers on AutoTokenizer's ids (no <|endoftext|> before the
    prompt), to 1e-4."""
    from transformers import AutoTokenizer, GPT2LMHeadModel

    from seqkit.cli.generate import main as generate
    from seqkit.generation.translator import Translator

    folder, path = request.getfixturevalue(which)
    hf = GPT2LMHeadModel.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    ids = hf_ids(path)
    translator = Translator.from_checkpoint(path, beam=1, max_len_b=8, min_len=1)
    assert [ids[i] for i in translator.task.encode_source(PROMPTS[0])] == tok(PROMPTS[0])["input_ids"]
    r = run_cli(generate, [f"path={path}", "input=-", "generation.beam=1", "generation.max_len_b=8",
                           "generation.min_len=1", "common.threads=1"], stdin="\n".join(PROMPTS) + "\n")
    assert r.code == 0, r.err
    p_lines = {int(line.split("\t")[0][2:]): [float(x) for x in line.split("\t")[1].split()]
               for line in r.out.splitlines() if line.startswith("P-")}
    h_lines = {int(line.split("\t")[0][2:]): line.split("\t")[2] for line in r.out.splitlines() if line.startswith("H-")}
    assert sorted(p_lines) == list(range(len(PROMPTS)))
    for i, prompt in enumerate(PROMPTS):
        prompt_ids = tok(prompt)["input_ids"]
        hypo = next(translator.generate_batches([translator.task.encode_source(prompt)], 1))["hypos"][0]
        ours = [ids[t] for t in hypo["tokens"].tolist()]
        theirs = hf_log2probs(hf, prompt_ids, ours)
        assert len(p_lines[i]) == len(theirs)
        assert max(abs(a - b) for a, b in zip(p_lines[i], theirs)) < 1e-4, (prompt, p_lines[i], theirs)
        greedy = hf.generate(torch.tensor([prompt_ids]), do_sample=False, max_new_tokens=8, min_new_tokens=1,
                             pad_token_id=tok.eos_token_id)[0, len(prompt_ids):].tolist()
        if greedy[-1] != tok.eos_token_id:  # at the length limit seqkit ends with eos, HF stops
            ours = ours[:-1]
        assert ours == greedy, prompt
        assert i in h_lines


def test_eos_prefix_switch_gives_the_old_prompt(gpt2, tmp_path):
    """eos_prefix=true at import: </s> (<|endoftext|>) before every prompt, and the first token's
    score is transformers' with <|endoftext|> prepended."""
    from transformers import AutoTokenizer, GPT2LMHeadModel

    from seqkit.core.checkpoints import load_for_inference
    from seqkit.hf.convert import import_folder

    folder, _ = gpt2
    path = import_folder(folder, str(tmp_path / "prefixed.pt"), eos_prefix=True)
    task, model = load_for_inference(path)
    tok, hf = AutoTokenizer.from_pretrained(folder), GPT2LMHeadModel.from_pretrained(folder).eval()
    ids = hf_ids(path)
    src = task.encode_source(PROMPTS[1])
    assert [ids[i] for i in src] == [tok.eos_token_id] + tok(PROMPTS[1])["input_ids"]
    with torch.no_grad():
        ours = torch.log_softmax(model.eval()(torch.tensor([src]), torch.tensor([len(src)]))[0, 0].double(), -1)
    theirs = hf_log2probs(hf, [tok.eos_token_id], [tok(PROMPTS[1])["input_ids"][0]])[0]
    assert abs(float(ours[src[1]]) / math.log(2) - theirs) < 1e-4


def test_lm_data_of_an_imported_gpt2_is_scored_as_transformers(gpt2):
    """The language-model blocks (seqkit-eval-lm, fine-tuning) of an imported GPT-2: no </s> before
    the split's first token (read, not scored); every other token's log-prob is transformers'."""
    from transformers import GPT2LMHeadModel

    from seqkit.core.checkpoints import load_for_inference

    folder, path = gpt2
    task, model = load_for_inference(path)
    assert task.cfg.eos_prefix is False
    hf = GPT2LMHeadModel.from_pretrained(folder).eval()
    ids = hf_ids(path)
    d = task.dictionary
    lines = [list(d.encode(task.tokenizer().encode(line), append_eos=True)) for line in toy_english(6, seed=4)]
    stream = np.array([t for line in lines for t in line], dtype=np.int64)
    data = SimpleNamespace(tokens=stream, sizes=np.array([len(line) for line in lines]))
    from seqkit.data.lm_dataset import TokenBlockDataset

    ds = TokenBlockDataset(data, d, tokens_per_sample=len(stream), break_mode="none", eos_prefix=task.cfg.eos_prefix)
    assert ds.num_scored == len(stream) - 1
    sample = ds.collate([0])
    target = sample["target"]
    assert sample["net_input"]["src_tokens"][0].tolist() == stream[:-1].tolist()
    with torch.no_grad():
        ours = model.eval()(**sample["net_input"], target=target)[0].double() / math.log(2)  # (T,)
    theirs = hf_log2probs(hf, [ids[int(stream[0])]], [ids[t] for t in stream[1:].tolist()])
    assert (ours - torch.tensor(theirs, dtype=torch.double)).abs().max() < 1e-4
    prefixed = TokenBlockDataset(data, d, tokens_per_sample=len(stream), break_mode="none")  # seqkit's own models
    assert prefixed.num_scored == len(stream) and prefixed.collate([0])["net_input"]["src_tokens"][0, 0] == d.eos()


def test_eval_lm_of_an_imported_gpt2_is_transformers(gpt2_24, tmp_path, run_cli):
    """seqkit-preprocess vocab_from= the imported GPT-2, then seqkit-eval-lm: the tokens and the loss
    are transformers' on the text's AutoTokenizer ids, each line followed by <|endoftext|>, with
    nothing before the first (read, not scored)."""
    import json

    from transformers import AutoTokenizer, GPT2LMHeadModel

    from seqkit.cli.eval_lm import main as eval_lm
    from seqkit.cli.preprocess import main as preprocess

    folder, path = gpt2_24
    lines = toy_english(6, seed=3)
    text = tmp_path / "test.txt"
    text.write_text("\n".join(lines) + "\n")
    r = run_cli(preprocess, ["task=language_modeling", f"trainpref={text}", f"testpref={text}",
                             f"destdir={tmp_path / 'bin'}", f"vocab_from={path}"])
    assert r.code == 0, r.err
    r = run_cli(eval_lm, [f"path={path}", f"task.data={tmp_path / 'bin'}", "gen_subset=test", "tokens_per_sample=120",
                          "common.threads=1"])
    assert r.code == 0, r.err
    ours = json.loads(r.out.strip().splitlines()[-1])
    tok, hf = AutoTokenizer.from_pretrained(folder), GPT2LMHeadModel.from_pretrained(folder).eval()
    stream = [i for line in lines for i in tok(line)["input_ids"] + [tok.eos_token_id]]
    assert len(stream) <= 120
    theirs = hf_log2probs(hf, stream[:1], stream[1:])
    assert ours["tokens"] == len(stream) - 1
    assert abs(ours["loss"] + sum(theirs) / len(theirs)) < 1e-4, (ours, -sum(theirs) / len(theirs))  # (4 places)


def train_tiny_gpt(tmp_path, toy_data, tiny_train_args, run_cli):
    """A 1-update seqkit GPT over a sentencepiece BPE vocabulary (exports its tokenizer)."""
    from seqkit.cli.preprocess import main as preprocess
    from seqkit.cli.train import main as train

    raw, _ = toy_data
    r = run_cli(preprocess, ["task=language_modeling", f"trainpref={raw}/train.en", f"destdir={tmp_path / 'bin'}",
                             "tokenizer=sentencepiece_bpe", "tokenizer.vocab_size=120", "tokenizer.num_threads=1"])
    assert r.code == 0, r.err
    r = run_cli(train, ["task=language_modeling", f"task.data={tmp_path / 'bin'}", "model=gpt_tiny",
                        "task.tokens_per_sample=32", "optimization.max_update=1", "dataset.valid_subset=''",
                        f"checkpoint.save_dir={tmp_path / 'ck'}",
                        *[a for a in tiny_train_args if not a.startswith(("task", "model", "optimization", "checkpoint"))]])
    assert r.code == 0, r.err
    return str(tmp_path / "ck" / "checkpoint_last.pt")


def test_seqkit_gpt_export_import_round_trip(tmp_path, toy_data, tiny_train_args, run_cli):
    """seqkit -> export -> import: the same ids (</s> before a prompt, as the original trained) and
    the same log-probs; the specials map onto seqkit's own."""
    from seqkit.core.checkpoints import load_for_inference

    path = train_tiny_gpt(tmp_path, toy_data, tiny_train_args, run_cli)
    r = run_cli(export_cli, ["format=huggingface", f"path={path}", f"output={tmp_path / 'hf'}"])
    assert r.code == 0, r.err
    r = run_cli(import_cli, [f"path={tmp_path / 'hf'}", f"output={tmp_path / 'back.pt'}"])
    assert r.code == 0, r.err
    task, model = load_for_inference(path)
    task2, model2 = load_for_inference(str(tmp_path / "back.pt"))
    assert task2.cfg.eos_prefix is True and task2.dictionary.symbols == task.dictionary.symbols
    assert hf_ids(str(tmp_path / "back.pt")) == list(range(len(task.dictionary)))
    for line in toy_english(10, seed=2):
        src = task.encode_source(line)
        assert task2.encode_source(line) == src, line
        x, n = torch.tensor([src]), torch.tensor([len(src)])
        with torch.no_grad():
            a = torch.log_softmax(model.eval()(x, n), dim=-1)
            b = torch.log_softmax(model2.eval()(x, n), dim=-1)
        assert (a - b).abs().max() < 1e-5, line
    # exported again: the flag stays, the weights come back the same
    r = run_cli(export_cli, ["format=huggingface", f"path={tmp_path / 'back.pt'}", f"output={tmp_path / 'hf2'}"])
    assert r.code == 0, r.err
    import json

    config = json.load(open(tmp_path / "hf2" / "config.json"))
    assert config["seqkit_eos_prefix"] is True
    # the switch: the tokenizer's ids as they are
    r = run_cli(import_cli, [f"path={tmp_path / 'hf'}", f"output={tmp_path / 'plain.pt'}", "eos_prefix=false"])
    assert r.code == 0, r.err
    task3, _ = load_for_inference(str(tmp_path / "plain.pt"))
    assert task3.encode_source("a dog") == task.encode_source("a dog")[1:]
    # saved again by transformers (as after fine-tuning there): the flag and the specials survive
    from transformers import AutoTokenizer, GPT2LMHeadModel

    GPT2LMHeadModel.from_pretrained(str(tmp_path / "hf")).save_pretrained(str(tmp_path / "hf3"))
    AutoTokenizer.from_pretrained(str(tmp_path / "hf")).save_pretrained(str(tmp_path / "hf3"))
    r = run_cli(import_cli, [f"path={tmp_path / 'hf3'}", f"output={tmp_path / 'back3.pt'}"])
    assert r.code == 0, r.err
    task4, model4 = load_for_inference(str(tmp_path / "back3.pt"))
    assert task4.cfg.eos_prefix is True and task4.dictionary.symbols == task.dictionary.symbols
    src = task.encode_source("a dog runs in the park")
    assert task4.encode_source("a dog runs in the park") == src
    x, n = torch.tensor([src]), torch.tensor([len(src)])
    with torch.no_grad():
        assert (model4.eval()(x, n) - model.eval()(x, n)).abs().max() < 1e-5


def test_specials_option(gpt2, tmp_path, run_cli):
    """specials=SPECIAL=TOKEN names the token that plays a seqkit special; a bad entry is one line."""
    from seqkit.core.checkpoints import load_for_inference

    folder, _ = gpt2
    r = run_cli(import_cli, [f"path={folder}", f"output={tmp_path / 'a.pt'}", "specials='<unk>=a'"])
    assert r.code == 0, r.err
    task, _ = load_for_inference(str(tmp_path / "a.pt"))
    assert task.dictionary.unk() == task.dictionary.index("<unk>") and "a" not in task.dictionary.indices
    for bad, fragment in (("<mask>=a", "SPECIAL=TOKEN"), ("<unk>", "SPECIAL=TOKEN"),
                          ("<unk>=a,<s>=a", "two of seqkit's specials"), ("<unk>=no-such-token", "no-such-token")):
        r = run_cli(import_cli, [f"path={folder}", f"output={tmp_path / 'b.pt'}", f"specials='{bad}'"])
        assert_one_line_error(r, "seqkit-import", fragment)
    r = run_cli(import_cli, [f"path={folder}", f"output={tmp_path / 'b.pt'}", "eos_prefix=maybe"])
    assert r.code != 0 and "Traceback" not in r.err


def test_one_activation_map():
    """Every family reads and writes activations through seqkit.hf.keymap's one table."""
    from seqkit.hf import bert, electra, gpt2, keymap, seq2seq, t5

    for module in (bert, electra, gpt2, seq2seq):
        assert getattr(module, "ACTIVATIONS", keymap.ACTIVATIONS) is keymap.ACTIVATIONS, module.__name__
        assert getattr(module, "TO_HF_ACTIVATION", keymap.TO_HF_ACTIVATION) is keymap.TO_HF_ACTIVATION, module.__name__
    assert t5.ACTIVATIONS is keymap.ACTIVATIONS and t5.TO_HF_ACTIVATION is keymap.TO_HF_ACTIVATION
    assert gpt2.model_config({"n_embd": 8, "n_layer": 1, "n_head": 2, "n_positions": 8, "activation_function": "silu"},
                             SimpleNamespace(absent=torch.zeros(1, dtype=torch.bool)))["activation"] == "silu"
    with pytest.raises(Exception, match="activation_function='tanh'"):
        gpt2.model_config({"n_embd": 8, "n_layer": 1, "n_head": 2, "n_positions": 8, "activation_function": "tanh"},
                          SimpleNamespace(absent=torch.zeros(1, dtype=torch.bool)))


@pytest.mark.parametrize("eos_prefix", [True, False])
def test_training_on_from_an_imported_gpt2_names_its_eos_prefix(gpt2, tmp_path, run_cli, eos_prefix):
    """checkpoint.restore_file= takes weights only: a run over an imported GPT-2 (read without </s>
    first) that keeps the default task.eos_prefix=true says, in one warning line, how to read the
    ids the model was trained on; with task.eos_prefix=false it says nothing."""
    from seqkit.cli.preprocess import main as preprocess
    from seqkit.cli.train import main as train
    from seqkit.core import checkpoints

    folder, path = gpt2
    text = tmp_path / "text.txt"
    text.write_text("\n".join(toy_english(8, seed=5)) + "\n")
    r = run_cli(preprocess, ["task=language_modeling", f"trainpref={text}", f"validpref={text}",
                             f"destdir={tmp_path / 'bin'}", f"vocab_from={path}"])
    assert r.code == 0, r.err
    model = [f"model.{k}={v}" for k, v in checkpoints.load(path)["cfg"]["model"].items()
             if k not in ("name", "adaptive_softmax_cutoff", "pruned_heads")]
    r = run_cli(train, ["task=language_modeling", f"task.data={tmp_path / 'bin'}", "task.tokens_per_sample=32",
                        f"task.eos_prefix={str(eos_prefix).lower()}", "model=transformer_lm", *model,
                        "criterion=cross_entropy", f"checkpoint.restore_file={path}", "optimization.max_update=1",
                        f"checkpoint.save_dir={tmp_path / 'ck'}", "common.threads=1"])
    assert r.code == 0, r.err
    warned = [line for line in r.err.splitlines() if "task.eos_prefix=false to go on reading" in line]
    assert len(warned) == (1 if eos_prefix else 0), r.err
