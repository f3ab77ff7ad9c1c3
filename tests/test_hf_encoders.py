"""BERT and RoBERTa through seqkit.hf: tiny models built by ``transformers``, imported and compared
(masked-LM and next-sentence logits within 1e-5, pairs with token types, WordPiece tokenization as
AutoTokenizer's), exported back bit for bit; a seqkit-pretrained BERT exported and compared."""

import os

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from hf_fixtures import make_bert, shared_lines, toy_english  # noqa: E402

ARCHES = ["BertForMaskedLM", "BertForPreTraining", "RobertaForMaskedLM", "BertModel", "AlbertForMaskedLM",
          "AlbertForPreTraining"]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """arch -> (HF folder, imported checkpoint), built on first use."""
    from seqkit.hf.convert import import_folder

    root, made = tmp_path_factory.mktemp("encoders"), {}

    def get(arch):
        if arch not in made:
            folder = make_bert(str(root / arch), toy_english(), arch)
            made[arch] = folder, import_folder(folder, str(root / f"{arch}.pt"))
        return made[arch]

    return get


def hf_ids(path):
    from seqkit.core import checkpoints

    return torch.tensor(checkpoints.load(path)["hf"]["vocab"]["hf_ids"])


def encode_pair(task, a, b):
    """seqkit's ``<s> a </s> b </s>`` with segments 0 / 1, as seqkit's classification task reads a pair."""
    d, tok = task.dictionary, task.tokenizer()
    pa, pb = [d.index(p) for p in tok.encode(a)], [d.index(p) for p in tok.encode(b)] if b else []
    src = [d.bos(), *pa, d.eos()] + ([*pb, d.eos()] if b else [])
    return torch.tensor([src]), torch.tensor([[0] * (len(pa) + 2) + [1] * (len(pb) + 1 if b else 0)])


