"""Load a checkpoint once, then translate: binarized splits, streams of raw lines, Python lists.

    from seqkit.generation.translator import Translator
    t = Translator.from_checkpoint("checkpoints/checkpoint_best.pt", beam=5)
    t.translate(["Ein Hund läuft im Schnee."])  # -> ["A dog runs in the snow."]

A language-model checkpoint works the same way: each input line is a prompt and the output its
continuation (``Translator.from_checkpoint("lm.pt", beam=1, sampling=True, sampling_topp=0.9)``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Deque, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import torch
from omegaconf import MISSING

from seqkit.allocator import keep_freed_memory
from seqkit.cpu import prepare_low_precision
from seqkit.common_config import CommonConfig
from seqkit.data.pair_dataset import collate_raw
from seqkit.dataclass_utils import arg
from seqkit.errors import SeqkitError
from seqkit.generation.config import GenerationConfig
from seqkit.generation.load import load_for_inference
from seqkit.generation.packed import pack_linear_weights
from seqkit.generation.quantize import QUANTIZE, check_quantize, quantize_int8
from seqkit.generation.search import SequenceGenerator

log = logging.getLogger("seqkit.generate")


@dataclass
class GenerateConfig:
    common: CommonConfig = arg(help="seeds, precision, device, logging", factory=CommonConfig)
    generation: GenerationConfig = arg(help="beam search / sampling settings", factory=GenerationConfig)
    task: Any = arg(MISSING, "the task; task.data locates binarized splits (hydra group `task`)")
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
    topk: int = arg(1, "classification checkpoints: also print the next most probable labels, k in all; masked-LM "
                       "checkpoints: fillers per <mask> slot (1: the default 5)", ge=1)


def hard_alignment(attention: torch.Tensor) -> List[Tuple[int, int]]:
    """fairseq's hard alignment: for each target token but the final eos, the most attended source
    token, eos excluded -> ``(source position, target position)`` pairs. ``attention`` ``(T, S)``."""
    T, S = attention.shape
    if T < 2 or S < 2:
        return []
    best = attention[: T - 1, : S - 1].argmax(dim=1).tolist()  # (T-1,)
    return [(s, t) for t, s in enumerate(best)]


def _merge_generation(cfg: GenerationConfig, overrides: Dict[str, Any]) -> GenerationConfig:
    names = {f.name for f in dataclasses.fields(GenerationConfig)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise SeqkitError(f"unknown generation option(s) {', '.join(unknown)}; valid: {', '.join(sorted(names))}")
    return dataclasses.replace(cfg, **overrides)


def ct2_engine(task: Any, model: Any, path: str, gen_cfg: GenerationConfig, engine: str, device: str, threads: int,
               batch_size: int, inter_threads: int, intra_threads: int, compute_type: str, export_dir: str) -> Any:
    """A :class:`~seqkit.generation.ct2_engine.CT2Engine` on ``path``'s export for engine=ctranslate2, else None."""
    if engine == "seqkit":
        return None
    if engine != "ctranslate2":
        raise SeqkitError(f"engine={engine!r}: choose seqkit or ctranslate2")
    from seqkit.export import cached_export
    from seqkit.generation.ct2_engine import CT2Engine, check_compute_type, check_supported, default_threads

    if getattr(task, "model_kind", "seq2seq") != "seq2seq" or type(model).__name__ != "TransformerModel":
        raise SeqkitError(f"engine=ctranslate2 takes Transformer translation models; {path} holds a "
                          f"{type(model).__name__}: use engine=seqkit")
    check_supported(gen_cfg)
    check_compute_type(compute_type)  # before the export, which can take seconds
    inter, intra = default_threads(threads, batch_size, gen_cfg.beam, inter_threads)
    folder = cached_export(path, export_dir)
    return CT2Engine(task, folder, gen_cfg, model.max_positions()[1], device, compute_type, inter,
                     intra_threads or intra)


def pack_for_search(model: torch.nn.Module, packed_weights: bool, device: str, precision: str, quantize: str,
                    engine: Any) -> int:
    """Prepack ``model``'s Linear weights (see :mod:`seqkit.generation.packed`) where seqkit's own
    engine runs it on CPU at fp32 without quantization; returns how many layers were packed."""
    if not packed_weights or engine is not None or device != "cpu" or precision != "fp32" or quantize != "none":
        return 0
    return pack_linear_weights(model)


