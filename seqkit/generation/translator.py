"""Load a checkpoint once, then translate: binarized splits, streams of raw lines, Python lists.

    from seqkit.generation.translator import Translator
    t = Translator.from_checkpoint("checkpoints/checkpoint_best.pt", beam=5)
    t.translate(["Ein Hund läuft im Schnee."])  # -> ["A dog runs in the snow."]

A language-model checkpoint works the same way: each input line is a prompt and the output its
continuation (``Translator.from_checkpoint("lm.pt", beam=1, sampling=True, sampling_topp=0.9)``).
"""

from __future__ import annotations

import copy
import logging
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence

import torch
from torch import nn

from seqkit.core.allocator import keep_freed_memory
from seqkit.core.checkpoints import load_for_inference
from seqkit.core.cpu import prepare_low_precision
from seqkit.core.errors import SeqkitError
from seqkit.data.pair_dataset import collate_raw
from seqkit.generation.base import TranslatorBase
from seqkit.generation.config import GenerationConfig, check_quantize, merge_generation
from seqkit.generation.packed import pack_linear_weights
from seqkit.generation.quantize import quantize_int8
from seqkit.generation.search import SequenceGenerator
from seqkit.generation.transformer_step import install_step_plan
from seqkit.models.modules.kernels import use_attention_kernels

log = logging.getLogger("seqkit.generate")
PRECISION_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def pack_for_search(model: torch.nn.Module, packed_weights: bool, device: str, precision: str, quantize: str) -> int:
    """Prepack ``model``'s Linear weights (see :mod:`seqkit.generation.packed`) where seqkit's
    engine runs it on CPU at fp32 without quantization; returns how many layers were packed."""
    if not packed_weights or device != "cpu" or precision != "fp32" or quantize != "none":
        return 0
    return pack_linear_weights(model)


def search_dtype(model: nn.Module, precision: str, device: torch.device) -> Optional[torch.dtype]:
    """The dtype seqkit's engine casts ``model``'s weights to, once, before searching at
    ``precision`` on ``device``: bf16/fp16 on CUDA, where autocast would cast every fp32 weight
    again at every decoder step (bf16 generation ran at 31 sentences/s on an H100 against fp32's
    323, cuDNN's attention plans included). None (autocast, as before) at fp32, on CPU (its bf16
    path was measured as it is: :func:`seqkit.core.cpu.prepare_low_precision`), and for models with
    recurrent layers (torch's CUDA LSTM and GRU cells took bf16 only in torch 2.3)."""
    dtype = PRECISION_DTYPES[precision]
    if dtype is None or device.type != "cuda" or any(isinstance(m, nn.RNNBase) for m in model.modules()):
        return None
    return dtype


def weights_dtype(model: nn.Module) -> Optional[torch.dtype]:
    """The dtype of ``model``'s first floating-point parameter (None without one)."""
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), None)


def cast_for_search(model: nn.Module, dtype: torch.dtype) -> bool:
    """Cast ``model``'s floating-point weights and buffers to ``dtype`` in place; False when they
    already were. The search still takes its log-softmax in fp32 (``SequenceGenerator._log_probs``
    casts the logits first), so scores and the beam's ranking are computed as at fp32. A flat
    decoder step already installed holds the weights it read: it is built again."""
    if weights_dtype(model) == dtype:
        return False
    model.to(dtype)
    if getattr(model, "step_plan", None) is not None:
        install_step_plan(model)
    log.info("weights cast to %s once for the search (not by autocast at every step)", str(dtype).split(".")[-1])
    return True


def prepare_for_search(model: nn.Module, device: torch.device, precision: str = "fp32", quantize: str = "none",
                       packed_weights: bool = True) -> nn.Module:
    """What seqkit's engine does to a loaded (and quantized) model before searching, in this order:
    its weights cast once where :func:`search_dtype` says (before the copy to the device: half the
    bytes), onto ``device``, Linear weights prepacked (:func:`pack_for_search`), and the flat
    decoder step installed (it reads the layers as they end up)."""
    dtype = search_dtype(model, precision, device)
    if dtype is not None:
        cast_for_search(model, dtype)
    model = model.to(device)
    pack_for_search(model, packed_weights, device.type, precision, quantize)
    install_step_plan(model)
    return model


