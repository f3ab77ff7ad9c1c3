"""CTranslate2: seqkit-export format=ctranslate2 and seqkit-generate engine=ctranslate2 give the
translations of seqkit's own engine (beam 5 and greedy) on tiny trained Transformers: post-norm
with sinusoids and tied output, pre-norm with learned positions, GELU and an untied output."""

import json
import os

import pytest
import torch

ct2 = pytest.importorskip("ctranslate2")

from seqkit.cli.export import main as export_main  # noqa: E402
from seqkit.cli.generate import main as generate_main  # noqa: E402

VARIANTS = {
    "post": [],
    "pre": ["model.normalize_before=true", "model.learned_positions=true", "model.activation=gelu",
            "model.share_decoder_input_output_embed=false"],
}
MAX_LEN = 40


@pytest.fixture(scope="module")
def checkpoints(toy_data, tiny_train_args, tmp_path_factory):
    from seqkit.cli.train import main as train

    _, data = toy_data
    root = tmp_path_factory.mktemp("ct2")
    out = {}
    for name, extra in VARIANTS.items():
        train(tiny_train_args + extra + [f"task.data={data}", f"checkpoint.save_dir={root / name}",
                                         "optimization.max_update=60", "checkpoint.no_epoch_checkpoints=true"])
        out[name] = str(root / name / "checkpoint_best.pt")
    return out


def _best(translator, sources):
    return {r["id"]: r["hypos"][0] for r in translator.generate_batches(sources, 16)}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("beam", [5, 1])
def test_same_translations_as_seqkit(checkpoints, toy_data, tmp_path, variant, beam, monkeypatch):
    from seqkit.generation.translator import Translator

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    raw, _ = toy_data
    path = checkpoints[variant]
    ours = Translator.from_checkpoint(path, beam=beam, max_len_b=MAX_LEN)
    threads = torch.get_num_threads()
    theirs = Translator.from_checkpoint(path, beam=beam, max_len_b=MAX_LEN, engine="ctranslate2", intra_threads=1)
    assert torch.get_num_threads() == threads  # CTranslate2 sets OpenMP's thread count; torch's is put back
    lines = (raw / "test.de").read_text(encoding="utf-8").splitlines()
    sources = [ours.task.encode_source(line) for line in lines]
    a, b = _best(ours, sources), _best(theirs, sources)
    for i in range(len(sources)):  # CTranslate2's hypotheses hold lists, seqkit's tensors
        assert a[i]["tokens"].tolist() == b[i]["tokens"], f"sentence {i}"
        assert b[i]["score"] == pytest.approx(a[i]["score"], abs=1e-4)
        assert b[i]["positional_scores"] == pytest.approx(a[i]["positional_scores"].tolist(), abs=1e-4)


def test_sentences_at_the_max_length_are_searched_again(checkpoints, toy_data, tmp_path, monkeypatch):
    """A limit of 3 tokens leaves CTranslate2's hypotheses unfinished where seqkit forces </s>: those
    sentences go through seqkit's engine, so the translations still match."""
    from seqkit.generation.translator import Translator

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    raw, _ = toy_data
    path = checkpoints["post"]
    ours = Translator.from_checkpoint(path, beam=5, max_len_b=3)
    theirs = Translator.from_checkpoint(path, beam=5, max_len_b=3, engine="ctranslate2")
    sources = [ours.task.encode_source(line) for line in (raw / "test.de").read_text(encoding="utf-8").splitlines()]
    a, b = _best(ours, sources), _best(theirs, sources)
    alone = theirs.engine.generate(sources, 16)  # CTranslate2's own search
    unfinished = [i for i, hs in enumerate(alone) if hs[0]["unfinished"]]
    assert len(unfinished) >= len(sources) // 2
    assert any(alone[i][0]["tokens"] != a[i]["tokens"].tolist() for i in unfinished)
    assert all(a[i]["tokens"].tolist() == b[i]["tokens"] for i in range(len(sources)))


