"""``seqkit-generate``: translate a binarized split or raw stdin lines with a checkpoint and print
fairseq's line format (S-, T-, H-, D-, P-, and A- with generation.print_alignment=true), ordered
by sentence id; with ``generation.verifier=NAME``, a V- line holds the first hypothesis of the beam
that the verifier accepts (none when none does) and the log ends with "verified N of M". A classification checkpoint prints S-/T-/L- lines (label and probability, top-k
with ``topk=K``); a tagging checkpoint prints CoNLL columns (word, gold tag when known, predicted
tag), which ``seqkit-score`` scores either way. A language-model checkpoint continues the prompts
read from stdin (S- prompt, H-/D- continuation); a masked-LM checkpoint fills the ``<mask>`` slots
of stdin lines (S- line, M- slot with its top fillers and probabilities)."""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, BinaryIO, Dict, Iterator, List, Optional, Sequence, TextIO, Tuple, Union

from seqkit.cli.common import ConfigBuilder, parse_argv, run_main, setup_logging
from seqkit.core.config import check_compile, check_param_dtype
from seqkit.core.errors import SeqkitError
from seqkit.generation.base import TranslatorBase, first_verified
from seqkit.core.settings import given, refuse_unread
from seqkit.generation.config import GenerateConfig, check_quantize, generate_reads, search_config
from seqkit.verify import verifier_config
from seqkit.verify.runner import VerifierPool

PROG = "seqkit-generate"
LN2 = math.log(2)


def format_sentence(t: TranslatorBase, sid: int, source: str, target: Optional[str], hypos: List[Dict[str, Any]],
                    kept: Optional[Dict[str, Any]] = None) -> str:
    """fairseq's lines of one sentence; ``kept``: the hypothesis generation.verifier kept (a V- line)."""
    # scores are printed in base 2, as fairseq prints them
    lines = [f"S-{sid}\t{source}"]
    if target is not None:
        lines.append(f"T-{sid}\t{target}")
    for h in hypos:
        h = t.hypothesis_text(h)
        score = h["score"] / LN2
        lines.append(f"H-{sid}\t{score:.4f}\t{' '.join(h['pieces'])}")
        lines.append(f"D-{sid}\t{score:.4f}\t{h['text']}")
        lines.append("P-{}\t{}".format(sid, " ".join(f"{s / LN2:.4f}" for s in h["positional_scores"])))
        if "alignment" in h:  # fairseq's A- line: srcpos-tgtpos of each target token (eos excluded)
            lines.append(f"A-{sid}\t" + " ".join(f"{s}-{t}" for s, t in h["alignment"]))
    if kept is not None:  # the first hypothesis of the beam that the verifier accepted
        lines.append(f"V-{sid}\t{kept['score'] / LN2:.4f}\t{kept['text']}")
    return "\n".join(lines) + "\n"


def _sentences(t: TranslatorBase, cfg: GenerateConfig, pool: Optional[VerifierPool], first_id: int,
               sources: Sequence[str], targets: Sequence[Optional[str]], results: Dict[int, Any]) -> Iterator[str]:
    """The blocks of sentences ``first_id``... : the first generation.nbest hypotheses of each, and with
    a verifier (``pool``) the first of all of them that verifies."""
    nbest = cfg.generation.nbest
    hypos = [results[first_id + i] for i in range(len(sources))]
    kept: List[Any] = [None] * len(sources)
    if pool is not None:
        kept = first_verified(pool, sources, [[t.hypothesis_text(h) for h in hs] for hs in hypos])
    for i, (source, target) in enumerate(zip(sources, targets)):
        yield format_sentence(t, first_id + i, source, target, hypos[i][:nbest], kept[i])


