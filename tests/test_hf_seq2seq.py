"""HuggingFace encoder-decoders in and out (seqkit.hf.seq2seq, seqkit.hf.t5): tiny BART, Marian and T5
(v1.0: ReLU, tied, scaled output; v1.1: gated GELU, d_kv * heads != d_model, its own lm_head) models built by
``transformers`` imported and compared (logits, greedy and beam search, tokenization), exported
back bit for bit; a seqkit-trained Transformer exported as FSMT and compared the same way."""

import json
import os

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from hf_fixtures import fine_tune_two_updates, make_bart, make_marian, make_t5, shared_lines, toy_english  # noqa: E402
from test_bad_input import assert_one_line_error  # noqa: E402

from seqkit.cli.export import main as export_cli  # noqa: E402

CLASSES = {"bart": "BartForConditionalGeneration", "marian": "MarianMTModel", "fsmt": "FSMTForConditionalGeneration",
           "t5": "T5ForConditionalGeneration", "t5_v11": "T5ForConditionalGeneration"}


def make_t5_v11(folder, lines):
    """T5 v1.1's shape: gated GELU, unscaled output, d_kv 16 (4 x 16 != d_model 32), and an lm_head
    of its own (written beside ``shared``: transformers then unties them)."""
    from safetensors.torch import load_file, save_file

    make_t5(folder, lines, feed_forward_proj="gated-gelu", tie_word_embeddings=False, d_kv=16)
    weights = load_file(os.path.join(folder, "model.safetensors"))
    torch.manual_seed(1)
    weights["lm_head.weight"] = weights["shared.weight"] + 0.1 * torch.randn_like(weights["shared.weight"])
    save_file(weights, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    config = json.load(open(os.path.join(folder, "config.json")))
    config["tie_word_embeddings"] = False
    json.dump(config, open(os.path.join(folder, "config.json"), "w"), indent=2)
    return folder


@pytest.fixture(scope="module", params=["bart", "marian", "t5", "t5_v11"])
def imported(request, tmp_path_factory):
    """(kind, HF folder, imported seqkit checkpoint)."""
    from seqkit.hf.convert import import_folder

    root = tmp_path_factory.mktemp(request.param)
    make = {"bart": make_bart, "marian": make_marian, "t5": make_t5, "t5_v11": make_t5_v11}[request.param]
    folder = make(str(root / "hf"), toy_english())
    return request.param, folder, import_folder(folder, str(root / "model.pt"))


@pytest.fixture(scope="module")
def fsmt(tmp_path_factory, toy_data):
    """(HF folder, seqkit checkpoint): a seqkit Transformer (sentencepiece BPE, one dictionary)
    trained a few updates and exported as FSMT."""
    from seqkit.cli.preprocess import main as preprocess
    from seqkit.cli.train import main as train
    from seqkit.hf.convert import export_folder

    root, (raw, _) = tmp_path_factory.mktemp("fsmt"), toy_data
    assert preprocess(["source_lang=de", "target_lang=en", f"trainpref={raw}/train", f"validpref={raw}/valid",
                       f"destdir={root / 'bin'}", "joined_dictionary=true", "tokenizer=sentencepiece_bpe",
                       "tokenizer.vocab_size=120", "workers=1"]) in (0, None)
    assert train([f"task.data={root / 'bin'}", "model=transformer_tiny", "model.share_all_embeddings=true",
                  "model.dropout=0", "common.threads=1", "optimizer.lr=3e-3", "lr_scheduler=fixed",
                  "dataset.max_tokens=2048", "optimization.max_update=60", f"checkpoint.save_dir={root / 'ck'}"]) in (0, None)
    path = str(root / "ck" / "checkpoint_last.pt")
    return export_folder(path, str(root / "hf")), path


def _hf(kind, folder):
    import transformers

    return getattr(transformers, CLASSES[kind]).from_pretrained(folder).eval()


def _ids(path):
    from seqkit.core import checkpoints

    hf = checkpoints.load(path).get("hf")
    return hf["vocab"]["hf_ids"] if hf else None


def _cases(kind, folder, path):
    """(HF model, seqkit task, seqkit model, seqkit id -> HF id)."""
    from seqkit.core.checkpoints import load_for_inference

    task, model = load_for_inference(path)
    ids = _ids(path) or list(range(len(task.tgt_dict)))
    return _hf(kind, folder), task, model.eval(), torch.tensor(ids)


def _logits_agree(hf, task, model, ids, lines):
    known = ids >= 0
    start = hf.config.decoder_start_token_id
    for a, b in zip(lines, lines[1:]):
        src, tgt = task.encode_source(a), task.encode_source(b)
        prev = [task.tgt_dict.bos()] + tgt[:-1]  # seqkit's targets start from <s>; the model reads its own start
        with torch.no_grad():
            ours = model(torch.tensor([src]), torch.tensor([len(src)]), torch.tensor([prev]))[0]  # (T, V)
            # use_cache=False: FSMT builds its causal mask only then
            theirs = hf(input_ids=ids[torch.tensor([src])], use_cache=False,
                        decoder_input_ids=torch.tensor([[start] + ids[torch.tensor(tgt[:-1])].tolist()])).logits[0]
        assert (ours[:, known] - theirs[:, ids[known]]).abs().max() < 1e-5, a
        assert torch.isinf(ours[:, ~known]).all() and (ours[:, ~known] < 0).all()


def test_imported_encoder_decoders_give_hf_logits(imported):
    kind, folder, path = imported
    _logits_agree(*_cases(kind, folder, path), toy_english(12, seed=7))


def test_exported_transformer_gives_seqkit_logits_in_fsmt(fsmt, toy_data):
    folder, path = fsmt
    hf, task, model, ids = _cases("fsmt", folder, path)
    with open(os.path.join(toy_data[0], "valid.de"), encoding="utf-8") as f:
        _logits_agree(hf, task, model, ids, [line.strip() for _, line in zip(range(12), f)])
    config = json.load(open(os.path.join(folder, "config.json")))
    assert config["decoder_start_token_id"] == task.tgt_dict.bos() and config["tie_word_embeddings"] is True


def _searches_agree(kind, folder, path, beam, lines, expect_finished, limit=12):
    from seqkit.generation.translator import Translator

    hf, task, _, ids = _cases(kind, folder, path)
    ids = ids.tolist()
    banned = [i for i in (ids[task.tgt_dict.pad()], ids[task.tgt_dict.bos()]) if i >= 0]
    translator = Translator.from_checkpoint(path, beam=beam, max_len_a=0, max_len_b=limit, min_len=1, lenpen=1.0)
    finished = 0
    for line in lines:
        src = translator.task.encode_source(line)
        ours = [ids[i] for i in next(translator.generate_batches([src], 1))["hypos"][0]["tokens"].tolist()]
        # seqkit never emits pad or <s>; HF's search is told the same
        theirs = hf.generate(torch.tensor([[ids[i] for i in src]]), num_beams=beam, do_sample=False, max_new_tokens=limit + 1,
                             min_new_tokens=1, early_stopping=True, length_penalty=1.0, suppress_tokens=banned,
                             forced_bos_token_id=None)[0, 1:].tolist()  # after the decoder's start token
        while theirs and theirs[-1] == ids[task.tgt_dict.pad()]:  # a finished beam padded out
            theirs.pop()
        finished += len(theirs) <= limit
        if len(theirs) == limit + 1 and theirs[-1] != ids[task.tgt_dict.eos()]:  # T5 names no forced eos:
            ours, theirs = ours[:-1], theirs[:-1]  # at the limit HF stops, seqkit ends with eos
        assert ours == theirs, line
    assert finished >= expect_finished  # most searches end on their own, not at the length limit


@pytest.mark.parametrize("beam", [1, 4])
def test_imported_encoder_decoders_search_as_hf_generate(imported, beam):
    kind, folder, path = imported
    _searches_agree(kind, folder, path, beam, toy_english(15, seed=3), 10)


@pytest.mark.parametrize("beam", [1, 4])
def test_exported_transformer_searches_as_fsmt_generate(fsmt, beam):
    folder, path = fsmt
    lines = ["ein Hund läuft über die Wiese", "eine Frau liest ein Buch", "zwei Kinder spielen", "ein Mann"]
    _searches_agree("fsmt", folder, path, beam, lines, 2, limit=30)


def test_tokenization_as_autotokenizer(imported, fsmt):
    from transformers import AutoTokenizer

    from seqkit.core.checkpoints import load_for_inference

    kind, folder, path = imported
    for kind, folder, path in ((kind, folder, path), ("fsmt", *fsmt)):
        theirs = AutoTokenizer.from_pretrained(folder)
        task, _ = load_for_inference(path)
        ids = _ids(path) or list(range(len(task.src_dict)))
        for line in shared_lines(200) or toy_english(200, seed=5):
            ours = [ids[i] for i in task.encode_source(line)]
            want = theirs(line)["input_ids"]
            assert ours == want, (kind, line)  # BART's <s> first too (task.prepend_bos)
            if kind == "marian":  # the target side decodes with target.spm, as MarianTokenizer does
                assert task.detokenize(task.pieces(task.encode_source(line)[:-1], "tgt")) == theirs.decode(
                    want, skip_special_tokens=True) or "<unk>" in theirs.convert_ids_to_tokens(want)


def _same_folders(a, b):
    from safetensors.torch import load_file

    before, after = load_file(os.path.join(a, "model.safetensors")), load_file(os.path.join(b, "model.safetensors"))
    assert set(before) == set(after)
    for k in before:
        assert before[k].dtype == after[k].dtype and torch.equal(before[k], after[k]), k
    old, new = (json.load(open(os.path.join(p, "config.json"))) for p in (a, b))
    skip = {"transformers_version", "dtype", "torch_dtype"}
    assert {k: v for k, v in old.items() if k not in skip} == {k: v for k, v in new.items() if k not in skip}
    for name in sorted(os.listdir(a)):
        if name.endswith((".spm", "vocab.json", "tokenizer.json")):
            with open(os.path.join(a, name), "rb") as x, open(os.path.join(b, name), "rb") as y:
                assert x.read() == y.read(), name


def test_import_export_round_trip_is_bit_exact(imported, tmp_path, run_cli):
    kind, folder, path = imported
    r = run_cli(export_cli, ["format=huggingface", f"path={path}", f"output={tmp_path / 'out'}"])
    assert r.code == 0, r.err
    _same_folders(folder, str(tmp_path / "out"))


def test_fsmt_export_import_export_is_bit_exact(fsmt, tmp_path):
    from seqkit.hf.convert import export_folder, import_folder

    folder, _ = fsmt
    back = import_folder(folder, str(tmp_path / "back.pt"))
    _same_folders(folder, export_folder(back, str(tmp_path / "again")))


def test_learned_positions_export_as_fsmt_s_stored_table(tmp_path, toy_data, run_cli):
    """FSMT stores its position table, so learned positions fit it too (seqkit's BART denoisers)."""
    from seqkit.cli.train import main as train
    from seqkit.hf.convert import export_folder

    _, data = toy_data
    r = run_cli(train, [f"task.data={data}", "model=transformer_tiny", "model.learned_positions=true",
                        "model.max_source_positions=64", "model.max_target_positions=64", "model.dropout=0",
                        "common.threads=1", "optimization.max_update=2", f"checkpoint.save_dir={tmp_path / 'ck'}"])
    assert r.code == 0, r.err
    path = str(tmp_path / "ck" / "checkpoint_last.pt")
    folder = export_folder(path, str(tmp_path / "hf"))
    hf, task, model, ids = _cases("fsmt", folder, path)
    _logits_agree(hf, task, model, ids, ["ein Hund läuft", "eine Katze schläft", "zwei Männer"])


def test_pre_norm_transformer_export_is_refused(tmp_path, toy_data, run_cli):
    from seqkit.cli.train import main as train

    _, data = toy_data
    r = run_cli(train, [f"task.data={data}", "model=transformer_tiny", "model.normalize_before=true",
                        "common.threads=1", "optimization.max_update=1", f"checkpoint.save_dir={tmp_path / 'ck'}"])
    assert r.code == 0, r.err
    r = run_cli(export_cli, ["format=huggingface", f"path={tmp_path / 'ck' / 'checkpoint_last.pt'}",
                             f"output={tmp_path / 'hf'}"])
    assert_one_line_error(r, "seqkit-export", "normalize_before=True", log_lines_allowed=True)
    assert not os.path.exists(tmp_path / "hf")


def test_fsmt_with_two_vocabulary_sizes_is_refused(fsmt, tmp_path, run_cli):
    import shutil

    from seqkit.cli.import_hf import main as import_cli

    folder, _ = fsmt
    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    config = json.load(open(bad / "config.json"))
    config["tgt_vocab_size"] += 1
    json.dump(config, open(bad / "config.json", "w"))
    r = run_cli(import_cli, [f"path={bad}", f"output={tmp_path / 'x.pt'}"])
    assert_one_line_error(r, "seqkit-import", "tgt_vocab_size", log_lines_allowed=True)
    assert not os.path.exists(tmp_path / "x.pt")


@pytest.mark.parametrize("mode", ["full", "lora"])
def test_imported_encoder_decoder_fine_tunes_as_a_classifier(imported, tmp_path, mode):
    """An imported BART or Marian model is a pretrained body like seqkit's own BART (model.path)."""
    fine_tune_two_updates(imported[2], tmp_path, mode)


def test_seqkit_generate_translates_as_transformers(imported, tmp_path, run_cli):
    """seqkit-generate on an imported checkpoint, text in and text out, as generate + decode."""
    from transformers import AutoTokenizer

    from seqkit.cli.generate import main as generate

    kind, folder, path = imported
    lines = toy_english(6, seed=11)
    r = run_cli(generate, [f"path={path}", "input=-", "generation.beam=4", "generation.max_len_b=12",
                           "common.threads=1"], stdin="\n".join(lines) + "\n")
    assert r.code == 0, r.err
    ours = {int(k[2:]): line.split("\t")[-1] for k, line in ((ln.split("\t")[0], ln) for ln in r.out.splitlines())
            if k.startswith("D-")}  # the detokenized hypotheses
    hf, tok = _hf(kind, folder), AutoTokenizer.from_pretrained(folder)
    suppress = [i for i in (hf.config.pad_token_id, getattr(hf.config, "bos_token_id", None)) if i is not None]
    for i, line in enumerate(lines):
        gen = hf.generate(**tok(line, return_tensors="pt"), num_beams=4, do_sample=False, max_new_tokens=13, min_new_tokens=1,
                          early_stopping=True, length_penalty=1.0, suppress_tokens=suppress, forced_bos_token_id=None)
        assert ours[i] == tok.decode(gen[0], skip_special_tokens=True).strip(), (kind, line)


@pytest.mark.parametrize("kind, key, value, fragment", [
    ("t5", "feed_forward_proj", "gated-tanh", "feed_forward_proj='gated-tanh'"),
    ("marian", "share_encoder_decoder_embeddings", False, "share_encoder_decoder_embeddings=False"),
    ("bart", "decoder_attention_heads", 2, "decoder_attention_heads=2"),
    ("bart", "decoder_start_token_id", 7, "decoder_start_token_id=7"),
])
def test_encoder_decoder_fields_seqkit_cannot_hold_are_one_line(tmp_path, run_cli, kind, key, value, fragment):
    from seqkit.cli.import_hf import main as import_cli

    folder = {"bart": make_bart, "marian": make_marian, "t5": make_t5}[kind](str(tmp_path / "hf"), toy_english(60))
    config = json.load(open(os.path.join(folder, "config.json")))
    config[key] = value
    json.dump(config, open(os.path.join(folder, "config.json"), "w"))
    r = run_cli(import_cli, [f"path={folder}", f"output={tmp_path / 'x.pt'}"])
    assert_one_line_error(r, "seqkit-import", fragment, log_lines_allowed=True)
    assert not os.path.exists(tmp_path / "x.pt")
