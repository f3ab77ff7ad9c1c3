"""Search on CTranslate2 (``seqkit-generate engine=ctranslate2``): the checkpoint's export, searched
by CTranslate2's C++ beam search, handed back as seqkit hypotheses (token ids ending with eos,
length-normalized score, positional scores), so every output path of seqkit stays the same.

Settings map one to one: ``beam`` -> ``beam_size``, ``nbest`` -> ``num_hypotheses``, ``lenpen`` ->
``length_penalty`` (both divide by the length with eos), ``min_len`` -> ``min_decoding_length``,
``no_repeat_ngram_size``, sampling with ``beam=1`` (seeded by ``common.seed``); seqkit's ban on
``<pad>``/``<s>`` becomes ``suppress_sequences``. The max length ``a * S + b`` is one CTranslate2
call per distinct value.

One rule CTranslate2 lacks: at the max length seqkit ends every hypothesis with a forced ``</s>``,
where CTranslate2 returns the best unfinished one. Such hypotheses come back marked ``unfinished``
(cut to the limit and ended with ``</s>``), and :class:`CT2Translator` searches their sentences
again with seqkit's engine, so both engines give the same translations. Scores (H- lines) and positional scores (P- lines) come from CTranslate2 scoring the hypotheses by
teacher forcing, so they are seqkit's: log-probs over the whole vocabulary, divided by
``len ** lenpen``.

:class:`CT2Translator` rebuilds the task from the export (``seqkit_export.json``), so with an
export that matches the checkpoint nothing here imports torch: ``seqkit-generate
engine=ctranslate2 input=-`` is a 0.44 s process on 2 cores. torch is imported only to write the
export, to read a binarized split, or to search an unfinished sentence again.
"""

from __future__ import annotations

import logging
import os
import sys
from collections import defaultdict
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from seqkit.core.errors import SeqkitError
from seqkit.generation.base import TranslatorBase, as_list
from seqkit.generation.config import GenerationConfig, check_generation_config, max_target_len

log = logging.getLogger("seqkit.generate")
COMPUTE_TYPES = ("default", "auto", "float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
                 "float16", "bfloat16")


def check_compute_type(compute_type: str) -> None:
    if compute_type not in COMPUTE_TYPES:
        raise SeqkitError(f"compute_type={compute_type!r}: choose one of {', '.join(COMPUTE_TYPES)}")


def check_supported(cfg: GenerationConfig) -> None:
    unsupported = []
    if cfg.print_alignment:
        unsupported.append("generation.print_alignment")
    if cfg.unkpen:
        unsupported.append("generation.unkpen")
    if cfg.sampling and cfg.beam > 1:
        unsupported.append("generation.sampling with beam > 1 (samples per sentence)")
    if cfg.temperature != 1.0 and not cfg.sampling:  # seqkit's beam search divides the logits by it; CT2's ignores it
        unsupported.append(f"generation.temperature={cfg.temperature:g} with beam search (it applies it only when sampling)")
    if unsupported:
        raise SeqkitError(f"engine=ctranslate2 does not support {', '.join(unsupported)}: use engine=seqkit")