class Translator(TranslatorBase):
    """A model, its task (dictionaries, tokenizer) and seqkit's search, ready to translate.

    At bf16/fp16 on CUDA the model's weights are cast in place, once (:func:`search_dtype`);
    elsewhere the search runs under autocast, unless the caller cast the weights already."""

    def __init__(self, task: Any, model: torch.nn.Module, gen_cfg: GenerationConfig, device: torch.device,
                 precision: str = "fp32", inter_threads: int = 0):
        keep_freed_memory()  # beam search reallocates the same few-MB tensors every step
        self.task, self.model, self.device = task, model.eval(), device
        self.gen_cfg = gen_cfg
        self.generator = SequenceGenerator(task.tgt_dict, gen_cfg)
        self.autocast_dtype = PRECISION_DTYPES[precision]
        cast = search_dtype(model, precision, device)
        if cast is not None:  # a no-op after prepare_for_search
            cast_for_search(model, cast)
        if self.autocast_dtype is not None and weights_dtype(model) == self.autocast_dtype:
            self.autocast_dtype = None  # weights already at the precision: nothing for autocast to cast
        if PRECISION_DTYPES[precision] is not None and device.type == "cpu":
            # the key/value cache grows every step: a new shape for each matmul
            prepare_low_precision(precision, log)
        if inter_threads < 0:
            raise SeqkitError(f"inter_threads={inter_threads} must be >= 0 (0: automatic)")
        self.inter_threads = inter_threads

    def max_source_positions(self) -> int:
        return self.model.max_positions()[0]

    def with_generation(self, **overrides: Any) -> "Translator":
        """This translator (model and task shared) searching with ``overrides`` of its generation settings."""
        other = copy.copy(self)
        other.gen_cfg = merge_generation(self.gen_cfg, overrides)
        other.generator = SequenceGenerator(self.task.tgt_dict, other.gen_cfg)
        return other

    def streams(self, batch_size: int = 64) -> int:
        """Batches searched at once for batches of ``batch_size`` (see ``GenerateConfig.inter_threads``)."""
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
                        quantize: str = "none", packed_weights: bool = True, attention_kernels: str = "auto",
                        **generation: Any) -> TranslatorBase:
        """Build everything from one checkpoint; keyword arguments override GenerationConfig fields.
        ``engine="ctranslate2"`` returns a :class:`~seqkit.generation.ct2_engine.CT2Translator` (see
        :class:`~seqkit.generation.config.GenerateConfig` for its options; ``batch_size`` only picks
        its default thread layout); ``quantize="int8"`` quantizes seqkit's, ``packed_weights``
        prepacks its Linear weights at fp32; ``attention_kernels``: ``common.attention_kernels``
        (process-wide; CUDA only)."""
        check_quantize(quantize, torch.device(device).type, engine, precision)
        gen_cfg = merge_generation(gen_cfg or GenerationConfig(), generation)
        if engine != "seqkit":
            from seqkit.generation.ct2_engine import CT2Translator

            return CT2Translator.from_checkpoint(
                path, gen_cfg, task_overrides, fallback=cls.fallback_for(path, gen_cfg, task_overrides),
                engine=engine, export_dir=ctranslate2_dir, compute_type=compute_type, device=device,
                threads=torch.get_num_threads(), batch_size=batch_size, inter_threads=inter_threads,
                intra_threads=intra_threads, seed=torch.initial_seed())
        return cls.load(path, gen_cfg, device, precision, task_overrides, inter_threads, quantize, packed_weights,
                        attention_kernels)

    @classmethod
    def fallback_for(cls, path: str, gen_cfg: GenerationConfig, task_overrides: Optional[Dict[str, Any]] = None,
                     attention_kernels: str = "auto") -> Callable[[int, str], "Translator"]:
        """``make(threads, device)`` -> seqkit's engine on ``path``: what a CT2Translator searches
        the sentences CTranslate2 left unfinished with (built on first use)."""

        def make(threads: int, device: str) -> "Translator":
            torch.set_num_threads(threads)  # built after CTranslate2 set OpenMP's count to its intra_threads
            return cls.load(path, gen_cfg, device, task_overrides=task_overrides, attention_kernels=attention_kernels)

        return make

    @classmethod
    def load(cls, path: str, gen_cfg: GenerationConfig, device: str = "cpu", precision: str = "fp32",
             task_overrides: Optional[Dict[str, Any]] = None, inter_threads: int = 0, quantize: str = "none",
             packed_weights: bool = True, attention_kernels: str = "auto") -> "Translator":
        """seqkit's engine on ``path``'s model (what :meth:`from_checkpoint` builds for engine=seqkit)."""
        dev = torch.device(device)
        kernels = use_attention_kernels(attention_kernels, dev)
        task, model = load_for_inference(path, task_overrides)
        log.info("%s", kernels)
        if getattr(task, "model_kind", "seq2seq") not in ("seq2seq", "lm"):
            raise SeqkitError(f"{path} holds a {task.model_kind} model: use seqkit.generation.Classifier")
        if quantize == "int8":
            model = quantize_int8(model)
        model = prepare_for_search(model, dev, precision, quantize, packed_weights)
        return cls(task, model, gen_cfg, dev, precision, inter_threads)

    def _autocast(self) -> Any:
        import contextlib

        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def generate_batches(self, sources: Sequence[List[int]], batch_size: int, max_tokens: int = 0,
                         first_id: int = 0) -> Iterator[Dict[str, Any]]:
        """Yield ``{"id": first_id + i, "hypos"}`` for each source (ids with eos), longest first.

        With :meth:`streams` > 1, that many batches are searched at once, each in a worker thread
        with its share of the torch threads; results still come in the same order."""
        order = self.longest_first(sources, first_id)
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