@pytest.mark.parametrize("arch", ARCHES)
def test_imported_encoder_gives_hf_outputs(imported, arch):
    import transformers

    from seqkit.core.checkpoints import load_for_inference

    folder, path = imported(arch)
    hf = getattr(transformers, arch).from_pretrained(folder).eval()
    theirs_tok = transformers.AutoTokenizer.from_pretrained(folder)
    task, model = load_for_inference(path)
    model.eval()
    ids = hf_ids(path)
    known = ids >= 0
    assert known.all()  # BERT and RoBERTa have every special seqkit has
    pairs = [("a dog runs in the park", "the cat sleeps"), ("two men play .", "a girl sings")]
    for a, b in pairs:
        b = None if arch.startswith("Roberta") else b  # RoBERTa writes pairs as a </s></s> b
        src, seg = encode_pair(task, a, b)
        enc = theirs_tok(a, b, return_tensors="pt") if b else theirs_tok(a, return_tensors="pt")
        assert ids[src].tolist() == enc["input_ids"].tolist()
        with torch.no_grad():
            theirs = hf(**{k: v for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")})
            if arch == "BertModel":
                assert (model.encoder(src, seg) - theirs.last_hidden_state).abs().max() < 1e-5
                continue
            ours = model(src, torch.tensor([src.size(1)]), segments=seg)
        logits = theirs.logits if hasattr(theirs, "logits") else theirs.prediction_logits
        assert (ours["mlm"][0] - logits[0][:, ids]).abs().max() < 1e-5
        if arch == "BertForPreTraining":
            assert (ours["sentence"] - theirs.seq_relationship_logits).abs().max() < 1e-5
        if arch == "AlbertForPreTraining":
            assert (ours["sentence"] - theirs.sop_logits).abs().max() < 1e-5


def test_wordpiece_tokenization_as_autotokenizer(imported):
    from transformers import AutoTokenizer

    from seqkit.core.checkpoints import load_for_inference

    folder, path = imported("BertForMaskedLM")
    theirs = AutoTokenizer.from_pretrained(folder)
    task, _ = load_for_inference(path)
    ids = hf_ids(path)
    for line in shared_lines(300) or toy_english(300, seed=5):
        src, _ = encode_pair(task, line, None)
        assert ids[src][0].tolist() == theirs(line)["input_ids"], line


@pytest.mark.parametrize("arch", ["BertForMaskedLM", "BertForPreTraining", "RobertaForMaskedLM", "AlbertForPreTraining"])
def test_import_export_round_trip_is_bit_exact(imported, arch, tmp_path):
    import json

    from safetensors.torch import load_file

    from seqkit.hf.convert import export_folder

    folder, path = imported(arch)
    export_folder(path, str(tmp_path / "out"))
    before, after = load_file(os.path.join(folder, "model.safetensors")), load_file(str(tmp_path / "out" / "model.safetensors"))
    assert set(before) == set(after)
    for k in before:
        assert torch.equal(before[k], after[k]), k
    skip = {"transformers_version", "dtype", "torch_dtype"}
    old, new = (json.load(open(os.path.join(p, "config.json"))) for p in (folder, tmp_path / "out"))
    assert {k: v for k, v in old.items() if k not in skip} == {k: v for k, v in new.items() if k not in skip}


def test_pretrained_seqkit_bert_exports_with_the_same_logits(tmp_path):
    """A seqkit masked-LM pretraining run (NSP head, its own vocabulary) as BertForPreTraining."""
    from transfer_fixtures import make_text, pretrain
    from transformers import BertForPreTraining

    from seqkit.core.checkpoints import load_for_inference
    from seqkit.hf.convert import export_folder

    pretrain(make_text(tmp_path), "bert", tmp_path / "bert")
    path = str(tmp_path / "bert" / "checkpoint_last.pt")
    export_folder(path, str(tmp_path / "hf"))
    hf = BertForPreTraining.from_pretrained(str(tmp_path / "hf")).eval()
    task, model = load_for_inference(path)
    model.eval()
    src, seg = encode_pair(task, "v1 v2 v3 .", "v4 v0 .")
    with torch.no_grad():
        ours = model(src, torch.tensor([src.size(1)]), segments=seg)
        theirs = hf(input_ids=src, token_type_ids=seg)
    assert (ours["mlm"] - theirs.prediction_logits).abs().max() < 1e-5
    assert (ours["sentence"] - theirs.seq_relationship_logits).abs().max() < 1e-5


def test_imported_bert_fills_masks_as_hf(imported, run_cli):
    import transformers

    from seqkit.cli.generate import main as generate

    folder, path = imported("BertForMaskedLM")
    hf = transformers.BertForMaskedLM.from_pretrained(folder).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    line = "a dog [MASK] in the park"
    enc = tok(line, return_tensors="pt")
    with torch.no_grad():
        logits = hf(**enc).logits[0, enc["input_ids"][0].tolist().index(tok.mask_token_id)]  # (V,)
    logits[tok.all_special_ids] = float("-inf")  # fillers are real words
    probs, best = logits.softmax(-1).topk(3)
    words = tok.convert_ids_to_tokens(best.tolist())
    assert not set(words) & set(line.split())  # (not a word the S- line echoes)
    r = run_cli(generate, [f"path={path}", "input=-", "topk=3"], stdin=line + "\n")
    assert r.code == 0, r.err
    slots = [row.split("\t") for row in r.out.splitlines() if row.startswith("M-")]
    assert len(slots) == 1 and slots[0][:2] == ["M-0", "0"], r.out
    assert slots[0][2::2] == words, (words, r.out)  # HF's three best fillers, in its order
    assert [float(p) for p in slots[0][3::2]] == pytest.approx(probs.tolist(), abs=6e-5)  # (printed to 4 places)


@pytest.mark.parametrize("arch, mode", [("RobertaForMaskedLM", m) for m in ("full", "frozen", "adapter", "lora", "bitfit",
                                                                         "prompt", "ulmfit")]
                         + [("BertForMaskedLM", "full"), ("AlbertForMaskedLM", "lora")])
def test_imported_encoder_fine_tunes_as_a_classifier(imported, tmp_path, arch, mode):
    from hf_fixtures import assert_adapted
    from transfer_fixtures import binarize, make_text, trainer_for

    _, path = imported(arch)
    data = binarize(make_text(tmp_path), tmp_path / "cls", path)
    trainer = trainer_for(["task=classification", f"task.data={data}", "model=pretrained_classifier",
                           f"model.path={path}", f"model.adapt={mode}", "criterion=cross_entropy",
                           "optimization.max_update=2", f"checkpoint.save_dir={tmp_path / 'ck'}"])
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}  # the base's body, the new head
    trainer.run()
    assert trainer.num_updates == 2
    assert_adapted(mode, before, trainer.model)  # model.adapt took effect: exactly its parameters moved


@pytest.fixture(scope="module")
def electra_pair(tmp_path_factory):
    from hf_fixtures import make_electra

    from seqkit.hf.convert import import_folder

    root = tmp_path_factory.mktemp("electra")
    folder = make_electra(str(root / "disc"), str(root / "gen"), toy_english())
    return folder, str(root / "gen"), import_folder(folder, str(root / "electra.pt"), generator=str(root / "gen"))


def test_imported_electra_discriminates_and_generates_as_hf(electra_pair):
    import transformers

    from seqkit.core.checkpoints import load_for_inference

    folder, gen_folder, path = electra_pair
    disc = transformers.ElectraForPreTraining.from_pretrained(folder).eval()
    gen = transformers.ElectraForMaskedLM.from_pretrained(gen_folder).eval()
    task, model = load_for_inference(path)
    model.eval()
    ids = hf_ids(path)
    src, seg = encode_pair(task, "a dog runs in the park", "the cat sleeps")
    with torch.no_grad():
        assert (model.discriminate(src, seg) - disc(input_ids=ids[src], token_type_ids=seg).logits).abs().max() < 1e-5
        everywhere = torch.ones_like(src, dtype=torch.bool)
        ours = model(src, torch.tensor([src.size(1)]), segments=seg, masked_tokens=everywhere)["mlm"]  # (S, V)
        theirs = gen(input_ids=ids[src], token_type_ids=seg).logits[0]  # (S, W)
    assert (ours - theirs[:, ids]).abs().max() < 1e-5


def test_electra_round_trip_is_bit_exact(electra_pair, tmp_path):
    from safetensors.torch import load_file

    from seqkit.hf.convert import export_folder

    folder, gen_folder, path = electra_pair
    export_folder(path, str(tmp_path / "out"))
    for original, written in ((folder, tmp_path / "out"), (gen_folder, tmp_path / "out" / "generator")):
        before, after = load_file(os.path.join(original, "model.safetensors")), load_file(str(written / "model.safetensors"))
        assert set(before) == set(after)
        for k in before:
            assert torch.equal(before[k], after[k]), k


def test_electra_generator_with_other_embeddings_is_refused(tmp_path, run_cli):
    from hf_fixtures import make_electra
    from safetensors.torch import load_file, save_file
    from test_bad_input import assert_one_line_error

    from seqkit.cli.import_hf import main as import_cli

    folder = make_electra(str(tmp_path / "disc"), str(tmp_path / "gen"), toy_english(100))
    weights = load_file(str(tmp_path / "gen" / "model.safetensors"))
    weights["electra.embeddings.word_embeddings.weight"] = weights["electra.embeddings.word_embeddings.weight"] + 1
    save_file(weights, str(tmp_path / "gen" / "model.safetensors"), metadata={"format": "pt"})
    r = run_cli(import_cli, [f"path={folder}", f"generator={tmp_path / 'gen'}", f"output={tmp_path / 'e.pt'}"])
    assert_one_line_error(r, "seqkit-import", "word embeddings differ", log_lines_allowed=True)
    assert not (tmp_path / "e.pt").exists()


@pytest.mark.parametrize("objective", ["electra", "albert"])
def test_pretrained_seqkit_electra_and_albert_export(tmp_path, objective):
    """seqkit's ELECTRA and ALBERT with HF's embedding projection (``project_embeddings=sum``) export
    with the same outputs; with seqkit's token projection, export is refused in one line."""
    import transformers
    from transfer_fixtures import make_text, pretrain

    from seqkit.core.checkpoints import load_for_inference
    from seqkit.core.errors import SeqkitError
    from seqkit.hf.convert import export_folder

    text = make_text(tmp_path)
    extra = ["model.embedding_dim=16"]
    pretrain(text, objective, tmp_path / "tokens", extra=extra)
    with pytest.raises(SeqkitError, match="project_embeddings=tokens"):
        export_folder(str(tmp_path / "tokens" / "checkpoint_last.pt"), str(tmp_path / "no"))
    assert not (tmp_path / "no").exists()
    pretrain(text, objective, tmp_path / "sum", extra=[*extra, "model.project_embeddings=sum"])
    path = str(tmp_path / "sum" / "checkpoint_last.pt")
    export_folder(path, str(tmp_path / "hf"))
    task, model = load_for_inference(path)
    model.eval()
    src, seg = encode_pair(task, "v1 v2 v3 .", "v4 v0 .")
    with torch.no_grad():
        if objective == "electra":
            hf = transformers.ElectraForPreTraining.from_pretrained(str(tmp_path / "hf")).eval()
            assert (model.discriminate(src, seg) - hf(input_ids=src, token_type_ids=seg).logits).abs().max() < 1e-5
        else:
            hf = transformers.AlbertForPreTraining.from_pretrained(str(tmp_path / "hf")).eval()
            ours, theirs = model(src, torch.tensor([src.size(1)]), segments=seg), hf(input_ids=src, token_type_ids=seg)
            assert (ours["mlm"] - theirs.prediction_logits).abs().max() < 1e-5
            assert (ours["sentence"] - theirs.sop_logits).abs().max() < 1e-5