def test_export_folder_and_generate_cli(checkpoints, toy_data, tmp_path, run_cli):
    _, data = toy_data
    path = checkpoints["post"]
    out = tmp_path / "exp"
    r = run_cli(export_main, [f"path={path}", f"output={out}", "quantization=int8"])
    assert r.code == 0, r.err
    assert {"model.bin", "config.json", "seqkit_export.json", "source.spm.model", "target.spm.model"} <= set(os.listdir(out))
    meta = json.loads((out / "seqkit_export.json").read_text())
    assert meta["quantization"] == "int8" and len(meta["sha256"]) == 64
    config = json.loads((out / "config.json").read_text())
    assert (config["decoder_start_token"], config["add_source_eos"], config["layer_norm_epsilon"]) == ("<s>", True, 1e-5)
    # an existing folder is never replaced without overwrite=true
    again = run_cli(export_main, [f"path={path}", f"output={out}"])
    assert again.code == 1 and "overwrite=true" in again.messages[-1]

    gen = ["common.threads=1", f"task.data={data}", f"path={path}", f"generation.max_len_b={MAX_LEN}"]
    ours = run_cli(generate_main, gen)
    folder = tmp_path / "ct2"
    theirs = run_cli(generate_main, gen + ["engine=ctranslate2", f"ctranslate2_dir={folder}"])
    assert ours.code == 0 and theirs.code == 0, theirs.err

    def lines(text, kind):
        return [line.split("\t")[0] + "\t" + line.split("\t")[-1] for line in text.splitlines() if line.startswith(kind)]

    assert lines(theirs.out, "S-") == lines(ours.out, "S-")
    assert lines(theirs.out, "D-") == lines(ours.out, "D-")  # every translation, as test_same_translations asserts
    # the export is reused while it matches the checkpoint, and rewritten for another one
    stamp = os.path.getmtime(folder / "model.bin")
    assert run_cli(generate_main, gen + ["engine=ctranslate2", f"ctranslate2_dir={folder}"]).code == 0
    assert os.path.getmtime(folder / "model.bin") == stamp
    other = run_cli(generate_main, gen[:2] + [f"path={checkpoints['pre']}", "engine=ctranslate2",
                                               f"ctranslate2_dir={folder}", "compute_type=int8"])
    assert other.code == 0, other.err
    assert json.loads((folder / "seqkit_export.json").read_text())["checkpoint"] == os.path.abspath(checkpoints["pre"])


