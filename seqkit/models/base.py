"""The interfaces models offer the tasks, the trainer and the generator, one per model kind.

Every model class has a ``kind``; a task accepts the kinds it can train and names the models of
those kinds when given another (``task=classification model=transformer`` is one clear error):

- ``seq2seq`` (:class:`EncoderDecoderModel`): built as ``Model(cfg, src_dict, tgt_dict)``; used by
  translation.
- ``classifier`` and ``tagger`` (:class:`EncoderClassifierModel`): built as
  ``Model(cfg, src_dict, num_labels)``; ``forward(src_tokens, src_lengths, segments=None)`` gives
  logits ``(B, K)`` (one label per sentence) or ``(B, S, K)`` (one per input position).
- ``lm`` (:class:`LanguageModel`): built as ``Model(cfg, dictionary)``; ``forward(src_tokens,
  src_lengths)`` gives next-token logits ``(B, T, V)``; generation continues prompts through the
  encoder-decoder interface below (the prompt plays the source).
- ``masked_lm`` (``seqkit.models.bert``, ``seqkit.models.electra``): built as ``Model(cfg,
  dictionary)``; ``forward(src_tokens, src_lengths, segments=None, masked_tokens=None, ...)`` gives
  a dict of head outputs (``mlm``: logits at the masked positions ``(N, V)``).
- ``permutation_lm`` (``seqkit.models.xlnet``): built as ``Model(cfg, dictionary)``;
  ``forward(src_tokens, src_lengths, perm_rank, target_positions)`` gives the query stream's
  logits at the predicted positions (XLNet's two-stream attention, ``task=permutation_lm``).

Models with word embeddings offer them to pretrained vectors (``model.embed_path=FILE``,
``model.encoder_embed_path`` / ``decoder_embed_path``, ``model.freeze_embed``;
:mod:`seqkit.models.modules.pretrained_embeddings`): ``word_embeddings()`` -> the path setting
that fills each table -> ``WordTable(embedding, width_key, target, tied_output)``, the rows in the
task's ``src_dict`` (``tgt_dict`` when ``target``). The default offers none: such a setting on
that model is refused.

Pretraining models (``lm``, ``masked_lm``, ``permutation_lm`` and the ``seq2seq`` Transformer that
``denoising`` trains) also offer fine-tuning one reading, used by :mod:`seqkit.models.pretrained`:
``transfer_features(src_tokens, src_lengths, segments=None)`` -> ``(B, S, C)`` contextual vectors
(or ``(L, B, S, C)`` layers to mix, with ``transfer_layers`` L), ``transfer_dim`` C,
``transfer_pooling`` (``first`` / ``last`` / ``mean``) and ``pretraining_heads`` (the submodules
fine-tuning drops).

The rest of this docstring is about encoder-decoder models.

The trainer calls ``forward``; the generator calls ``encode`` once, then ``decode_step`` once per
output position with a cache the model owns, reordering encoder output and cache as beams are
re-ranked and finished sentences leave the batch. Shapes: B batch (times beam in generation),
S source length, T target length, C model dim, V target vocabulary.

Optional keywords of ``forward``, which the criteria pass only to a model whose class lists them in
``forward_options`` (seqkit's Transformer lists both): ``features_only=True`` -> decoder features
``(B, T, C)``, with ``output_layer(features)`` -> logits and ``output_projection()`` -> ``(weight
(V, C), bias or None, scale)`` beside it, for a loss over the scored rows only; ``src_padded``, a
host bool from collation (False: no source row is padded, attention needs no mask).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
from torch import nn

from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.models.modules.pretrained_embeddings import WordTable

EncoderOut = Dict[str, torch.Tensor]  # every tensor has the batch on dim 0
Cache = Dict[str, torch.Tensor]  # every tensor has the batch on dim 0
# cache entries whose name starts with STATIC hold per-sentence values (e.g. cross-attention keys),
# equal across a sentence's beams: re-ranking beams never needs to move them
STATIC = "static:"


class EncoderDecoderModel(nn.Module):
    """Base class: subclasses implement ``encode``, ``decode`` and ``decode_step``."""

    kind = "seq2seq"

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor, prev_output_tokens: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits ``(B, T, V)`` for ``prev_output_tokens`` ``(B, T)``."""
        enc = self.encode(src_tokens, src_lengths)
        return self.decode(prev_output_tokens, enc)

    def encode(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> EncoderOut:
        """``src_tokens`` ``(B, S)`` right-padded -> encoder output (batch on dim 0)."""
        raise TypeError(f"{type(self).__name__} must implement encode")

    def decode(self, prev_output_tokens: torch.Tensor, enc: EncoderOut) -> torch.Tensor:
        """Full (non-incremental) decoder pass -> logits ``(B, T, V)``."""
        raise TypeError(f"{type(self).__name__} must implement decode")

    def init_cache(self, enc: EncoderOut, max_len: int) -> Cache:
        """An empty decoding cache for ``enc``'s batch and up to ``max_len`` steps."""
        return {}

    def decode_step(self, tokens: torch.Tensor, enc: EncoderOut, cache: Cache, step: int) -> torch.Tensor:
        """Incremental step: ``tokens`` ``(B, 1)`` is the input at position ``step`` -> logits ``(B, V)``.

        Must equal ``decode(prefix, enc)[:, step]`` for the prefix fed so far; updates ``cache``.
        """
        raise TypeError(f"{type(self).__name__} must implement decode_step")

    def decode_step_attention(
        self, tokens: torch.Tensor, enc: EncoderOut, cache: Cache, step: int, layer: Optional[int] = None
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``decode_step`` that also returns this step's attention over the source ``(B, S)``: each
        row sums to one over the sentence's non-pad source positions (alignments, heatmaps).

        ``layer`` picks one decoder layer where several attend (None: the model's default, e.g. the
        Transformer's last layer averaged over heads). Models without source attention raise.
        """
        raise SeqkitError(f"model {type(self).__name__} exposes no attention over the source "
                          "(print_alignment and attention plots need one that does)")

    @staticmethod
    def reorder(state: Dict[str, torch.Tensor], new_order: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Select batch rows ``new_order`` of every tensor (beam re-ranking, finished sentences leaving)."""
        return {k: v.index_select(0, new_order) for k, v in state.items()}

    def reorder_cache(self, cache: Cache, new_order: torch.Tensor, sentences_moved: bool) -> Cache:
        """Reorder the cache; ``STATIC`` entries only when ``sentences_moved`` (rows left the batch),
        not when beams of the same sentences were merely re-ranked."""
        return {k: v if (not sentences_moved and k.startswith(STATIC)) else v.index_select(0, new_order)
                for k, v in cache.items()}

    def max_positions(self) -> Tuple[int, int]:
        """Longest source and target (in tokens, eos included) the model accepts."""
        return (1 << 30, 1 << 30)

    def word_embeddings(self) -> Dict[str, WordTable]:
        """The word-embedding tables pretrained vectors can fill, by the setting that names their file."""
        return {}


class EncoderClassifierModel(nn.Module):
    """Base class of sentence classifiers (``kind = "classifier"``) and token taggers (``"tagger"``).

    Input layout (see :mod:`seqkit.tasks.classification`): ``src_tokens`` ``(B, S)`` right-padded
    with ``src_dict.pad()``, each row ``<s> a ... </s>`` or, for a sentence pair,
    ``<s> a ... </s> b ... </s>``; ``segments`` ``(B, S)`` is 0 up to and including the first
    ``</s>`` and 1 after it (None for single sentences; padding positions hold 0).
    """

    kind = "classifier"

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                segments: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits ``(B, K)`` for a classifier, ``(B, S, K)`` for a tagger."""
        raise TypeError(f"{type(self).__name__} must implement forward")

    def max_positions(self) -> Tuple[int, int]:
        """Longest input (tokens, ``<s>``/``</s>`` included) the model accepts, and a placeholder
        for the target side so the trainer treats every task alike."""
        return (1 << 30, 1 << 30)

    def word_embeddings(self) -> Dict[str, WordTable]:
        """The word-embedding tables pretrained vectors can fill, by the setting that names their file."""
        return {}


def check_model_kind(model_name: str, kind: str, task_name: str) -> None:
    """One clear error when registered model ``model_name`` is not of the ``kind`` a task trains."""
    have = getattr(MODELS.builder(model_name), "kind", "seq2seq")  # (plugins written before kinds)
    if have != kind:
        names = [n for n, c in MODELS.choices().items() if getattr(MODELS.builder(c.name), "kind", "seq2seq") == kind]
        raise SeqkitError(f"model {model_name!r} is a {have} model; task {task_name} trains {kind} models: "
                          f"{', '.join(names)}")


class LanguageModel(EncoderDecoderModel):
    """Base class of causal language models (``kind = "lm"``).

    Training: ``forward(src_tokens, src_lengths)`` -> logits ``(B, T, V)``, position t predicting
    token t + 1 (:mod:`seqkit.data.lm_dataset`). With an adaptive softmax, ``forward(...,
    target=target)`` returns the target log-probs ``(B, T)`` instead, never building ``(B, T, V)``.

    Generation reuses the encoder-decoder search: ``encode`` runs the right-padded prompts
    ``(B, P)`` once (subclasses' ``prefill``), keeping each prompt's next-token logits and the
    state it leaves (``state:`` entries, moved into the cache by ``init_cache``); ``decode_step``
    at step 0 returns those logits (the search's bos input stands for the prompt's last token), and
    at step k >= 1 feeds the token chosen at step k - 1 at position ``len + k - 1`` (subclasses' ``step``).
    """

    kind = "lm"
    STATE = "state:"

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                target: Optional[torch.Tensor] = None) -> torch.Tensor:
        raise TypeError(f"{type(self).__name__} must implement forward")

    def prefill(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> Tuple[torch.Tensor, Cache]:
        """Run the prompts ``(B, P)`` -> logits after each one's last token ``(B, V)``, and the
        decoding state (batch on dim 0) that ``step`` continues."""
        raise TypeError(f"{type(self).__name__} must implement prefill")

    def step(self, tokens: torch.Tensor, state: Cache, positions: torch.Tensor) -> torch.Tensor:
        """One token per row ``(B, 1)`` at ``positions`` ``(B,)`` -> logits ``(B, V)``; updates ``state``."""
        raise TypeError(f"{type(self).__name__} must implement step")

    def encode(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor) -> EncoderOut:
        logits, state = self.prefill(src_tokens, src_lengths)
        enc: EncoderOut = {"next": logits, "lengths": src_lengths.to(logits.device)}
        enc.update({self.STATE + k: v for k, v in state.items()})
        return enc

    def init_cache(self, enc: EncoderOut, max_len: int) -> Cache:
        longest = int(enc["lengths"].max()) if enc["lengths"].numel() else 0
        if longest + max_len - 1 > self.max_positions()[1]:
            raise SeqkitError(f"a prompt of {longest} tokens plus {max_len - 1} generated ones exceeds the model's "
                              f"{self.max_positions()[1]} positions: lower generation.max_len_b")
        # the state moves out of enc: the search reorders enc only when sentences leave, the cache every step
        cache = {k[len(self.STATE):]: enc.pop(k) for k in [k for k in enc if k.startswith(self.STATE)]}
        cache["lengths"] = enc["lengths"]
        return cache

    def decode_step(self, tokens: torch.Tensor, enc: EncoderOut, cache: Cache, step: int) -> torch.Tensor:
        if step == 0:
            return enc["next"]
        return self.step(tokens, cache, cache["lengths"] + (step - 1))

    def max_positions(self) -> Tuple[int, int]:
        """Longest input (prompt plus generated tokens) the model accepts, twice."""
        return (1 << 30, 1 << 30)
