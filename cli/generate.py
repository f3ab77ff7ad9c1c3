"""``seqkit-generate``: translate a binarized split or raw stdin lines with a checkpoint and print
fairseq's line format (S-, T-, H-, D-, P-, and A- with generation.print_alignment=true), ordered
by sentence id."""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, BinaryIO, Dict, Iterator, List, Optional, TextIO, Union

import seqkit
from seqkit.cli.common import ConfigBuilder, parse_argv, run_main, setup_logging
from seqkit.errors import SeqkitError
from seqkit.generation.translator import GenerateConfig, Translator

PROG = "seqkit-generate"
LN2 = math.log(2)


def format_sentence(t: Translator, sid: int, source: str, target: Optional[str], hypos: List[Dict[str, Any]]) -> str:
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
    return "\n".join(lines) + "\n"


def _split_output(t: Translator, cfg: GenerateConfig, dist: Any) -> Iterator[str]:
    """The split's output in sentence order. Under torchrun every rank translates every
    world_size-th sentence and rank 0 gathers and prints them all (the others print nothing)."""
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
            return
        results = {sid: hypos for part in gathered for sid, hypos in part.items()}
    for sid in range(len(ds)):
        src = task.detokenize(task.pieces(ds.src[sid], "src"), "src")
        tgt = task.detokenize(task.pieces(ds.tgt[sid])) if with_target else None
        yield format_sentence(t, sid, src, tgt, results[sid])


def _stdin_output(t: Translator, cfg: GenerateConfig, stream: Union[BinaryIO, TextIO]) -> Iterator[str]:
    """Translate raw lines from a stream (bytes or text), ``buffer_size`` lines at a time, ids counting from 0."""
    # typed at a terminal: translate each line at once; piped: fill whole batches
    interactive = hasattr(stream, "isatty") and stream.isatty()
    buffer_size = cfg.buffer_size or (1 if interactive else cfg.batch_size * t.streams(cfg.batch_size))
    next_id, chunk = 0, []

    def flush(lines: List[str], first_id: int) -> Iterator[str]:
        sources = [t.task.encode_source(line) for line in lines]
        results = {r["id"]: r["hypos"] for r in t.generate_batches(sources, cfg.batch_size, cfg.max_tokens, first_id)}
        for i, line in enumerate(lines):
            yield format_sentence(t, first_id + i, line, None, results[first_id + i])

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


def generate(argv: Optional[List[str]] = None) -> None:
    import logging

    import torch
    from omegaconf import OmegaConf

    from seqkit.io import atomic_write_text
    from seqkit.training import distributed

    seqkit.import_builtin_components()
    cfg = OmegaConf.to_object(parse_argv(ConfigBuilder("generate", GenerateConfig), argv, PROG))
    setup_logging()
    log = logging.getLogger("seqkit.generate")
    if not cfg.path:
        raise SeqkitError("path=CHECKPOINT is required")
    if cfg.common.threads > 0:
        torch.set_num_threads(cfg.common.threads)
    torch.manual_seed(cfg.common.seed)
    dist = distributed.init(cfg.common.device)
    device = dist.device
    if dist.world_size > 1 and cfg.input == "-":
        raise SeqkitError("input=- reads stdin in one process; shard a binarized split (gen_subset) under torchrun")
    t = Translator.from_checkpoint(cfg.path, device=str(device), precision=cfg.common.precision,
                                   gen_cfg=cfg.generation, task_overrides={"data": cfg.task.data},
                                   inter_threads=cfg.inter_threads)
    t0 = time.perf_counter()
    n = 0
    if cfg.input == "-":
        # bytes, decoded here, so bad UTF-8 is one clear error whatever the locale
        source = _stdin_output(t, cfg, getattr(sys.stdin, "buffer", sys.stdin))
    elif cfg.input:
        raise SeqkitError(f"input={cfg.input!r}: only '-' (stdin) is supported; binarized data uses gen_subset")
    else:
        source = _split_output(t, cfg, dist)
    if not dist.is_main:
        list(source)  # translate this rank's share and hand it to rank 0
        distributed.cleanup()
        return
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
    distributed.cleanup()
    secs = time.perf_counter() - t0
    g = t.gen_cfg
    log.info("translated %d sentences in %.1fs (%.1f sentences/s), beam %d, lenpen %g, %d process(es)", n, secs,
             n / max(secs, 1e-9), g.beam, g.lenpen, dist.world_size)


def main(argv: Optional[List[str]] = None) -> None:
    run_main(PROG, lambda: generate(argv))


if __name__ == "__main__":
    main()
