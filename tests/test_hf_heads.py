"""Fine-tuned classifiers and taggers exported as HuggingFace *ForSequenceClassification /
*ForTokenClassification: the same logits through transformers; the heads HF cannot hold refused."""

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from hf_fixtures import make_bert, toy_english  # noqa: E402
from transfer_fixtures import binarize, make_text, pretrain, run  # noqa: E402

from seqkit.core.checkpoints import load_for_inference  # noqa: E402
from seqkit.core.errors import SeqkitError  # noqa: E402
from seqkit.hf.convert import export_folder, import_folder  # noqa: E402


def fine_tune(tmp_path, base, task="classification", *extra):
    text = tmp_path if (tmp_path / "lm").is_dir() else make_text(tmp_path)
    if task == "classification":
        data = binarize(text, tmp_path / "cls", base)
    else:
        from label_fixtures import tagged_sentences, write_conll

        from seqkit.cli.preprocess import main as preprocess

        write_conll(tmp_path / "train.conll", tagged_sentences(40, 0))
        write_conll(tmp_path / "dev.conll", tagged_sentences(8, 1))
        data = tmp_path / "tag"
        preprocess(["task=tagging", f"trainpref={tmp_path}/train", f"validpref={tmp_path}/dev", f"destdir={data}",
                    f"vocab_from={base}"])
    model = "pretrained_classifier" if task == "classification" else "pretrained_tagger"
    run([f"task={task}", f"task.data={data}", f"model={model}", f"model.path={base}", "criterion=cross_entropy",
         "optimization.max_update=2", f"checkpoint.save_dir={tmp_path / 'ck'}", *extra])
    return str(tmp_path / "ck" / "checkpoint_last.pt")


def batch(task, lines):
    d, tok = task.src_dict, task.tokenizer()
    rows = [[d.bos(), *[d.index(p) for p in tok.encode(line)], d.eos()] for line in lines]
    width = max(map(len, rows))
    src = torch.tensor([r + [d.pad()] * (width - len(r)) for r in rows])
    return src, torch.tensor([len(r) for r in rows])


@pytest.mark.parametrize("arch, mode", [("BertForMaskedLM", "full"), ("RobertaForMaskedLM", "lora"),
                                        ("AlbertForMaskedLM", "bitfit")])
def test_fine_tuned_classifier_exports_with_the_same_logits(tmp_path, arch, mode):
    import transformers

    base = import_folder(make_bert(str(tmp_path / "hf"), toy_english(), arch), str(tmp_path / "base.pt"))
    path = fine_tune(tmp_path, base, "classification", f"model.adapt={mode}")
    export_folder(path, str(tmp_path / "out"))
    variant = arch[: -len("ForMaskedLM")]
    hf = getattr(transformers, f"{variant}ForSequenceClassification").from_pretrained(str(tmp_path / "out")).eval()
    task, model = load_for_inference(path)
    model.eval()
    from seqkit.core import checkpoints

    ids = torch.tensor(checkpoints.load(base)["hf"]["vocab"]["hf_ids"])
    src, lengths = batch(task, ["v0 v3 v4 .", "v5 v6 v7 v8 v9 ."])
    mask = src.ne(task.src_dict.pad())
    with torch.no_grad():
        theirs = hf(input_ids=ids[src], attention_mask=mask.long()).logits
        ours = model(src, lengths)
    assert (ours - theirs).abs().max() < 1e-5
    assert hf.config.id2label == {i: label for i, label in enumerate(task.labels)}


def test_fine_tuned_gpt_tagger_exports_with_the_same_logits(tmp_path):
    import transformers

    pretrain(make_text(tmp_path), "gpt", tmp_path / "gpt")
    path = fine_tune(tmp_path, str(tmp_path / "gpt" / "checkpoint_last.pt"), "tagging")
    export_folder(path, str(tmp_path / "out"))
    hf = transformers.GPT2ForTokenClassification.from_pretrained(str(tmp_path / "out")).eval()
    task, model = load_for_inference(path)
    model.eval()
    src, lengths = batch(task, ["Paris is big", "the old man"])
    with torch.no_grad():
        ours, theirs = model(src, lengths), hf(input_ids=src).logits
    keep = src.ne(task.src_dict.pad())
    assert (ours[keep] - theirs[keep]).abs().max() < 1e-5


@pytest.mark.parametrize("objective, extra, message", [
    ("gpt", [], "GPT2ForSequenceClassification"),
    ("bert", ["model.adapt=adapter"], "model.adapt=adapter"),
    ("bert", ["model.pooling=mean"], "model.pooling"),
    ("bert", ["model.head=bilstm", "model.bilstm.embed_dim=4", "model.bilstm.hidden_dim=4"], "model.head=bilstm"),
])
def test_heads_hf_cannot_hold_are_refused(tmp_path, objective, extra, message):
    pretrain(make_text(tmp_path), objective, tmp_path / "body")
    path = fine_tune(tmp_path, str(tmp_path / "body" / "checkpoint_last.pt"), "classification", *extra)
    with pytest.raises(SeqkitError, match=message):
        export_folder(path, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("arch", ["BertForMaskedLM", "gpt"])
def test_lora_run_exports_as_a_peft_adapter_that_peft_loads(tmp_path, arch):
    """peft.PeftModel over the exported base gives the unmerged LoRA model's logits (BERT's fused
    q/k/v update cut into three; GPT-2's c_attn whole); the adapter file holds only the updates and
    the head."""
    peft = pytest.importorskip("peft")
    import transformers

    if arch == "gpt":
        pretrain(make_text(tmp_path), "gpt", tmp_path / "gpt")
        base, kind = str(tmp_path / "gpt" / "checkpoint_last.pt"), "tagging"
        targets = "model.lora.targets=[qkv_proj,out_proj,fc1,fc2]"
    else:
        base = import_folder(make_bert(str(tmp_path / "hf"), toy_english(), arch), str(tmp_path / "base.pt"))
        kind, targets = "classification", "model.lora.targets=[qkv_proj,out_proj,fc1]"
    path = fine_tune(tmp_path, base, kind, "model.adapt=lora", targets, "model.lora.rank=4", "optimizer.lr=0.05")
    export_folder(path, str(tmp_path / "adapter"), peft=True)
    auto = transformers.AutoModelForTokenClassification if kind == "tagging" else transformers.AutoModelForSequenceClassification
    hf = peft.PeftModel.from_pretrained(auto.from_pretrained(str(tmp_path / "adapter" / "base")),
                                        str(tmp_path / "adapter")).eval()
    task, model = load_for_inference(path)
    model.eval()
    if arch == "gpt":
        ids = torch.arange(len(task.src_dict) + 10)
    else:
        from seqkit.core import checkpoints

        ids = torch.tensor(checkpoints.load(base)["hf"]["vocab"]["hf_ids"])
    src, lengths = batch(task, ["v0 v3 v4 .", "v5 v6 v7 v8 v9 ."])
    keep = src.ne(task.src_dict.pad())
    with torch.no_grad():
        ours, theirs = model(src, lengths), hf(input_ids=ids[src], attention_mask=keep.long()).logits
    moved = (theirs - auto.from_pretrained(str(tmp_path / "adapter" / "base")).eval()(
        input_ids=ids[src], attention_mask=keep.long()).logits).abs().max()
    if kind == "tagging":
        ours, theirs = ours[keep], theirs[keep]
    assert (ours - theirs).abs().max() < 1e-5
    assert moved > 1e-4  # the updates matter: without the adapter the base computes something else