def _split_results(t: TranslatorBase, cfg: GenerateConfig, dist: Any) -> Optional[Tuple[Any, bool, Dict[int, Any]]]:
    """``(dataset, with_target, hypotheses by sentence id)`` of the split. Under torchrun every rank
    translates every world_size-th sentence and rank 0 gathers them all (the others get None)."""
    task = t.task
    from seqkit.data.dictionary import Dictionary

    for lang, d in ((task.source_lang, task.src_dict), (task.target_lang, task.tgt_dict)):
        path = os.path.join(cfg.task.data, f"dict.{lang}.txt")
        if os.path.isfile(path) and Dictionary.load(path) != d:
            raise SeqkitError(f"{path} differs from the checkpoint's dictionary: "
                              "the data was binarized for another model")
    with_target = os.path.isfile(os.path.join(
        cfg.task.data, f"{cfg.gen_subset}.{task.source_lang}-{task.target_lang}.{task.target_lang}.idx"))
    ds = task.load_dataset(cfg.gen_subset, with_target=with_target)
    mine = list(range(dist.rank, len(ds), dist.world_size))
    sources = [ds.src[i].tolist() for i in mine]
    results: Dict[int, List[Dict[str, Any]]] = {}
    for r in t.generate_batches(sources, cfg.batch_size, cfg.max_tokens):
        results[mine[r["id"]]] = r["hypos"]
    if dist.world_size > 1:
        import torch.distributed as torch_dist

        gathered: List[Any] = [None] * dist.world_size if dist.is_main else None
        torch_dist.gather_object(results, gathered, dst=0)
        if not dist.is_main:
            return None
        results = {sid: hypos for part in gathered for sid, hypos in part.items()}
    return ds, with_target, results


def _split_output(t: TranslatorBase, cfg: GenerateConfig, dist: Any, pool: Optional[VerifierPool]) -> Iterator[str]:
    """The split's output in sentence order (rank 0 only under torchrun)."""
    found = _split_results(t, cfg, dist)
    if found is None:
        return
    ds, with_target, results = found
    task = t.task
    sources = [task.detokenize(task.pieces(ds.src[sid], "src"), "src") for sid in range(len(ds))]
    targets = [task.detokenize(task.pieces(ds.tgt[sid])) if with_target else None for sid in range(len(ds))]
    yield from _sentences(t, cfg, pool, 0, sources, targets, results)


def _distill(t: TranslatorBase, cfg: GenerateConfig, dist: Any) -> int:
    """distill_to=DIR: the data folder with gen_subset's targets replaced by the best hypotheses."""
    from seqkit.data.distilled import write_distilled_folder
    from seqkit.generation.base import as_list

    found = _split_results(t, cfg, dist)
    if found is None:
        return 0
    ds, _, results = found
    task, g = t.task, t.gen_cfg
    best = [[int(i) for i in as_list(results[sid][0]["tokens"])] for sid in range(len(ds))]
    write_distilled_folder(cfg.task.data, cfg.distill_to, cfg.gen_subset, task.source_lang, task.target_lang, best,
                           task.tgt_dict.eos_index, len(task.tgt_dict),
                           {"teacher": os.path.abspath(cfg.path), "beam": g.beam, "lenpen": g.lenpen,
                            "sampling": g.sampling})
    return len(ds)


