"""generation.sampling_topk above the target vocabulary (issue 46): it used to be cut to the
vocabulary in silence (every token drawable, as if no top-k had been asked for); now one line that
names the key and the vocabulary's size, from seqkit's engine and from seqkit-generate."""

from pathlib import Path

import pytest
import torch
from label_fixtures import one_line_error, translation_ckpt  # noqa: F401  (fixture by name)

from seqkit.core.errors import SeqkitError
from seqkit.data.dictionary import Dictionary
from seqkit.generation.config import GenerationConfig
from seqkit.generation.search import SequenceGenerator


def test_sequence_generator_refuses_a_top_k_above_the_vocabulary():
    d = Dictionary([f"w{i}" for i in range(12)])
    V = len(d)
    with pytest.raises(SeqkitError) as e:
        SequenceGenerator(d, GenerationConfig(beam=1, sampling=True, sampling_topk=V + 1))
    assert str(e.value) == (f"generation.sampling_topk={V + 1} is more than the target vocabulary's {V} tokens: "
                            f"at most {V} (-1: no top-k cut)")
    SequenceGenerator(d, GenerationConfig(beam=1, sampling=True, sampling_topk=V))  # the whole vocabulary: allowed
    SequenceGenerator(d, GenerationConfig(beam=1, sampling=True, sampling_topk=-1))


def test_generate_refuses_a_top_k_above_the_vocabulary(translation_ckpt, toy_data, fast_gen_args,  # noqa: F811
                                                       run_cli):
    from seqkit.cli.generate import main as generate

    torch.manual_seed(0)
    _, data = toy_data
    V = len(Dictionary.load(str(Path(data) / "dict.en.txt")))
    args = fast_gen_args + [f"task.data={data}", f"path={translation_ckpt}", "generation.sampling=true",
                            "generation.beam=1", "generation.nbest=1"]
    r = run_cli(generate, args + [f"generation.sampling_topk={V + 1}"])
    one_line_error(r, "seqkit-generate", f"generation.sampling_topk={V + 1}", f"target vocabulary's {V} tokens",
                   log_lines_allowed=True)
    assert "H-" not in r.out
    ok = run_cli(generate, args + [f"generation.sampling_topk={V}"])
    assert ok.code == 0, ok.err
    assert "H-" in ok.out


def test_ctranslate2_engine_refuses_it_too(translation_ckpt):  # noqa: F811
    pytest.importorskip("ctranslate2")
    from seqkit.core.checkpoints import load_for_inference
    from seqkit.generation.ct2_engine import CT2Engine

    task, _ = load_for_inference(str(translation_ckpt))
    V = len(task.tgt_dict)
    cfg = GenerationConfig(beam=1, sampling=True, sampling_topk=V + 1)
    with pytest.raises(SeqkitError, match=rf"^generation.sampling_topk={V + 1} is more than the target vocabulary's "):
        CT2Engine(task, "/nonexistent-export", cfg, 64)  # refused before the export is read
