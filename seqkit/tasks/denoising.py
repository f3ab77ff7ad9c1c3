"""Denoising sequence-to-sequence pretraining (BART, T5) on a folder written by
``seqkit-preprocess task=language_modeling``, with the encoder-decoder models of translation.

A sample is a block of the token stream (by default one line: WikiText's paragraphs) ending with
``</s>``. The source is the block noised (:mod:`seqkit.data.noising`, drawn per sample from
``default_rng([seed, epoch, i])``: new noise every epoch); the target is

- ``noise=bart``: the block itself (reconstruction), the source noised by sentence permutation,
  token masking / deletion, text infilling (Poisson spans, one ``<mask>`` each) and rotation;
- ``noise=t5``: the dropped spans, each after its sentinel ``<extra_id_k>`` (span corruption).

The dictionary gains ``<mask>`` and the sentinels at the end, so the model's vocabulary is the
folder's plus ``1 + num_sentinels``; source and target share it (``share_all_embeddings`` fits).
Validation adds ``accuracy``: teacher-forced token accuracy of the target (BART: reconstruction
accuracy).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import CRITERIA, MODELS, TASKS
from seqkit.data.batching import token_budget_batches
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.data.lm_dataset import BREAK_MODES, block_bounds
from seqkit.data.noising import BartNoise, NoiseSpecials, bart_noise, t5_span_corrupt
from seqkit.data.pair_dataset import PaddedBatches
from seqkit.models.base import check_model_kind
from seqkit.tasks.token_accuracy import TokenAccuracy
from seqkit.tasks.folders import tokenizer_label
from seqkit.tasks.language_modeling import DATA_KEY, LanguageModelingTask, check_lm_folder
from seqkit.tokenizers import Tokenizer, load_tokenizer

FULL_STOPS = (".", "\u2581.", "!", "\u2581!", "?", "\u2581?")  # symbols that end a sentence (word or piece)


@dataclass
class DenoisingConfig:
    name: str = arg("denoising", "registry name")
    data: str = arg("data-bin", "folder written by seqkit-preprocess task=language_modeling")
    tokens_per_sample: int = arg(256, "longest block in tokens, </s> included", ge=2)
    sample_break_mode: str = arg("eos", "eos: one line per block (cut when longer); complete / none: see "
                                        "task language_modeling", choices=BREAK_MODES)
    noise: str = arg("bart", "bart (reconstruct the block) or t5 (span corruption)", choices=("bart", "t5"))
    permute_sentences: bool = arg(True, "bart: shuffle the block's sentences (split after . ! ?)")
    mask_ratio: float = arg(0.0, "bart: token masking probability", ge=0, lt=1)
    delete_ratio: float = arg(0.0, "bart: token deletion probability", ge=0, lt=1)
    infill_ratio: float = arg(0.3, "bart: share of tokens text infilling covers", ge=0, lt=1)
    poisson_lambda: float = arg(3.0, "bart: mean infilled span length", gt=0)
    rotate: bool = arg(False, "bart: document rotation")
    noise_density: float = arg(0.15, "t5: share of tokens corrupted", gt=0, lt=1)
    mean_span_length: float = arg(3.0, "t5: mean corrupted span length", gt=0)
    num_sentinels: int = arg(100, "t5: sentinel symbols <extra_id_0..> added to the dictionary", ge=1)
    seed: int = arg(1, "seed of the noise (with the epoch and the sample's index)")


class DenoisingDataset(PaddedBatches):
    """Blocks noised on the fly into (source, target) pairs, batched like translation pairs."""

    def __init__(self, data: IndexedDataset, task: "DenoisingTask", static: bool):
        cfg = task.cfg
        self.task, self.stream, self.static = task, data.tokens, static
        self.starts, self.ends = block_bounds(data.sizes, cfg.tokens_per_sample - 1, cfg.sample_break_mode)
        self.src_sizes = self.ends - self.starts + 1  # an upper bound (infilling only shortens; eos may be added)
        self.tgt_sizes = self.src_sizes
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.starts)

    def too_long(self, max_source: int, max_target: int) -> np.ndarray:
        return np.nonzero((self.src_sizes > max_source) | (self.src_sizes + 1 > max_target))[0]

    def batches(self, max_tokens: int, max_sentences: int = 0, seed: int = 1, epoch: int = 0,
                shuffle: bool = True, exclude: Optional[np.ndarray] = None) -> List[np.ndarray]:
        """Token-budget batches; also sets the epoch whose noise ``collate`` draws."""
        self.epoch = epoch
        return token_budget_batches(self.src_sizes + 1, max_tokens, max_sentences, seed, epoch, shuffle, exclude)

    def block(self, i: int) -> torch.Tensor:
        """Block ``i`` ending with ``</s>``."""
        t = torch.from_numpy(self.stream[int(self.starts[i]) : int(self.ends[i])].astype(np.int64))
        if not len(t) or int(t[-1]) != self.task.specials.eos:
            t = torch.cat([t, torch.tensor([self.task.specials.eos])])
        return t

    def pair(self, i: int) -> Dict[str, torch.Tensor]:
        """``source`` (noised) and ``target`` of sample ``i``, both ending with ``</s>``."""
        rng = np.random.default_rng([self.task.cfg.seed, 0 if self.static else self.epoch + 1, i])
        return self.task.noise(self.block(i), rng)

    def collate(self, indices: Sequence[int]) -> Dict[str, Any]:
        indices = [int(i) for i in indices]
        pairs = [self.pair(i) for i in indices]
        sp = self.task.specials
        tgt = [p["target"] for p in pairs]
        return {
            "id": torch.tensor(indices),
            "net_input": {
                "src_tokens": self.pad_batch([p["source"] for p in pairs], sp.pad),
                "src_lengths": torch.tensor([len(p["source"]) for p in pairs]),
                "prev_output_tokens": self.pad_batch([t[:-1] for t in tgt], sp.pad, prepend=sp.bos),
            },
            "target": self.pad_batch(tgt, sp.pad),
            "ntokens": int(sum(len(t) for t in tgt)),
            "nsentences": len(indices),
        }


@TASKS.register("denoising", DenoisingConfig)
class DenoisingTask(TokenAccuracy):
    model_kind = "seq2seq"

    def __init__(self, cfg: DenoisingConfig, state: Optional[Dict[str, Any]] = None):
        self.cfg = cfg
        if state is None:
            state = LanguageModelingTask.folder_state(cfg.data)
        self._state = state
        self.dictionary = Dictionary.from_state_dict(state["dict"])
        real = len(self.dictionary)
        mask = self.dictionary.add("<mask>", 0)
        sentinels = tuple(self.dictionary.add(f"<extra_id_{k}>", 0) for k in range(cfg.num_sentinels)) \
            if cfg.noise == "t5" else ()
        self.specials = NoiseSpecials(mask=mask, vocab_size=real, sentinels=sentinels)
        self.src_dict = self.tgt_dict = self.dictionary
        stops = tuple(self.dictionary.indices[s] for s in FULL_STOPS if s in self.dictionary.indices)
        if cfg.noise == "bart" and cfg.permute_sentences and not stops:
            raise SeqkitError("task.permute_sentences=true but the dictionary has no full stop ('.', '▁.')")
        self.bart = BartNoise(permute_sentences=cfg.permute_sentences, full_stop_ids=stops, mask_ratio=cfg.mask_ratio,
                              delete_ratio=cfg.delete_ratio, infill_ratio=cfg.infill_ratio,
                              poisson_lambda=cfg.poisson_lambda, rotate=cfg.rotate)
        self.ignore_index = self.dictionary.pad()
        self._tokenizer: Optional[Tokenizer] = None

    def checkpoint_state(self) -> Dict[str, Any]:
        return dict(self._state)

    def describe(self) -> str:
        """What this task's model is, for messages."""
        return (f"a denoising model ({self.cfg.noise} noise, {tokenizer_label(self._state.get('tokenizer'))}, "
                f"{len(self.dictionary)} types)")

    def noise(self, block: torch.Tensor, rng: np.random.Generator) -> Dict[str, torch.Tensor]:
        """``{"source", "target"}`` of one block ``(L,)`` ending with ``</s>``."""
        if self.cfg.noise == "t5":
            source, target = t5_span_corrupt(block, rng, self.specials, self.cfg.noise_density,
                                             self.cfg.mean_span_length)
            return {"source": source, "target": target}
        return {"source": bart_noise(block, rng, self.specials, self.bart), "target": block}

    # -- data ------------------------------------------------------------------------------------
    def split_exists(self, split: str) -> bool:
        return os.path.isfile(os.path.join(self.cfg.data, f"{split}.{DATA_KEY}.idx"))

    def load_dataset(self, split: str, with_target: bool = True) -> DenoisingDataset:
        prefix = os.path.join(self.cfg.data, f"{split}.{DATA_KEY}")
        check_lm_folder(self.cfg.data, self.describe(), self.dictionary, self._state.get("tokenizer"))
        if not self.split_exists(split):
            raise SeqkitError(f"no split {split!r} in {self.cfg.data} (no {prefix}.idx)")
        data = IndexedDataset(prefix)
        data.check_vocab(self.specials.vocab_size)
        return DenoisingDataset(data, self, static=split != "train")  # the same noise at every validation

    # -- components ------------------------------------------------------------------------------
    def build_model(self, model_cfg: Any) -> torch.nn.Module:
        check_model_kind(model_cfg.name, self.model_kind, "denoising")
        return MODELS.build(model_cfg, self.dictionary, self.dictionary)

    def build_criterion(self, criterion_cfg: Any) -> Callable:
        return CRITERIA.build(criterion_cfg, self)

    def valid_metrics(self, model: Any, dataset: Any, make_generator: Callable) -> Dict[str, float]:
        return {}

    # -- text <-> ids (generation) -------------------------------------------------------------------
    def tokenizer(self, side: str = "tgt") -> Optional[Tokenizer]:
        if self._tokenizer is None and self._state.get("tokenizer") is not None:
            self._tokenizer = load_tokenizer(self._state["tokenizer"])
        return self._tokenizer

    def encode_source(self, line: str) -> List[int]:
        """Raw text -> ids ending with ``</s>``; ``<mask>`` and ``<extra_id_k>`` written in the
        line stay single symbols (a cloze for the model to fill)."""
        tok = self.tokenizer()
        out: List[int] = []
        for word in line.split(" "):
            if word in self.dictionary.indices and word.startswith("<"):
                out.append(self.dictionary.indices[word])
            elif word:
                out += self.dictionary.encode(tok.encode(word) if tok is not None else [word], append_eos=False)
        return out + [self.dictionary.eos()]

    def pieces(self, ids: Any, side: str = "tgt") -> List[str]:
        return self.dictionary.string(ids)

    def detokenize(self, pieces: List[str], side: str = "tgt") -> str:
        tok = self.tokenizer()
        return tok.decode(pieces) if tok is not None else " ".join(pieces)