def _stdin_output(t: TranslatorBase, cfg: GenerateConfig, stream: Union[BinaryIO, TextIO],
                  pool: Optional[VerifierPool]) -> Iterator[str]:
    """Translate raw lines from a stream (bytes or text), ``buffer_size`` lines at a time, ids counting from 0."""
    # typed at a terminal: translate each line at once; piped: fill whole batches
    interactive = hasattr(stream, "isatty") and stream.isatty()
    buffer_size = cfg.buffer_size or (1 if interactive else cfg.batch_size * t.streams(cfg.batch_size))
    next_id, chunk = 0, []

    def flush(lines: List[str], first_id: int) -> Iterator[str]:
        sources = [t.task.encode_source(line) for line in lines]
        results = {r["id"]: r["hypos"] for r in t.generate_batches(sources, cfg.batch_size, cfg.max_tokens, first_id)}
        yield from _sentences(t, cfg, pool, first_id, lines, [None] * len(lines), results)

    for lineno, raw in enumerate(stream, 1):
        try:
            chunk.append((raw if isinstance(raw, str) else raw.decode("utf-8")).rstrip("\r\n"))
        except UnicodeDecodeError as e:
            raise SeqkitError(f"stdin line {lineno}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
        if len(chunk) >= buffer_size:
            yield from flush(chunk, next_id)
            next_id, chunk = next_id + len(chunk), []
    if chunk:
        yield from flush(chunk, next_id)


# -- classification and tagging checkpoints ----------------------------------------------------------


def format_labels(c: Any, sid: int, texts: Sequence[str], gold: Any, result: Dict[str, Any]) -> str:
    """Classification: ``S-``, ``T-`` (gold, when known) and ``L-`` (label, probability, then the
    next most probable labels) lines. Tagging: CoNLL lines ``word [gold] predicted`` and a blank line."""
    if c.per_token:
        rows = [f"{w} {g} {p}" if gold is not None else f"{w} {p}"
                for w, g, p in zip(texts, gold or texts, result["tags"])]
        return "\n".join(rows) + "\n\n"
    lines = [f"S-{sid}\t" + "\t".join(texts)]
    if gold is not None:
        lines.append(f"T-{sid}\t{gold}")
    lines.append(f"L-{sid}\t" + "\t".join(f"{label}\t{p:.4f}" for label, p in result["topk"]))
    return "\n".join(lines) + "\n"


def _label_split_output(c: Any, cfg: Any) -> Iterator[str]:
    """Predictions for a binarized split, in example order, with the gold labels where stored."""
    from seqkit.core.io import read_all_lines
    from seqkit.data.labelled_dataset import FIRST_TAG

    # a split without labels is predicted only (tagging loads its label stream anyway: the word starts)
    with_target = not c.per_token and os.path.isfile(os.path.join(cfg.task.data, f"{cfg.gen_subset}.label.idx"))
    ds = c.task.load_dataset(cfg.gen_subset, with_target=with_target)
    text_path = os.path.join(cfg.task.data, f"{cfg.gen_subset}.text.txt")
    sources = [ds.src[i].tolist() for i in range(len(ds))]
    if os.path.isfile(text_path):
        texts = [tuple(line.split(" ") if c.per_token else line.split("\t")) for line in read_all_lines(text_path)]
    else:  # older folders: the pieces stand in for the words
        texts = [tuple(c.task.src_dict.string(s)) for s in sources]
    if len(texts) != len(ds):
        raise SeqkitError(f"{text_path} has {len(texts)} lines but the split has {len(ds)} examples")
    starts = [ds.word_starts(i).tolist() for i in range(len(ds))] if c.per_token else None
    results = c.predict_ids(sources, starts, cfg.batch_size, cfg.topk)
    for i, r in enumerate(results):
        gold = None
        if ds.labels is not None:
            stored = ds.labels[i].tolist()
            if c.per_token:
                tags = [v - FIRST_TAG for v in stored if v >= FIRST_TAG - 1]
                gold = [c.labels[t] for t in tags] if all(t >= 0 for t in tags) else None
                if len(texts[i]) != len(r["tags"]):
                    raise SeqkitError(f"{text_path}:{i + 1}: {len(texts[i])} words but {len(r['tags'])} word starts")
            else:
                gold = c.labels[stored[0]]
        yield format_labels(c, i, texts[i], gold, r)


def _label_stdin_output(c: Any, cfg: Any, stream: Union[BinaryIO, TextIO]) -> Iterator[str]:
    """Predictions for raw lines: a sentence, ``first<TAB>second`` for pairs, or the words of a
    sentence to tag; ``buffer_size`` (or ``batch_size``) lines at a time."""
    interactive = hasattr(stream, "isatty") and stream.isatty()
    buffer_size = cfg.buffer_size or (1 if interactive else cfg.batch_size)
    next_id, chunk = 0, []

    def flush(lines: List[str], first_id: int) -> Iterator[str]:
        ids, starts, texts = c.encode(lines)
        results = c.predict_ids(ids, starts if c.per_token else None, cfg.batch_size, cfg.topk)
        for i, (t, r) in enumerate(zip(texts, results)):
            yield format_labels(c, first_id + i, t, None, r)

    for lineno, raw in enumerate(stream, 1):
        try:
            line = (raw if isinstance(raw, str) else raw.decode("utf-8")).rstrip("\r\n")
        except UnicodeDecodeError as e:
            raise SeqkitError(f"stdin line {lineno}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
        if not line.strip():
            raise SeqkitError(f"stdin line {lineno}: empty line")
        chunk.append(line)
        if len(chunk) >= buffer_size:
            yield from flush(chunk, next_id)
            next_id, chunk = next_id + len(chunk), []
    if chunk:
        yield from flush(chunk, next_id)


def _cloze(task: Any, model: Any, device: Any, cfg: Any, stream: Union[BinaryIO, TextIO]) -> None:
    """A masked-LM checkpoint fills the ``<mask>`` slots of stdin lines: S- and M- lines, the
    ``topk`` fillers of each slot (5 unless topk is set above 1)."""
    from seqkit.generation.cloze import Cloze

    if cfg.input != "-":
        raise SeqkitError("a masked language model fills <mask> slots: pass input=- and lines on stdin")
    cloze = Cloze(task, model, device)
    k = cfg.topk if cfg.topk > 1 else 5
    for lineno, raw in enumerate(stream, 1):
        try:
            line = (raw if isinstance(raw, str) else raw.decode("utf-8")).rstrip("\r\n")
        except UnicodeDecodeError as e:
            raise SeqkitError(f"stdin line {lineno}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
        sys.stdout.write(cloze.format(lineno - 1, line, cloze.fill([line], topk=k)[0]))
        sys.stdout.flush()


class _OneProcess:
    """What engine=ctranslate2 runs in: one process (CTranslate2 threads itself), no torch.distributed."""

    rank, world_size, is_main = 0, 1, True


def _ct2_translator(cfg: GenerateConfig) -> TranslatorBase:
    """engine=ctranslate2: a CT2Translator on the checkpoint's export, without torch when the export exists."""
    from seqkit.generation.ct2_engine import CT2Translator

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise SeqkitError("engine=ctranslate2 runs in one process (it threads itself): drop torchrun")
    refuse_unread(given(), generate_reads(cfg, "seq2seq"))
    check_quantize(cfg.quantize, "cpu", cfg.engine, cfg.common.precision)
    def fallback(threads: int, device: str) -> TranslatorBase:  # seqkit's engine: torch is imported only here
        from seqkit.generation.translator import Translator

        return Translator.fallback_for(cfg.path, search_config(cfg.generation), {"data": cfg.task.data},
                                       cfg.common.attention_kernels)(threads, device)

    return CT2Translator.from_checkpoint(
        cfg.path, search_config(cfg.generation), {"data": cfg.task.data}, fallback=fallback, engine=cfg.engine,
        export_dir=cfg.ctranslate2_dir,
        compute_type=cfg.compute_type, device=cfg.common.device, threads=cfg.common.threads,
        batch_size=cfg.batch_size, inter_threads=cfg.inter_threads, intra_threads=cfg.intra_threads,
        seed=cfg.common.seed)


def _seqkit_translator(cfg: GenerateConfig) -> Tuple[Any, Any]:
    """engine=seqkit: ``(translator or classifier, distributed info)``; ``(None, info)`` once a
    masked-LM checkpoint has filled stdin's slots."""
    import logging

    import torch

    from seqkit.core.checkpoints import load_for_inference
    from seqkit.generation.quantize import quantize_int8
    from seqkit.generation.translator import Translator, prepare_for_search
    from seqkit.models.modules.attention import uses_sdpa
    from seqkit.models.modules.kernels import use_attention_kernels
    from seqkit.training import distributed

    if cfg.common.threads > 0:
        torch.set_num_threads(cfg.common.threads)
    torch.manual_seed(cfg.common.seed)
    dist = distributed.init(cfg.common.device)
    device = dist.device
    kernels = use_attention_kernels(cfg.common.attention_kernels, device)  # a bad setting fails before any loading
    log = logging.getLogger("seqkit.generate")
    if dist.world_size > 1 and cfg.input == "-":
        raise SeqkitError("input=- reads stdin in one process; shard a binarized split (gen_subset) under torchrun")
    check_quantize(cfg.quantize, device.type, cfg.engine, cfg.common.precision)
    if cfg.icl.verbalizers:
        icl = _in_context(cfg, device)
        if uses_sdpa(icl.model):
            log.info("%s", kernels)
        return icl, dist
    task, model = load_for_inference(cfg.path, {"data": cfg.task.data})
    kind = getattr(task, "model_kind", "seq2seq")
    refuse_unread(given(), generate_reads(cfg, kind, len(getattr(task, "labels", None) or ()), uses_sdpa(model)))
    if uses_sdpa(model):  # once the checkpoint has loaded: its errors come first; a BiLSTM runs no kernel
        log.info("%s", kernels)
    if cfg.quantize == "int8":
        model = quantize_int8(model)
    if kind == "masked_lm":
        _cloze(task, model.to(device), device, cfg, getattr(sys.stdin, "buffer", sys.stdin))
        return None, dist
    if kind in ("classifier", "tagger"):
        from seqkit.generation.classifier import Classifier

        return Classifier(task, model.to(device), device, cfg.common.precision), dist
    model = prepare_for_search(model, device, cfg.common.precision, cfg.quantize, cfg.packed_weights)
    return Translator(task, model, search_config(cfg.generation), device, cfg.common.precision, cfg.inter_threads), dist


def _in_context(cfg: GenerateConfig, device: Any) -> Any:
    """icl.verbalizers: a language model classifies task.data's examples from demonstrations."""
    from seqkit.core.checkpoints import load_for_inference
    from seqkit.models.modules.attention import uses_sdpa
    from seqkit.core.registry import TASKS
    from seqkit.generation.in_context import InContextClassifier

    lm_task, lm = load_for_inference(cfg.path)
    if getattr(lm_task, "model_kind", "") != "lm":
        raise SeqkitError(f"icl.verbalizers: {cfg.path} holds a {getattr(lm_task, 'model_kind', 'seq2seq')} model; "
                          "in-context classification needs a language model")
    if getattr(lm, "prefix_lm", False):
        raise SeqkitError(f"icl.verbalizers: {cfg.path} is a prefix LM (task.prefix_length); in-context "
                          "classification scores each label's words causally after the prompt: use a causal LM")
    task = TASKS.build(TASKS.make_config({"name": "classification", "data": cfg.task.data}))
    if task.per_token:
        raise SeqkitError("icl.verbalizers: in-context classification labels sentences, not tokens")
    refuse_unread(given(), generate_reads(cfg, "icl", len(task.labels), uses_sdpa(lm)))
    if not task.src_dict.is_prefix_of(lm_task.src_dict):
        raise SeqkitError(f"{cfg.task.data} was binarized with another dictionary than {cfg.path}'s: run "
                          f"seqkit-preprocess task=classification vocab_from={cfg.path}")
    if cfg.quantize == "int8":  # the language model is all the work: its Linear/LSTM layers in int8
        from seqkit.generation.quantize import quantize_int8

        lm = quantize_int8(lm)
    return InContextClassifier(task, lm.to(device), device, cfg.icl, cfg.common.precision,
                               eos_prefix=getattr(lm_task.cfg, "eos_prefix", True))


def generate(argv: Optional[List[str]] = None) -> None:
    import logging

    from omegaconf import OmegaConf

    # no torch before it is needed: engine=ctranslate2 on an existing export runs without it
    cfg = OmegaConf.to_object(parse_argv(ConfigBuilder("generate", GenerateConfig), argv, PROG))
    setup_logging()
    log = logging.getLogger("seqkit.generate")
    check_compile(cfg.common, PROG)
    check_param_dtype(cfg.common, PROG)
    if not cfg.path:
        raise SeqkitError("path=CHECKPOINT is required")
    if cfg.input and cfg.input != "-":
        raise SeqkitError(f"input={cfg.input!r}: only '-' (stdin) is supported; binarized data uses gen_subset")
    if cfg.distill_to:
        from seqkit.data.distilled import check_destination

        if cfg.input == "-":
            raise SeqkitError("distill_to= translates a binarized split (gen_subset), not input=-")
        check_destination(cfg.distill_to, cfg.task.data)
    if cfg.engine == "ctranslate2":
        t: Any = _ct2_translator(cfg)
        dist: Any = _OneProcess()
    else:
        t, dist = _seqkit_translator(cfg)
        if t is None:
            return
    task = t.task
    t0 = time.perf_counter()
    pool: Optional[VerifierPool] = None
    # stdin is read as bytes, decoded here, so bad UTF-8 is one clear error whatever the locale
    stdin = getattr(sys.stdin, "buffer", sys.stdin)
    labelling = getattr(task, "model_kind", "seq2seq") in ("classifier", "tagger")
    if labelling:
        if dist.world_size > 1 and not dist.is_main:  # prediction is one forward pass: rank 0 does it
            _cleanup(dist)
            return
        source = _label_stdin_output(t, cfg, stdin) if cfg.input == "-" else _label_split_output(t, cfg)
    elif cfg.input == "-":
        pool = _verifier_pool(cfg, dist)
        source = _stdin_output(t, cfg, stdin, pool)
    elif getattr(task, "model_kind", "seq2seq") == "lm":
        raise SeqkitError("a language model continues prompts: pass input=- and one prompt per line on stdin "
                          "(seqkit-eval-lm scores a binarized split)")
    elif cfg.distill_to:
        if getattr(task, "source_lang", None) is None or getattr(task, "tgt_dict", None) is None:
            raise SeqkitError("distill_to= needs a translation checkpoint (a source and a target side)")
        n = _distill(t, cfg, dist)
        _cleanup(dist)
        if dist.is_main:
            log.info("wrote %s: the %d sentences of %s with the teacher's best hypotheses as targets in %.1fs",
                     cfg.distill_to, n, cfg.gen_subset, time.perf_counter() - t0)
        return
    else:
        pool = _verifier_pool(cfg, dist)
        source = _split_output(t, cfg, dist, pool)
    try:
        n = _write(source, cfg, dist, log)
    finally:
        if pool is not None:
            pool.close()
    _cleanup(dist)
    if not dist.is_main:
        return
    secs = time.perf_counter() - t0
    if labelling:
        done, what = ("tagged", "sentences") if t.per_token else ("classified", "examples")
        log.info("%s %d %s in %.1fs (%.1f %s/s)", done, n, what, secs, n / max(secs, 1e-9), what)
        return
    g = t.gen_cfg
    lm = getattr(task, "model_kind", "seq2seq") == "lm"  # a language model continues prompts
    done, what = ("generated", "continuations") if lm else ("translated", "sentences")
    log.info("%s %d %s in %.1fs (%.1f %s/s), beam %d, lenpen %g, %d process(es)", done, n, what, secs,
             n / max(secs, 1e-9), what, g.beam, g.lenpen, dist.world_size)
    if pool is not None:
        log.info("%s by %s (%d checks: %d rejected)", pool.counts.summary(), pool.name, pool.counts.checks,
                 pool.counts.rejected)


def _verifier_pool(cfg: GenerateConfig, dist: Any) -> Optional[VerifierPool]:
    """generation.verifier's worker processes (rank 0 checks every sentence under torchrun); None without one."""
    g = cfg.generation
    if not g.verifier or not dist.is_main:
        return None
    try:
        verifier = verifier_config(g.verifier, g.verifier_model)
    except SeqkitError as e:
        raise SeqkitError(f"generation.verifier: {e}") from None
    return VerifierPool(verifier, g.verifier_timeout, g.verifier_workers, cfg.common.user_dir or "")


def _write(source: Iterator[str], cfg: GenerateConfig, dist: Any, log: Any) -> int:
    """Write the output blocks (stdout, or the whole file at once with results_path); their number."""
    from seqkit.core.io import atomic_write_text

    n = 0
    if not dist.is_main:
        list(source)  # translate this rank's share and hand it to rank 0
        return 0
    if cfg.results_path:
        # the whole output is written at once, atomically: a failure leaves no partial file
        blocks = list(source)
        n, text = len(blocks), "".join(blocks)
        os.makedirs(cfg.results_path, exist_ok=True)
        out = os.path.join(cfg.results_path, f"generate-{cfg.gen_subset if cfg.input != '-' else 'stdin'}.txt")
        atomic_write_text(out, text)
        log.info("wrote %s", out)
    else:
        for block in source:
            sys.stdout.write(block)
            if cfg.input == "-":  # interactive: show each translation as soon as it exists
                sys.stdout.flush()
            n += 1
    return n


def _cleanup(dist: Any) -> None:
    if not isinstance(dist, _OneProcess):
        from seqkit.training import distributed

        distributed.cleanup()


def main(argv: Optional[List[str]] = None) -> None:
    run_main(PROG, lambda: generate(argv))


if __name__ == "__main__":
    main()
