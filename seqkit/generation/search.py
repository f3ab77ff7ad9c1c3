"""Batched beam search and sampling over any :class:`~seqkit.models.base.EncoderDecoderModel`.

The search runs over *units*: a unit is one beam search of width ``W`` with its own stopping
rule. Beam search has one unit per sentence (``W = beam``); sampling has ``beam`` units of width
1 per sentence (each sample is independent, so it leaves the batch as soon as it ends). Rows of
every per-hypothesis tensor are ``unit * W + beam``; shapes use R = units * W, V = vocabulary.

Each step makes one ``decode_step`` call for every live row (step 0: one row per sentence, as all
of its rows start from bos alone; encoder output and cache are then copied to the ``beam`` rows),
then (beam search) ranks each unit's ``W * V`` continuations, keeping the ``2 * W`` best as fairseq
does: eos candidates among the best ``W`` are finalized, and the best ``W`` non-eos candidates
continue. A unit stops when it holds ``W`` finalized hypotheses or reaches its max length, and its
rows leave the batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List

import torch

from seqkit.core.errors import SeqkitError
from seqkit.generation.config import GenerationConfig, check_generation_config, max_target_len
from seqkit.generation.sampling import sample_step


def max_target_lens(src_lengths: torch.Tensor, cfg: GenerationConfig, max_tgt: int) -> torch.Tensor:
    """:func:`~seqkit.generation.config.max_target_len` of each of ``src_lengths`` (B,) -> (B,), on CPU."""
    return torch.tensor([max_target_len(n, cfg, max_tgt) for n in src_lengths.tolist()], dtype=torch.long)


# {"tokens": LongTensor (L,), "score": float, "positional_scores": FloatTensor (L,)}, and with
# print_alignment "attention": FloatTensor (L, S_i), each target token's attention over the source
# (S_i: the sentence's source length, eos included)
Hypothesis = Dict[str, Any]


@dataclass(frozen=True)
class Specials:
    """Target vocabulary size and special indices (what the search needs of a dictionary)."""

    vocab_size: int
    pad: int = 0
    bos: int = 1
    eos: int = 2
    unk: int = 3

    @classmethod
    def of(cls, tgt: Any) -> "Specials":
        """From a ``Specials``, a vocabulary size (default specials) or a ``Dictionary``."""
        if isinstance(tgt, Specials):
            return tgt
        if isinstance(tgt, int):
            return cls(tgt)
        return cls(len(tgt), tgt.pad(), tgt.bos(), tgt.eos(), tgt.unk())


def ban_repeated_ngrams(lprobs: torch.Tensor, gen: torch.Tensor, n: int) -> None:
    """Set -inf (in place) on every token that would complete an n-gram already in ``gen``.

    ``lprobs`` ``(R, V)``; ``gen`` ``(R, L)`` the tokens generated so far (bos excluded: it never
    recurs, so n-grams holding it can never repeat).
    """
    L = gen.size(1)
    if L < n:
        return
    grams = gen.unfold(1, n, 1)  # (R, L-n+1, n): every n-gram so far
    tail = gen[:, L - n + 1 :].unsqueeze(1)  # (R, 1, n-1): what the next n-gram starts with
    hit = (grams[:, :, :-1] == tail).all(-1)  # (R, L-n+1)
    # scatter_add, not scatter: several n-grams may name the same banned token
    banned = torch.zeros_like(lprobs).scatter_add_(1, grams[:, :, -1], hit.to(lprobs.dtype))
    lprobs.masked_fill_(banned > 0, -math.inf)


def row_topk(x: torch.Tensor, k: int, group: int = 8):
    """``x.topk(k, dim=1)`` (values and indices ``(R, k)``, best first) for wide rows ``x`` ``(R, V)``.

    ``topk`` partially sorts every row; on CPU it is ~2x faster to cut each row into groups of
    ``group`` tokens, keep the ``k`` groups with the highest maxima, and rank only their tokens.
    Exact: a token among a row's best ``k`` lies in one of those groups, or ties with the ``k``-th
    value (there are ``k`` group maxima at least as high), so only the indices of ties may differ.
    """
    R, V = x.shape
    G = V // group
    if G < 32 * k:  # measured: below this, the extra small ops cost more than topk saves
        return x.topk(k, dim=1)
    # group j holds tokens j, j + G, j + 2G, ...: its max is an elementwise max of contiguous slices
    best_groups = x[:, : G * group].reshape(R, group, G).amax(1).topk(k, dim=1).indices  # (R, k)
    ids = (best_groups.unsqueeze(2) + G * torch.arange(group, device=x.device)).view(R, k * group)
    if G * group < V:  # the last V % group tokens are always ranked
        ids = torch.cat([ids, torch.arange(G * group, V, device=x.device).expand(R, -1)], dim=1)
    vals, j = x.gather(1, ids).topk(k, dim=1)  # (R, k)
    return vals, ids.gather(1, j)


class SequenceGenerator:
    """Beam search, greedy search (beam 1) and sampling, batched over sentences and beams.

    ``generate`` runs under ``torch.inference_mode`` on the device of ``src_tokens``; put the
    model in ``eval()`` first. Scores are natural-log probabilities.
    """

    def __init__(self, tgt_dict_or_specials: Any, cfg: GenerationConfig):
        sp = Specials.of(tgt_dict_or_specials)
        check_generation_config(cfg, sp.vocab_size)
        self.cfg = cfg
        self.vocab_size, self.pad, self.bos, self.eos, self.unk = sp.vocab_size, sp.pad, sp.bos, sp.eos, sp.unk

    def max_lens(self, model: Any, src_lengths: torch.Tensor) -> torch.Tensor:
        """Per-sentence max target length (eos excluded) on CPU (see :func:`max_target_lens`)."""
        return max_target_lens(src_lengths, self.cfg, model.max_positions()[1])

    @torch.inference_mode()
    def generate(
        self, model: Any, src_tokens: torch.Tensor, src_lengths: torch.Tensor
    ) -> List[List[Hypothesis]]:
        """Up to ``nbest`` hypotheses per sentence (input order, best first), as CPU tensors.

        ``src_tokens`` ``(B, S)`` right-padded, ``src_lengths`` ``(B,)``. A hypothesis' tokens
        end with eos and hold no bos; ``score`` is the sum of ``positional_scores`` divided by
        ``len(tokens) ** lenpen``.
        """
        cfg, device = self.cfg, src_tokens.device
        B, K = src_tokens.size(0), cfg.beam
        if B == 0:
            return []
        W = 1 if cfg.sampling else K  # hypotheses per unit
        n = B * K // W  # live units
        unit_sent = torch.arange(B).repeat_interleave(K // W)  # (n,) CPU: sentence of each unit
        unit_max = self.max_lens(model, src_lengths)[unit_sent]  # (n,) CPU
        unit_count = torch.zeros(n, dtype=torch.long)  # (n,) CPU: finalized hypotheses per unit
        row_max = unit_max.to(device).repeat_interleave(W)  # (R,)
        max_len, min_unit_max = int(unit_max.max()), int(unit_max.min())

        enc = model.encode(src_tokens, src_lengths)  # (B, ...) until step 0 is decoded
        cache = model.init_cache(enc, max_len + 1)
        tokens = torch.full((B * K, max_len + 2), self.pad, dtype=torch.long, device=device)  # (R, 1+steps)
        tokens[:, 0] = self.bos
        pos_lp = torch.zeros(B * K, max_len + 1, device=device)  # (R, steps): log-prob of each token
        cum = torch.zeros(n, W, device=device)  # (n, W): cumulative log-prob of each live hypothesis
        cum[:, 1:] = -math.inf  # all beams start identical: only beam 0 may expand at step 0
        cum = cum.view(-1)  # (R,)
        finalized: List[List[Hypothesis]] = [[] for _ in range(B)]
        align = cfg.print_alignment
        attn = None  # (R, steps, S) with print_alignment: each row's attention at each step
        src_len = src_lengths.detach().cpu()  # (B,)
        never = torch.tensor([self.pad, self.bos], device=device)  # tokens no hypothesis may emit
        first_row = torch.arange(n, device=device).unsqueeze(1) * W  # (n, 1): each unit's first row
        new_tokens = tokens[:, 0]  # (R,): the tokens the next step reads (from step 1 on)

        for step in range(max_len + 1):
            if step == 0:
                # every row of a sentence starts from bos alone: decode one row per sentence, then copy
                logits, step_attn = self._decode(model, tokens[:B, :1].contiguous(), enc, cache, 0)  # (B, V)
                if logits.size(-1) != self.vocab_size:
                    raise SeqkitError(
                        f"model vocabulary ({logits.size(-1)}) != target dictionary ({self.vocab_size})"
                    )
                sent = torch.arange(B, device=device).repeat_interleave(K)  # (R,) sentence of each row
                enc, cache = model.reorder(enc, sent), model.reorder_cache(cache, sent, True)
                logits = logits.index_select(0, sent)  # (R, V)
                if align:
                    attn = torch.zeros(B * K, max_len + 1, step_attn.size(1), device=device)  # (R, steps, S)
                    step_attn = step_attn.index_select(0, sent)
            else:
                logits, step_attn = self._decode(model, new_tokens.view(-1, 1), enc, cache, step)  # (R, V)
            if align:
                attn[:, step] = step_attn
            lprobs = self._log_probs(logits, tokens, step, row_max, min_unit_max, never)  # (R, V)
            if cfg.sampling:
                cands = sample_step(lprobs, cum, cfg.sampling_topk, cfg.sampling_topp)  # (n, 1)
            else:
                cands = self._beam_step(lprobs, cum, n, W)  # (n, 2W)
            cand_scores, cand_tokens, cand_beams = cands

            # finalize eos candidates among each unit's best W (a -inf one is a dead beam, no hypothesis)
            is_eos = cand_tokens == self.eos  # (n, C)
            eos_mask = is_eos[:, :W] & (cand_scores[:, :W] > -math.inf)  # (n, W)
            eos_units, eos_cands = eos_mask.nonzero(as_tuple=True)
            done = unit_max <= step  # (n,) CPU
            if eos_units.numel():
                rows = eos_units * W + cand_beams[eos_units, eos_cands]  # (E,)
                scores = cand_scores[eos_units, eos_cands]  # (E,)
                hyps = self._finalized(tokens, pos_lp, lprobs, rows, scores, step)
                hyp_attn = attn[rows, : step + 1].cpu() if align else None  # (E, step+1, S)
                full = self._record(hyps, eos_units.tolist(), finalized, unit_sent, unit_count, W, hyp_attn, src_len)
                done[full] = True

            old_units = None  # (n',) old index of each unit still live, None when all are
            if bool(done.any()):
                keep = (~done).nonzero().squeeze(1)  # (n',) CPU
                if keep.numel() == 0:
                    break
                old_units = keep.to(device)
                unit_sent, unit_max, unit_count = unit_sent[keep], unit_max[keep], unit_count[keep]
                min_unit_max, n = int(unit_max.min()), keep.numel()
                row_max = row_max.view(-1, W)[old_units].view(-1)
                cands = (cand_scores, cand_tokens, cand_beams, is_eos)
                cand_scores, cand_tokens, cand_beams, is_eos = (t[old_units] for t in cands)

            # each unit continues with its best W non-eos candidates (2W hold >= W: <= 1 eos per beam)
            C = cand_tokens.size(1)
            if C > W:
                # the first W non-eos candidates, in rank order: a stable sort puts them first
                active = is_eos.sort(dim=1, stable=True).indices[:, :W]  # (n, W)
                cands = (cand_scores, cand_tokens, cand_beams)
                cand_scores, cand_tokens, cand_beams = (t.gather(1, active) for t in cands)
            units_first_row = first_row if old_units is None else old_units.unsqueeze(1) * W  # (n', 1) old rows
            order = (units_first_row + cand_beams).view(-1)  # (R',) old row of each new row
            new_tokens = cand_tokens.reshape(-1)  # (R',)
            new_lp = lprobs[order, new_tokens]  # (R',)
            if W > 1 or old_units is not None:  # width-1 units only move when units leave
                tokens, pos_lp = tokens.index_select(0, order), pos_lp.index_select(0, order)
                if align:
                    attn = attn.index_select(0, order)
                cache = model.reorder_cache(cache, order, old_units is not None)
                # a unit's rows share one encoder output, so it only moves when units leave
                if old_units is not None:
                    enc = model.reorder(enc, order)
            tokens[:, step + 1] = new_tokens
            pos_lp[:, step] = new_lp
            cum = cand_scores.reshape(-1)
            if old_units is not None:  # rows are numbered afresh
                first_row = torch.arange(n, device=device).unsqueeze(1) * W

        out = []
        for hyps in finalized:
            hyps.sort(key=lambda h: -h["score"])
            out.append(hyps[: cfg.nbest])
        return out

    def _decode(self, model: Any, tokens: torch.Tensor, enc: Any, cache: Any, step: int):
        """One ``decode_step`` -> logits ``(R, V)`` and, with print_alignment, the attention ``(R, S)``."""
        if self.cfg.print_alignment:
            return model.decode_step_attention(tokens, enc, cache, step, self.cfg.alignment_layer)
        return model.decode_step(tokens, enc, cache, step), None

    def _log_probs(
        self, logits: torch.Tensor, tokens: torch.Tensor, step: int, row_max: torch.Tensor, min_unit_max: int,
        never: torch.Tensor,
    ) -> torch.Tensor:
        """Float32 log-probs ``(R, V)`` of the token at ``step`` with every rule applied as -inf.

        Overwrites ``logits`` (fp32) with them: writing into a fresh (R, V) tensor every step costs
        ~40% more than the softmax itself (page faults on a new ~10 MB buffer)."""
        cfg = self.cfg
        logits = logits.float()
        if cfg.temperature != 1.0:
            logits = logits / cfg.temperature
        lprobs = torch.log_softmax(logits, dim=-1, out=logits)  # (R, V)
        lprobs.index_fill_(1, never, -math.inf)  # pad and bos
        if cfg.unkpen:
            lprobs[:, self.unk] -= cfg.unkpen
        if cfg.no_repeat_ngram_size > 0:
            ban_repeated_ngrams(lprobs, tokens[:, 1 : step + 1], cfg.no_repeat_ngram_size)
        at_max = (row_max <= step) if step >= min_unit_max else None  # (R,) rows that must end now
        if step < cfg.min_len:
            if at_max is None:
                lprobs[:, self.eos] = -math.inf
            else:  # the max length wins over min_len
                lprobs[:, self.eos].masked_fill_(~at_max, -math.inf)
        if at_max is not None:
            not_eos = torch.ones(lprobs.size(1), dtype=torch.bool, device=lprobs.device)
            not_eos[self.eos] = False
            lprobs.masked_fill_(at_max.unsqueeze(1) & not_eos, -math.inf)
        return lprobs

    @staticmethod
    def _beam_step(lprobs: torch.Tensor, cum: torch.Tensor, n: int, W: int):
        """Best ``2W`` continuations of each unit -> cumulative scores, tokens, source beams ``(n, 2W)``.

        ``cum`` is constant along a row, so a unit's best ``2W`` continuations are among its rows'
        best ``2W`` log-probs: adding ``cum`` and ranking over ``W * V`` is left to ``(R, 2W)`` of them.
        """
        k = min(2 * W, lprobs.size(1))
        top_lp, top_tokens = row_topk(lprobs, k)  # (R, k)
        scores = (top_lp + cum.unsqueeze(1)).view(n, W * k)  # (n, W*k)
        cand_scores, idx = scores.topk(min(2 * W, W * k), dim=1)  # (n, 2W)
        return cand_scores, top_tokens.view(n, W * k).gather(1, idx), idx // k

    def _finalized(self, tokens, pos_lp, lprobs, rows, scores, step: int):
        """The hypotheses ending with eos at ``step`` on ``rows`` ``(E,)``, moved to the CPU at once:
        tokens and positional scores ``(E, step+1)``, and normalized scores (a list)."""
        hyp_tokens = tokens[rows, 1 : step + 2]  # (E, step+1): generated tokens, then the slot for eos
        hyp_tokens[:, step] = self.eos
        hyp_lp = torch.cat([pos_lp[rows, :step], lprobs[rows, self.eos].unsqueeze(1)], dim=1)  # (E, step+1)
        norm = (scores / (step + 1) ** self.cfg.lenpen).tolist()
        return hyp_tokens.cpu(), hyp_lp.cpu(), norm

    @staticmethod
    def _record(hyps, units: List[int], finalized, unit_sent, unit_count, W: int, attn=None, src_len=None) -> List[int]:
        """Keep each unit's first ``W`` ended hypotheses, in rank order; return the units now full.

        The only per-hypothesis loop of a step, over the eos candidates found at that step.
        """
        hyp_tokens, hyp_lp, norm = hyps
        full = []
        for i, u in enumerate(units):
            count = int(unit_count[u])
            if count >= W:
                continue
            unit_count[u] = count + 1
            if count + 1 == W:
                full.append(u)
            sent = int(unit_sent[u])
            hyp = {"tokens": hyp_tokens[i], "score": norm[i], "positional_scores": hyp_lp[i]}
            if attn is not None:
                hyp["attention"] = attn[i, :, : int(src_len[sent])]  # (L, S_i)
            finalized[sent].append(hyp)
        return full