def test_stdin_through_ctranslate2(checkpoints, tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    args = ["common.threads=1", f"path={checkpoints['pre']}", "input=-", "generation.beam=2"]
    ours = run_cli(generate_main, args, stdin="Der Hund spielt im Park.\n")
    theirs = run_cli(generate_main, args + ["engine=ctranslate2"], stdin="Der Hund spielt im Park.\n")
    assert theirs.code == 0, theirs.err
    assert [x for x in theirs.out.splitlines() if x.startswith("D-")][0].split("\t")[-1] == \
        [x for x in ours.out.splitlines() if x.startswith("D-")][0].split("\t")[-1]


def test_an_existing_export_translates_without_torch(checkpoints, tmp_path, run_cli):
    """With an export that matches the checkpoint, engine=ctranslate2 never imports torch (start-up
    in well under a second): a fresh process whose torch import fails still translates stdin."""
    import subprocess
    import sys

    folder = tmp_path / "ct2"
    args = ["common.threads=1", f"path={checkpoints['post']}", "input=-", "engine=ctranslate2",
            f"ctranslate2_dir={folder}"]
    first = run_cli(generate_main, args, stdin="Der Hund spielt im Park.\n")  # writes the export
    assert first.code == 0, first.err
    blocker = tmp_path / "no_torch"
    blocker.mkdir()
    (blocker / "torch.py").write_text("raise ImportError('torch imported')\n")
    # the installed package, run from elsewhere (the checkout's seqkit/ has no cli/: it is mapped in on install)
    path = [str(blocker)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    done = subprocess.run([sys.executable, "-c", "from seqkit.cli.generate import main; main()", *args],
                          input="Der Hund spielt im Park.\n", capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert [x for x in done.stdout.splitlines() if x.startswith("D-")] == \
        [x for x in first.out.splitlines() if x.startswith("D-")]


def test_sampling_follows_the_seed(checkpoints, toy_data, tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _, data = toy_data
    gen = ["common.threads=1", f"task.data={data}", f"path={checkpoints['post']}", "engine=ctranslate2",
           "generation.sampling=true", "generation.beam=1", "generation.temperature=2.0"]

    def hypotheses(seed):
        r = run_cli(generate_main, gen + [f"common.seed={seed}"])
        assert r.code == 0, r.err
        return [line for line in r.out.splitlines() if line.startswith("H-")]

    first = hypotheses(1)
    assert len(first) > 10 and hypotheses(1) == first
    assert hypotheses(2) != first


def test_sampling_scores_hold_the_temperature_as_seqkit_s(checkpoints, toy_data, tmp_path, monkeypatch):
    """Under sampling, CTranslate2's P- scores are log-probs at the temperature, as seqkit's are: its
    samples, teacher-forced through seqkit's model, give the same positional scores."""
    from seqkit.core.checkpoints import load_for_inference
    from seqkit.generation.translator import Translator

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    raw, _ = toy_data
    path = checkpoints["post"]
    theirs = Translator.from_checkpoint(path, beam=1, sampling=True, temperature=0.6, max_len_b=MAX_LEN,
                                        engine="ctranslate2", intra_threads=1)
    task, model = load_for_inference(path)
    lines = (raw / "test.de").read_text(encoding="utf-8").splitlines()[:8]
    for r in theirs.generate_batches([task.encode_source(line) for line in lines], 4):
        hyp = r["hypos"][0]
        src = torch.tensor([task.encode_source(lines[r["id"]])])
        tgt = torch.tensor([hyp["tokens"]])
        prev = torch.cat([torch.tensor([[task.tgt_dict.bos()]]), tgt[:, :-1]], dim=1)
        with torch.no_grad():
            lp = torch.log_softmax(model.eval()(src, torch.tensor([src.size(1)]), prev)[0] / 0.6, dim=-1)  # (T, V)
        want = lp.gather(1, tgt[0][:, None])[:, 0].tolist()
        assert hyp["positional_scores"] == pytest.approx(want, abs=1e-4), lines[r["id"]]


def test_bad_requests_are_one_line_errors(checkpoints, toy_data, tmp_path, run_cli, monkeypatch):
    import builtins

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _, data = toy_data
    path = checkpoints["post"]
    gen = ["common.threads=1", f"task.data={data}", f"path={path}", "engine=ctranslate2"]
    r = run_cli(generate_main, gen + ["generation.print_alignment=true"])
    assert r.code == 1 and r.messages == ["seqkit-generate: error: engine=ctranslate2 does not support "
                                          "generation.print_alignment: use engine=seqkit"]
    # a temperature CTranslate2's beam search would ignore
    r = run_cli(generate_main, gen + ["generation.temperature=0.5"])
    assert r.code == 1 and r.messages == ["seqkit-generate: error: engine=ctranslate2 does not support "
                                          "generation.temperature=0.5 with beam search (it applies it only when "
                                          "sampling): use engine=seqkit"]
    # a compute type CTranslate2 lacks is refused before anything is exported
    never = tmp_path / "never"
    r = run_cli(generate_main, gen + ["compute_type=int4", f"ctranslate2_dir={never}"])
    assert r.code == 1 and r.messages[-1].startswith("seqkit-generate: error: compute_type='int4': choose one of")
    assert not never.exists()
    # a folder that is not an export is left alone
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    r = run_cli(generate_main, gen + [f"ctranslate2_dir={busy}"])
    assert r.code == 1 and "not a seqkit export" in r.messages[-1]
    assert os.listdir(busy) == ["notes.txt"]
    # without the extra: one line naming it
    real_import = builtins.__import__

    def no_ct2(name, *args, **kwargs):
        if name == "ctranslate2":
            raise ImportError("no ctranslate2")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ct2)
    r = run_cli(export_main, [f"path={path}", f"output={tmp_path / 'x'}"])
    assert r.code == 1 and r.messages == ["seqkit-export: error: CTranslate2 is not installed: pip install 'seqkit[ct2]'"]
    assert not (tmp_path / "x").exists()



class TransformerModel:
    """What transformer_spec reads before any weight: the class name and the config."""

    def __init__(self, cfg):
        self.cfg = cfg


def test_language_vectors_are_refused_not_dropped():
    # model.num_langs adds a language vector CTranslate2's Transformer has no place for (an XLM or
    # MASS start, issue 62): refused in one line rather than exported without it
    from seqkit.core.errors import SeqkitError
    from seqkit.export.ct2 import transformer_spec
    from seqkit import import_builtin_components
    from seqkit.core.registry import MODELS

    import_builtin_components()
    cfg = MODELS.make_config({"name": "transformer", "num_langs": 2})
    with pytest.raises(SeqkitError, match=r"model\.num_langs=0 models, not 2"):
        transformer_spec(TransformerModel(cfg), [], [], {})