class CT2Engine:
    """A CTranslate2 ``Translator`` on ``model_dir`` (an export of the task's checkpoint)."""

    def __init__(self, task: Any, model_dir: str, gen_cfg: GenerationConfig, max_target_positions: int,
                 device: str = "cpu", compute_type: str = "default", inter_threads: int = 1, intra_threads: int = 0,
                 seed: int = 1):
        from seqkit.export.ct2 import import_ctranslate2

        ct2 = import_ctranslate2()
        check_supported(gen_cfg)
        check_generation_config(gen_cfg, len(task.tgt_dict))  # as seqkit's engine does (sampling_topk <= vocabulary)
        check_compute_type(compute_type)
        ct2.set_random_seed(seed % (1 << 32))  # sampling draws from CTranslate2's own generator
        self.task, self.cfg, self.max_tgt = task, gen_cfg, max_target_positions
        self.inter_threads = max(1, inter_threads)
        # loading sets the calling thread's OpenMP thread count to intra_threads, which is torch's
        # too (seqkit's engine in the same process ran at half speed): torch's is put back
        torch = sys.modules.get("torch")
        torch_threads = torch.get_num_threads() if torch is not None else 0
        try:
            self.translator = ct2.Translator(model_dir, device=device, compute_type=compute_type,
                                             inter_threads=self.inter_threads, intra_threads=intra_threads)
        except (RuntimeError, ValueError) as e:
            raise SeqkitError(f"CTranslate2 cannot load {model_dir}: {str(e).splitlines()[0]}") from None
        finally:
            if torch_threads:
                torch.set_num_threads(torch_threads)
        src, tgt = task.src_dict, task.tgt_dict
        self.src_symbols = src.symbols
        self.tgt_index = tgt.indices
        self.eos, self.unk = tgt.eos(), tgt.unk()
        self.banned = [[tgt[tgt.pad()]], [tgt[tgt.bos()]]]
        log.info("CTranslate2 engine: %s, compute_type %s, inter_threads %d, intra_threads %d", model_dir,
                 compute_type, self.inter_threads, intra_threads)

    def _tempered(self, sources: List[List[str]], targets: List[List[str]], ids: List[List[int]],
                  batch_size: int) -> List[List[float]]:
        """Each target's positional log-probs at the temperature, </s> last: CTranslate2's
        ``score_batch`` has no temperature, so the targets are forced as prefixes and the logits of
        every step (``return_logits_vocab``, unmasked) go through log_softmax(z / T) here."""
        T = self.cfg.temperature
        results = self.translator.translate_batch(
            sources, target_prefix=targets, beam_size=1, max_decoding_length=max(len(t) for t in targets) + 1,
            min_decoding_length=0, return_logits_vocab=True, max_batch_size=batch_size, max_input_length=0)
        out = []
        for r, want in zip(results, ids):  # want: the target's ids, eos last
            z = np.stack([np.asarray(step) for step in r.logits[0][: len(want)]]).astype(np.float64)  # (T, V)
            lp = _log_softmax(z / T)
            out.append([float(lp[t, j]) for t, j in enumerate(want)])
        return out

    def _ids(self, tokens: Sequence[str], limit: int) -> Tuple[List[int], bool]:
        """Token ids ending with eos, and whether the hypothesis ran into the max length unfinished."""
        ids = [self.tgt_index.get(t, self.unk) for t in tokens]
        if ids and ids[-1] == self.eos:
            return ids, False
        return ids[:limit] + [self.eos], True

    def generate(self, sources: Sequence[List[int]], batch_size: int, max_tokens: int = 0) -> List[List[Dict[str, Any]]]:
        """Hypotheses of each source (ids ending with eos), in input order, best first; each marked
        ``unfinished`` when it ran into the max length without ``</s>``."""
        cfg = self.cfg
        groups: Dict[int, List[int]] = defaultdict(list)  # max length -> sentence indices
        for i, s in enumerate(sources):
            groups[max_target_len(len(s), cfg, self.max_tgt)].append(i)
        out: List[List[Dict[str, Any]]] = [[] for _ in sources]
        for limit, members in groups.items():
            tokens = [[self.src_symbols[j] for j in sources[i][:-1]] for i in members]  # CT2 adds </s>
            options = dict(max_batch_size=max_tokens or batch_size, batch_type="tokens" if max_tokens else "examples",
                           beam_size=1 if cfg.sampling else cfg.beam, num_hypotheses=cfg.nbest,
                           length_penalty=cfg.lenpen, no_repeat_ngram_size=cfg.no_repeat_ngram_size,
                           min_decoding_length=cfg.min_len, max_decoding_length=limit + 1, max_input_length=0,
                           suppress_sequences=self.banned, return_end_token=True)
            if cfg.sampling:
                options.update(sampling_topk=cfg.sampling_topk if cfg.sampling_topk > 0 else 0,
                               sampling_topp=cfg.sampling_topp if cfg.sampling_topp > 0 else 1.0,
                               sampling_temperature=cfg.temperature)
            results = self.translator.translate_batch(tokens, **options)
            hyps = [[self._ids(h, limit) for h in r.hypotheses] for r in results]  # (ids, unfinished)
            # positional scores (fairseq's P- lines): CT2 scores the hypotheses by teacher forcing
            flat_src = [tokens[k] for k, hs in enumerate(hyps) for _ in hs]
            flat_tgt = [[self.task.tgt_dict[j] for j in ids[:-1]] for hs in hyps for ids, _ in hs]
            flat_ids = [ids for hs in hyps for ids, _ in hs]
            if cfg.sampling and cfg.temperature != 1.0:  # seqkit's scores are log-probs at the temperature
                scored = iter(self._tempered(flat_src, flat_tgt, flat_ids, batch_size * cfg.nbest))
            else:
                scored = iter(r.log_probs for r in self.translator.score_batch(
                    flat_src, flat_tgt, max_batch_size=batch_size * cfg.nbest, max_input_length=0))
            for k, i in enumerate(members):
                for ids, unfinished in hyps[k]:
                    pos = list(next(scored)[: len(ids)])  # (len(ids),) eos last
                    # seqkit's score from them: CT2's own is over a softmax renormalized without <pad>/<s>
                    score = sum(pos) / len(ids) ** cfg.lenpen
                    out[i].append({"tokens": ids, "score": score, "positional_scores": pos, "unfinished": unfinished})
                out[i].sort(key=lambda h: -h["score"])
        return out


