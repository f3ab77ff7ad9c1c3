"""Search settings of the sequence generator (fairseq's names where fairseq has one), and
``seqkit-generate``'s schema, which holds them as its ``generation`` field.

Greedy decoding is ``beam=1`` without sampling. The caller seeds torch for sampling, so no seed
lives here. Nothing here imports torch: ``seqkit-generate engine=ctranslate2`` parses its command
line and searches a cached export without it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from seqkit.core.config import CommonConfig
from seqkit.core.config import arg, check_ranges
from seqkit.core.errors import SeqkitError
from seqkit.core.settings import Reads
from seqkit.verify import reads_model

QUANTIZE = ("none", "int8")  # seqkit's engine: quantize=int8 (see seqkit.generation.quantize)


@dataclass
class GenerationConfig:
    beam: int = arg(5, "beam size; with sampling, the number of independent samples per sentence", ge=1)
    nbest: int = arg(1, "hypotheses returned per sentence, best first (<= beam)", ge=1)
    max_len_a: float = arg(0.0, "max target length is max_len_a * source length + max_len_b", ge=0)
    max_len_b: int = arg(200, "max target length is max_len_a * source length + max_len_b", ge=0)
    min_len: int = arg(1, "minimum number of tokens before eos (eos excluded)", ge=0)
    lenpen: float = arg(1.0, "length penalty: score = sum of log-probs / length**lenpen (eos counts)")
    unkpen: float = arg(0.0, "subtracted from the unknown word's log-prob (>0 discourages <unk>)")
    no_repeat_ngram_size: int = arg(0, "forbid repeating any n-gram of this size (0 = off)", ge=0)
    sampling: bool = arg(False, "sample instead of beam search (beam = number of samples)")
    sampling_topk: int = arg(-1, "sample only from the k most likely tokens, k at most the target vocabulary's "
                                 "size (-1 = off)", ge=-1)
    sampling_topp: float = arg(-1.0, "sample only from the fewest best tokens whose probability sums to >= p (-1 = off)",
                                 ge=-1, le=1)
    temperature: float = arg(1.0, "logits are divided by this before the softmax (<1 sharper, >1 flatter)", gt=0)
    print_alignment: bool = arg(False, "also keep each hypothesis' attention over the source and print "
                                       "fairseq's A- lines (srcpos-tgtpos of the most attended source token)")
    alignment_layer: Optional[int] = arg(None, "decoder layer whose attention gives alignments (None: the "
                                               "model's default: the Transformer's last layer, ConvS2S' mean)")
    verifier: str = arg("", "a registered verifier (seqkit.verify; a plugin's with common.user_dir): keep, per "
                            "input, the first of all beam hypotheses it accepts, printed as a V- line (empty: off)")
    verifier_timeout: float = arg(10.0, "generation.verifier: seconds one check may take; then its worker process "
                                        "is killed and the check counts as timed out", gt=0)
    verifier_workers: int = arg(1, "generation.verifier: worker processes checking hypotheses of different inputs "
                                   "side by side", ge=1)
    verifier_model: str = arg("", "generation.verifier: the checkpoint a verifier measures with, loaded once per worker "
                                  "(attributes: a sentence classifier); refused for a verifier that reads none")


def check_generation_config(cfg: GenerationConfig, vocab_size: int = 0) -> None:
    """Raise a one-line ``SeqkitError`` for settings the search cannot honour: each field's range
    (``arg(ge=...)``), then the rules that tie fields together; with the target ``vocab_size``
    known, a ``sampling_topk`` above it (it would silently mean the whole vocabulary)."""
    check_ranges(cfg, "generation.")
    if not 1 <= cfg.nbest <= cfg.beam:
        raise SeqkitError(f"generation.nbest must be between 1 and beam ({cfg.beam}), got {cfg.nbest}")
    if cfg.sampling_topp != -1.0 and not 0.0 < cfg.sampling_topp <= 1.0:
        raise SeqkitError(f"generation.sampling_topp must be in (0, 1] or -1, got {cfg.sampling_topp}")
    if cfg.sampling_topk == 0 or cfg.sampling_topk < -1:
        raise SeqkitError(f"generation.sampling_topk must be >= 1 or -1, got {cfg.sampling_topk}")
    if (cfg.sampling_topk > 0 or cfg.sampling_topp > 0) and not cfg.sampling:
        raise SeqkitError("generation.sampling_topk/sampling_topp need generation.sampling=true")
    if vocab_size and cfg.sampling_topk > vocab_size:
        raise SeqkitError(f"generation.sampling_topk={cfg.sampling_topk} is more than the target vocabulary's "
                          f"{vocab_size} tokens: at most {vocab_size} (-1: no top-k cut)")


def merge_generation(cfg: GenerationConfig, overrides: Dict[str, Any]) -> GenerationConfig:
    """``cfg`` with keyword ``overrides`` (a Python caller's ``beam=5``); unknown names are one error."""
    names = {f.name for f in dataclasses.fields(GenerationConfig)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise SeqkitError(f"unknown generation option(s) {', '.join(unknown)}; valid: {', '.join(sorted(names))}")
    return dataclasses.replace(cfg, **overrides)


def search_config(cfg: GenerationConfig) -> GenerationConfig:
    """The settings the search runs with: with a verifier, every hypothesis of the beam is kept
    (``nbest = beam``) for checking, while ``nbest`` still says how many are printed."""
    return dataclasses.replace(cfg, nbest=cfg.beam) if cfg.verifier else cfg


def max_target_len(src_len: int, cfg: GenerationConfig, max_tgt: int) -> int:
    """Max target length (eos excluded) of a source of ``src_len`` tokens (eos included):
    ``min(int(max_len_a * src_len + max_len_b), max_tgt - 1)``, floored at 0."""
    return min(max(int(src_len * cfg.max_len_a + cfg.max_len_b), 0), max(max_tgt - 1, 0))


def check_quantize(quantize: str, device: str, engine: str = "seqkit", precision: str = "fp32") -> None:
    """One-line errors for a ``quantize`` setting the engine, device or precision cannot honour."""
    if quantize not in QUANTIZE:
        raise SeqkitError(f"quantize={quantize!r}: choose one of {', '.join(QUANTIZE)}")
    if quantize == "none":
        return
    if engine != "seqkit":
        raise SeqkitError("quantize=int8 is seqkit's engine; engine=ctranslate2 takes compute_type=int8")
    if device != "cpu":
        raise SeqkitError(f"quantize=int8 runs on CPU (its kernels are fbgemm's), not on {device}")
    if precision != "fp32":
        raise SeqkitError(f"quantize=int8 computes around fp32 activations: drop common.precision={precision}")


@dataclass
class InContextConfig:
    verbalizers: List[str] = arg(help="a language model checkpoint on a classification folder: one word (or words) "
                                      "per label, in the order of the folder's dict.label.txt, classifies in context "
                                      "(seqkit.generation.in_context); empty: off", factory=list)
    shots: int = arg(8, "k: labelled training examples put in each example's prompt (0: zero-shot)", ge=0)
    template: str = arg("{0} It was {label} .", "one example as the language model reads it: {0} (and {1} for "
                                                "pairs) the text, {label} the verbalizer, last")
    seed: int = arg(1, "seed of the demonstrations drawn for each example")
    calibrate: bool = arg(False, "contextual calibration (Zhao et al., 2021): divide each label's probability by "
                                 "its probability after the same demonstrations and a content-free query")
    content_free: str = arg("N/A", "the content-free text put in every column of the calibration query")


@dataclass
class GenerateTaskConfig:
    data: str = arg("data-bin", "folder written by seqkit-preprocess holding gen_subset (not read with input=-)")


@dataclass
class GenerateConfig:
    common: CommonConfig = arg(help="seeds, precision, device, logging", factory=CommonConfig)
    generation: GenerationConfig = arg(help="beam search / sampling settings", factory=GenerationConfig)
    task: GenerateTaskConfig = arg(help="where the binarized splits are; the rest of the task comes from the "
                                        "checkpoint", factory=GenerateTaskConfig)
    icl: InContextConfig = arg(help="in-context classification with a language model checkpoint (icl.verbalizers)",
                               factory=InContextConfig)
    path: str = arg("", "checkpoint to load (model, dictionaries and tokenizer all come from it)")
    gen_subset: str = arg("test", "binarized split of task.data to translate (ignored with input=-)")
    input: str = arg("", "'-' reads raw text lines from stdin instead of a binarized split")
    batch_size: int = arg(64, "sentences per batch", ge=1)
    max_tokens: int = arg(0, "also cap a batch's source tokens (0: no cap)", ge=0)
    buffer_size: int = arg(0, "with input=-, lines read before translating a chunk (0: 1 on a terminal, else "
                              "batch_size x the batches searched at once)", ge=0)
    inter_threads: int = arg(0, "batches searched at once on CPU, each on common.threads / inter_threads threads "
                                "(0: 2 on >= 2 threads when batch_size x beam >= 64, else 1; sampling: 1)", ge=0)
    engine: str = arg("seqkit", "search engine: seqkit (every model) or ctranslate2 (Transformer translation "
                                "models, needs seqkit[ct2]; exports the checkpoint on first use)",
                      choices=("seqkit", "ctranslate2"))
    compute_type: str = arg("default", "engine=ctranslate2: its compute type (default: the export's weights; int8, "
                                       "int8_float32, bfloat16, float32, ...)")
    quantize: str = arg("none", "engine=seqkit on CPU: int8 keeps every Linear layer's weights (the tied output "
                                "projection's too) in int8 and quantizes activations per call (torch's dynamic "
                                "quantization); none: fp32", choices=QUANTIZE)
    packed_weights: bool = arg(True, "engine=seqkit on CPU at fp32 without quantize: Linear weights packed once "
                                     "in oneDNN's layout instead of per call (a decoder step about 2x faster at "
                                     "batch 1; results equal up to float rounding); false: F.linear")
    intra_threads: int = arg(0, "engine=ctranslate2: threads per batch (0: common.threads / inter_threads)", ge=0)
    ctranslate2_dir: str = arg("", "engine=ctranslate2: the export folder to use, rewritten when it does not match "
                                   "the checkpoint (empty: a cache folder keyed by the checkpoint's sha256)")
    results_path: Optional[str] = arg(None, "write generate-<subset>.txt into this folder instead of stdout")
    distill_to: str = arg("", "sequence-level distillation (Kim & Rush, 2016): write a copy of task.data into this "
                              "new folder with gen_subset's targets replaced by each sentence's best hypothesis "
                              "(the teacher's token ids), and print nothing; train a student on it")
    topk: int = arg(1, "classification checkpoints: also print the next most probable labels, k in all; masked-LM "
                       "checkpoints: fillers per <mask> slot (1: the default 5)", ge=1)


# the settings every run of seqkit's engine reads, whatever the checkpoint
_ANY_MODEL = ("path", "engine", "quantize", "common.seed", "common.precision", "common.device", "common.threads",
              "common.user_dir", "common.compile", "common.compile_mode", "common.param_dtype")
_KINDS = {"seq2seq": "a translation checkpoint", "lm": "a language-model checkpoint",
          "classifier": "a classification checkpoint", "tagger": "a tagging checkpoint",
          "masked_lm": "a masked-LM checkpoint", "icl": "a language model classifying in context (icl.verbalizers)"}


def _generation_reads(cfg: GenerateConfig, distilling: bool, why: List[Tuple[str, str]]) -> List[str]:
    """The ``generation.*`` keys a search reads; ``why`` gets the reason for each left out."""
    g, skip = cfg.generation, set()
    if not g.print_alignment:
        skip.add("alignment_layer")
        why.insert(0, ("generation.alignment_layer", "it picks the layer of generation.print_alignment=true"))
    checks = ("verifier_timeout", "verifier_workers", "verifier_model")
    if distilling:
        skip |= {"verifier", *checks}
        why[:0] = [(f"generation.{name}", "distill_to= writes each sentence's best hypothesis, not a verified one")
                   for name in ("verifier", *checks)]
    elif not g.verifier:
        skip |= set(checks)
        why[:0] = [(f"generation.{name}", "it sets up generation.verifier's checks, and no generation.verifier is "
                                          "set") for name in checks]
    elif not reads_model(g.verifier):
        skip.add("verifier_model")
        why.insert(0, ("generation.verifier_model", f"the {g.verifier} verifier measures without a checkpoint"))
    return [f"generation.{f.name}" for f in dataclasses.fields(GenerationConfig) if f.name not in skip]


def generate_reads(cfg: GenerateConfig, kind: str, labels: int = 0, attention: bool = True) -> Reads:
    """The settings ``seqkit-generate`` reads for a checkpoint of ``kind`` (a task's ``model_kind``,
    or ``icl``), given where its input comes from (``input=-`` or a split of ``task.data``);
    ``labels``: a classifier's number of labels (``topk`` above it is refused); ``attention``:
    whether its model runs attention kernels (``common.attention_kernels``)."""
    keys = list(_ANY_MODEL) + (["common.attention_kernels"] if attention else [])
    why = [("generation", "a classifier or tagger predicts in one forward pass, without search or sampling"),
           ("common.attention_kernels", "the model runs no attention kernel"),
           ("common.log_interval", "generation logs once, at the end"),
           ("common.log_format", "generation logs plain lines"),
           ("common.fp16_init_loss_scale", "loss scaling is training's"),
           ("common.fp16_scale_window", "loss scaling is training's"),
           ("common.fp16_min_loss_scale", "loss scaling is training's"),
           ("common.tensorboard_logdir", "TensorBoard logs are seqkit-train's"),
           ("gen_subset", "input=- reads stdin"), ("task.data", "input=- reads stdin"),
           ("buffer_size", "it counts stdin lines (input=-)"),
           ("compute_type", "engine=ctranslate2's"), ("intra_threads", "engine=ctranslate2's"),
           ("ctranslate2_dir", "engine=ctranslate2's")]
    stdin = cfg.input == "-"
    keys += ["input", "buffer_size"] if stdin else ["gen_subset", "task.data"]
    if kind in ("seq2seq", "lm"):
        keys += ["batch_size", "max_tokens", "inter_threads", "results_path"]
        if cfg.engine == "ctranslate2":
            keys += ["compute_type", "intra_threads", "ctranslate2_dir"]
        elif cfg.common.precision == "fp32" and cfg.quantize == "none":
            keys.append("packed_weights")
        if kind == "seq2seq" and not stdin:
            keys.append("distill_to")
        keys += _generation_reads(cfg, distilling=kind == "seq2seq" and not stdin and bool(cfg.distill_to), why=why)
        why += [("topk", "it counts a classifier's labels or a masked LM's fillers"),
                ("packed_weights", "weights are packed at fp32 without quantize")]
    elif kind in ("classifier", "tagger", "icl"):
        keys += ["batch_size", "results_path"]
        if kind != "tagger":
            keys.append("topk")
        if kind == "icl":
            keys += ["icl.verbalizers", "icl.shots", "icl.template", "icl.calibrate"]
            keys += ["icl.seed"] if cfg.icl.shots > 0 else []
            keys += ["icl.content_free"] if cfg.icl.calibrate else []
            why += [("icl.seed", "it draws the demonstrations, and icl.shots=0 has none"),
                    ("icl.content_free", "it is the calibration query of icl.calibrate=true")]
        why += [("topk", "a tagger prints one tag per word"), ("max_tokens", "batches are batch_size examples"),
                ("inter_threads", "one batch at a time"), ("packed_weights", "it packs a search's weights"),
                ("distill_to", "it writes a translation's best hypotheses")]
    elif kind == "masked_lm":
        keys = [k for k in keys if k != "buffer_size"] + ["input", "topk"]
        why += [("buffer_size", "<mask> lines are filled one at a time"),("results_path", "a masked LM's fillers are printed on stdout"),
                ("batch_size", "<mask> lines are filled one at a time")]
    if kind not in ("seq2seq", "lm"):
        why.insert(0, ("generation.verifier", "a verifier checks generated text, and this checkpoint generates none"))
    if kind != "icl":
        why.append(("icl", "icl.verbalizers turns a language-model checkpoint into an in-context classifier"))
    reads = Reads(f"seqkit-generate on {_KINDS.get(kind, f'a {kind} checkpoint')}", tuple(keys), tuple(why))
    if "topk" in keys and labels and cfg.topk > labels:
        raise SeqkitError(f"topk={cfg.topk}: the checkpoint has {labels} labels; at most topk={labels}")
    return reads