class Translator:
    """A model, its task (dictionaries, tokenizer) and a generator, ready to translate."""

    def __init__(self, task: Any, model: torch.nn.Module, gen_cfg: GenerationConfig, device: torch.device,
                 precision: str = "fp32", inter_threads: int = 0, engine: Any = None):
        keep_freed_memory()  # beam search reallocates the same few-MB tensors every step
        self.task, self.model, self.device = task, model.eval(), device
        self.gen_cfg = gen_cfg
        self.generator = SequenceGenerator(task.tgt_dict, gen_cfg)
        self.autocast_dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        if self.autocast_dtype is not None and device.type == "cpu":
            # the key/value cache grows every step: a new shape for each matmul
            prepare_low_precision(precision, log, warn=engine is None)
        if inter_threads < 0:
            raise SeqkitError(f"inter_threads={inter_threads} must be >= 0 (0: automatic)")
        self.inter_threads = inter_threads
        self.engine = engine  # a CT2Engine searches instead of seqkit's SequenceGenerator

    def streams(self, batch_size: int = 64) -> int:
        """Batches searched at once for batches of ``batch_size`` (see ``GenerateConfig.inter_threads``)."""
        if self.engine is not None:
            return self.engine.inter_threads
        if self.device.type != "cpu" or self.gen_cfg.sampling:
            return 1  # one device queue; sampling draws from one seeded generator, in batch order
        if self.inter_threads:
            return min(self.inter_threads, max(1, torch.get_num_threads()))
        # measured on 2 cores, beam 5: side by side is 15-20% faster at batch 64 and ~20% slower at
        # batch 1, where the ops are so small that the two threads mostly wait for Python's lock
        big = batch_size * self.gen_cfg.beam >= 64
        return 2 if big and torch.get_num_threads() >= 2 else 1

    @classmethod
    def from_checkpoint(cls, path: str, device: str = "cpu", precision: str = "fp32",
                        gen_cfg: Optional[GenerationConfig] = None, task_overrides: Optional[Dict[str, Any]] = None,
                        inter_threads: int = 0, engine: str = "seqkit", compute_type: str = "default",
                        intra_threads: int = 0, ctranslate2_dir: str = "", batch_size: int = 64,
                        quantize: str = "none", packed_weights: bool = True, **generation: Any) -> "Translator":
        """Build everything from one checkpoint; keyword arguments override GenerationConfig fields.
        ``engine="ctranslate2"`` searches with CTranslate2 (see :class:`GenerateConfig` for its options;
        ``batch_size`` only picks its default thread layout); ``quantize="int8"`` quantizes seqkit's,
        ``packed_weights`` prepacks its Linear weights at fp32."""
        dev = torch.device(device)
        check_quantize(quantize, dev.type, engine, precision)
        task, model = load_for_inference(path, task_overrides)
        if getattr(task, "model_kind", "seq2seq") not in ("seq2seq", "lm"):
            raise SeqkitError(f"{path} holds a {task.model_kind} model: use seqkit.generation.Classifier")
        gen_cfg = _merge_generation(gen_cfg or GenerationConfig(), generation)
        ct2 = ct2_engine(task, model, path, gen_cfg, engine, device, torch.get_num_threads(), batch_size,
                         inter_threads, intra_threads, compute_type, ctranslate2_dir)
        if quantize == "int8":
            model = quantize_int8(model)
        model = model.to(dev)
        pack_for_search(model, packed_weights, dev.type, precision, quantize, ct2)
        return cls(task, model, gen_cfg, dev, precision, inter_threads, ct2)

    def _autocast(self) -> Any:
        import contextlib

        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def _check_lengths(self, ids: Sequence[int], lengths: Sequence[int]) -> None:
        max_src = self.model.max_positions()[0]
        for sid, n in zip(ids, lengths):
            if n > max_src:
                raise SeqkitError(f"sentence {sid} has {n} tokens but the model accepts at most {max_src}")

    def generate_batches(self, sources: Sequence[List[int]], batch_size: int, max_tokens: int = 0,
                         first_id: int = 0) -> Iterator[Dict[str, Any]]:
        """Yield ``{"id": first_id + i, "hypos"}`` for each source (ids with eos), longest first.

        With :meth:`streams` > 1, that many batches are searched at once, each in a worker thread
        with its share of the torch threads; results still come in the same order."""
        order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
        self._check_lengths([first_id + i for i in order], [len(sources[i]) for i in order])
        if self.engine is None:
            yield from self._search(sources, order, batch_size, max_tokens, first_id)
            return
        hypos = self.engine.generate(sources, batch_size, max_tokens)  # CTranslate2 batches the whole list
        # at the max length seqkit's beam search ends hypotheses with a forced </s>, which CTranslate2
        # cannot: the sentences it left unfinished (degenerate, repeating outputs) are searched again
        # here (a sample is random either way: sampling keeps CTranslate2's)
        redo = [] if self.gen_cfg.sampling else [i for i in order if any(h["unfinished"] for h in hypos[i])]
        if redo:
            log.info("%d sentence(s) ran into the max length in CTranslate2: searched again by seqkit's engine", len(redo))
            for r in self._search([sources[i] for i in redo], list(range(len(redo))), batch_size, max_tokens, 0):
                hypos[redo[r["id"]]] = r["hypos"]
        for i in order:
            yield {"id": first_id + i, "hypos": hypos[i]}

    def _search(self, sources: Sequence[List[int]], order: List[int], batch_size: int, max_tokens: int,
                first_id: int) -> Iterator[Dict[str, Any]]:
        """seqkit's own search of ``sources`` in ``order`` (longest first), as :meth:`generate_batches` yields."""
        chunks, start = [], 0
        while start < len(order):
            end = start + 1
            longest = len(sources[order[start]])  # sorted longest first
            while end < len(order) and end - start < batch_size and (max_tokens <= 0 or longest * (end - start + 1) <= max_tokens):
                end += 1
            chunks.append(order[start:end])
            start = end

        def search(chunk: List[int]) -> List[Dict[str, Any]]:
            batch = collate_raw([sources[i] for i in chunk], self.task.src_dict.pad())
            with torch.inference_mode(), self._autocast():
                hypos = self.generator.generate(self.model, batch["src_tokens"].to(self.device),
                                                batch["src_lengths"].to(self.device))
            return [{"id": first_id + i, "hypos": h} for i, h in zip(chunk, hypos)]

        streams = min(self.streams(batch_size), len(chunks))
        if streams <= 1:
            for chunk in chunks:
                yield from search(chunk)
            return
        # beam search's per-step ops are small even for a batch of 64 (320 rows): two batches side
        # by side, one thread each, keep 2 cores busier than one batch split over both
        threads = max(1, torch.get_num_threads() // streams)
        pool = ThreadPoolExecutor(streams, thread_name_prefix="seqkit-search",
                                  initializer=torch.set_num_threads, initargs=(threads,))
        try:
            pending: Deque[Future] = deque()
            for chunk in chunks:
                pending.append(pool.submit(search, chunk))
                if len(pending) > streams:  # keep `streams` batches running while one is consumed
                    yield from pending.popleft().result()
            while pending:
                yield from pending.popleft().result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def hypothesis_text(self, hypo: Dict[str, Any]) -> Dict[str, Any]:
        """Pieces, text, score and positional scores of a hypothesis; with print_alignment also its
        ``attention`` ``(len(pieces) + 1, S)`` (rows: target pieces, then eos; columns: source
        pieces, then eos) and the hard ``alignment`` pairs (source position, target position)."""
        pieces = self.task.pieces(hypo["tokens"])
        out = {"pieces": pieces, "text": self.task.detokenize(pieces), "score": float(hypo["score"]),
               "positional_scores": hypo["positional_scores"].tolist()}
        if "attention" in hypo:
            out["attention"] = hypo["attention"]
            out["alignment"] = hard_alignment(hypo["attention"])
        return out

    def translate(self, sentences: Iterable[str], batch_size: int = 64) -> List[str]:
        """Best translation of each sentence, in input order."""
        return [nbest[0]["text"] for nbest in self.translate_nbest(list(sentences), batch_size)]

    def translate_nbest(self, sentences: List[str], batch_size: int = 64) -> List[List[Dict[str, Any]]]:
        """``nbest`` hypotheses per sentence (pieces, text, score, positional scores), in input order."""
        sources = [self.task.encode_source(s) for s in sentences]
        out: List[List[Dict[str, Any]]] = [[] for _ in sources]
        for r in self.generate_batches(sources, batch_size):
            out[r["id"]] = [self.hypothesis_text(h) for h in r["hypos"]]
        return out