def _log_softmax(z: Any) -> Any:
    """Row-wise log-softmax of a numpy array ``(T, V)``."""
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def default_threads(total: int, batch_size: int, beam: int, inter_threads: int) -> tuple:
    """(inter, intra) threads: as seqkit's own engine, two batches side by side on >= 2 threads
    when batch_size x beam >= 64 (CTranslate2 inter 2 x intra 1 is its best there on 2 cores),
    otherwise one batch on all threads."""
    total = max(1, total)
    inter = inter_threads or (2 if batch_size * beam >= 64 and total >= 2 else 1)
    inter = min(inter, total)
    return inter, max(1, total // inter)


def export_task(meta: Dict[str, Any], task_overrides: Optional[Dict[str, Any]] = None) -> Any:
    """The task an export was written from, rebuilt from its ``seqkit_export.json`` (no torch for
    the built-in translation task; another task's modules are imported first)."""
    import seqkit.tasks.translation  # noqa: F401  (registers the translation task, without torch)
    from seqkit.core.registry import TASKS
    from seqkit.export.ct2 import from_json

    values = {**meta["task"], **(task_overrides or {})}
    if values.get("name") not in TASKS:
        import seqkit

        seqkit.import_builtin_components()
    return TASKS.build(TASKS.make_config(values), from_json(meta["task_state"]))


class CT2Translator(TranslatorBase):
    """Translations searched by CTranslate2 on an export, printed as seqkit's engine prints them;
    sentences CTranslate2 leaves unfinished at the max length are searched again by ``fallback()``
    (seqkit's :class:`~seqkit.generation.translator.Translator`, built on first use)."""

    def __init__(self, task: Any, engine: CT2Engine, gen_cfg: GenerationConfig, max_source_positions: int,
                 fallback: Callable[[], TranslatorBase]):
        self.task, self.engine, self.gen_cfg = task, engine, gen_cfg
        self._max_src = max_source_positions
        self._fallback_factory: Optional[Callable[[], TranslatorBase]] = fallback
        self._fallback: Optional[TranslatorBase] = None

    @classmethod
    def from_checkpoint(cls, path: str, gen_cfg: GenerationConfig, task_overrides: Optional[Dict[str, Any]] = None, *,
                        fallback: Callable[[int, str], TranslatorBase], engine: str = "ctranslate2", export_dir: str = "",
                        compute_type: str = "default", device: str = "cpu", threads: int = 0, batch_size: int = 64,
                        inter_threads: int = 0, intra_threads: int = 0, seed: int = 1) -> "CT2Translator":
        """``path``'s export (written on first use, then reused while it matches the checkpoint),
        searched with ``inter_threads`` x ``intra_threads`` of ``threads`` (0: the CPUs this process may use).
        ``fallback(threads, device)`` builds seqkit's engine on the same checkpoint, for the sentences
        CTranslate2 leaves unfinished (:meth:`seqkit.generation.translator.Translator.fallback_for`:
        the caller passes it, so this module never imports seqkit's engine)."""
        from seqkit.export.ct2 import cached_export, read_meta

        if engine != "ctranslate2":
            raise SeqkitError(f"engine={engine!r}: choose seqkit or ctranslate2")
        check_supported(gen_cfg)
        check_compute_type(compute_type)  # before the export, which can take seconds
        folder = cached_export(path, export_dir)
        meta = read_meta(folder)
        task = export_task(meta, task_overrides)
        max_src, max_tgt = meta["max_positions"]
        if device == "auto":
            from seqkit.export.ct2 import import_ctranslate2

            device = "cuda" if import_ctranslate2().get_cuda_device_count() > 0 else "cpu"
        threads = threads or len(os.sched_getaffinity(0))
        inter, intra = default_threads(threads, batch_size, gen_cfg.beam, inter_threads)
        ct2 = CT2Engine(task, folder, gen_cfg, max_tgt, device, compute_type, inter, intra_threads or intra, seed)
        return cls(task, ct2, gen_cfg, max_src, lambda: fallback(threads, device))

    def max_source_positions(self) -> int:
        return self._max_src

    def streams(self, batch_size: int = 64) -> int:
        return self.engine.inter_threads

    def fallback(self) -> TranslatorBase:
        """seqkit's engine on the same checkpoint (loaded on first call)."""
        if self._fallback is None:
            self._fallback = self._fallback_factory()
        return self._fallback

    def generate_batches(self, sources: Sequence[List[int]], batch_size: int, max_tokens: int = 0,
                         first_id: int = 0) -> Iterator[Dict[str, Any]]:
        """Yield ``{"id": first_id + i, "hypos"}`` for each source (ids with eos), longest first."""
        order = self.longest_first(sources, first_id)
        hypos = self.engine.generate(sources, batch_size, max_tokens)  # CTranslate2 batches the whole list
        # at the max length seqkit's beam search ends hypotheses with a forced </s>, which CTranslate2
        # cannot: the sentences it left unfinished (degenerate, repeating outputs) are searched again
        # here (a sample is random either way: sampling keeps CTranslate2's)
        redo = [] if self.gen_cfg.sampling else [i for i in order if any(h["unfinished"] for h in hypos[i])]
        if redo:
            log.info("%d sentence(s) ran into the max length in CTranslate2: searched again by seqkit's engine", len(redo))
            for r in self.fallback().generate_batches([sources[i] for i in redo], batch_size, max_tokens):
                hypos[redo[r["id"]]] = [{"tokens": as_list(h["tokens"]), "score": float(h["score"]),
                                         "positional_scores": as_list(h["positional_scores"]), "unfinished": False}
                                        for h in r["hypos"]]  # lists, as CTranslate2's
        for i in order:
            yield {"id": first_id + i, "hypos": hypos[i]}
