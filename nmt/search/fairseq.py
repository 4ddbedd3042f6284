"""The ``fairseq`` rule set: finished hypotheses leave the beam; ``2 * beam`` candidates per step; EOS forced at the
length limit (see :mod:`nmt.search` for the rules side by side)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.config import DecodeConfig
from nmt.search.common import (
    LENGTH_NORMS,
    Chooser,
    Hypothesis,
    Seq2Seq,
    StateT,
    argmax,
    length_penalty,
    mask_step,
    mask_step_,
    max_lengths,
    nbest_lists,
)
from nmt.search.topk import topk
from nmt.vocab import BOS, EOS

MIN_LEN = 1  # fairseq's default --min-len: EOS is forbidden while fewer tokens have been generated


@dataclass
class _Beams:
    """Live search rows: ``width`` rows per active sentence, flattened as sentence-major (A * width, ...)."""

    active: Tensor  # (A,) index of each active sentence in the original batch
    limits: Tensor  # (A,) max output length of each active sentence
    scores: Tensor  # (A, width) cumulative log-probability of each live beam
    tokens: Tensor  # (A * width, t) generated tokens so far
    positional: Tensor  # (A * width, t) log-probability of each generated token
    n_finished: Tensor  # (A,) finished hypotheses so far

    @property
    def width(self) -> int:
        return self.scores.size(1)


def _expand(beams: _Beams, log_probs: Tensor, beam: int, at_max: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Score every one-token extension of every live beam (:func:`mask_step_` rules, ``at_max`` (A * W,)); return
    the ``2 * beam`` best per sentence.

    Returns:
        candidate cumulative scores (A, C), source beam of each candidate (A, C), its token (A, C).
    """
    n_active, width = beams.scores.shape
    vocab = log_probs.size(1)
    totals = beams.scores.view(-1, 1) + log_probs.float()  # (A * W, V), masked in place: no copy of log_probs
    mask_step_(totals, at_max)
    if beams.tokens.size(1) < MIN_LEN:
        totals[:, EOS] = -torch.inf  # fairseq's --min-len 1 (its default): no empty hypothesis
    k = min(2 * beam, width * vocab)
    cand_scores, cand_index = topk(totals.view(n_active, width * vocab), k)  # (A, W*V) -> (A, C)
    return cand_scores, cand_index // vocab, cand_index % vocab


def _finalize(
    beams: _Beams, cand: tuple[Tensor, Tensor, Tensor], beam: int, lenpen: float, finished: list[list[Hypothesis]],
    penalty: Callable[[int, float], float] = length_penalty,
) -> Tensor:
    """Move the EOS candidates ranked among the ``beam`` best to ``finished``, best first and no more than a
    sentence's ``beam`` finished hypotheses in all (fairseq's ``finalize_hypos``); return how many each got."""
    cand_scores, cand_beam, cand_tok = cand
    is_final = (cand_tok == EOS) & torch.isfinite(cand_scores)
    is_final[:, beam:] = False
    is_final &= is_final.cumsum(dim=1) <= (beam - beams.n_finished)[:, None]
    counts = is_final.sum(dim=1)
    if not bool(counts.any()):
        return counts
    sent, rank = is_final.nonzero(as_tuple=True)
    rows = sent * beams.width + cand_beam[sent, rank]
    totals = cand_scores[sent, rank]
    eos_scores = totals - beams.scores[sent, cand_beam[sent, rank]]
    positional = torch.cat([beams.positional[rows], eos_scores[:, None]], dim=1).tolist()
    tokens = beams.tokens[rows].tolist()
    originals = beams.active[sent].tolist()
    divisor = penalty(beams.tokens.size(1) + 1, lenpen)
    for original, toks, pos, total in zip(originals, tokens, positional, totals.tolist()):
        finished[original].append(Hypothesis(toks, total / divisor, total, pos))
    return counts


def _prune(beams: _Beams, cand: tuple[Tensor, Tensor, Tensor], beam: int) -> tuple[Tensor, Tensor, Tensor]:
    """Keep the ``beam`` best non-EOS candidates per sentence: their scores, source rows (A*beam,) and tokens."""
    cand_scores, cand_beam, cand_tok = cand
    n_cand = cand_scores.size(1)
    # Rank order, with every EOS candidate pushed behind all non-EOS ones.
    order = torch.arange(n_cand, device=cand_scores.device) + (cand_tok == EOS).long() * n_cand
    keep = order.topk(beam, dim=1, largest=False).indices  # (A, beam)
    new_scores = cand_scores.gather(1, keep)
    base = torch.arange(cand_scores.size(0), device=cand_scores.device)[:, None] * beams.width
    rows = (base + cand_beam.gather(1, keep)).view(-1)  # (A, beam) -> (A*beam,)
    return new_scores, rows, cand_tok.gather(1, keep).view(-1)


def _advance(
    beams: _Beams, state: StateT, new: tuple[Tensor, Tensor, Tensor], done: Tensor
) -> tuple[_Beams, StateT]:
    """Append the surviving tokens, reorder rows to their source beams and drop the sentences that are done."""
    new_scores, rows, new_tok = new
    beam = new_scores.size(1)
    prev_scores = beams.scores.view(-1)[rows].view_as(new_scores)
    step_scores = (new_scores - prev_scores).view(-1, 1)
    keep = (~done).nonzero(as_tuple=True)[0]  # (A',)
    keep_rows = (keep[:, None] * beam + torch.arange(beam, device=keep.device)).view(-1)  # (A'*beam,)
    rows = rows[keep_rows]
    state = state.select(rows)
    beams = _Beams(
        active=beams.active[keep],
        limits=beams.limits[keep],
        scores=new_scores[keep],
        tokens=torch.cat([beams.tokens[rows], new_tok[keep_rows, None]], dim=1),
        positional=torch.cat([beams.positional[rows], step_scores[keep_rows]], dim=1),
        n_finished=beams.n_finished[keep],
    )
    return beams, state


@torch.no_grad()
def fairseq_beam_search(
    model: Seq2Seq[StateT], src: Tensor, settings: DecodeConfig, max_len_cap: int | None
) -> list[list[Hypothesis]]:
    """Beam search for a batch of source sentences.

    Args:
        model: a :class:`Seq2Seq` (``start``/``step``/``state.select``).
        src: (B, S) source ids, PAD-padded, on the model's device.
        settings: ``beam`` live hypotheses kept per sentence, ``lenpen`` the alpha of the length normalization
            ``length_norm`` (a key of :data:`nmt.search.common.LENGTH_NORMS`: GNMT's penalty, or fairseq's
            |y|^lenpen), output limit ``int(max_len_a * |src| + max_len_b)`` tokens before EOS, ``nbest``
            hypotheses returned per sentence.
        max_len_cap: optional absolute limit on the output length (e.g. the model's positions).

    Returns:
        For each sentence, up to ``nbest`` hypotheses sorted by score (best first).
    """
    beam, lenpen, length_norm, nbest = settings.beam, settings.lenpen, settings.length_norm, settings.nbest
    max_len_a, max_len_b = settings.max_len_a, settings.max_len_b
    penalty = LENGTH_NORMS[length_norm]
    batch, device = src.size(0), src.device
    state = model.start(src)
    beams = _Beams(
        active=torch.arange(batch, device=device),
        limits=max_lengths(src, max_len_a, max_len_b, max_len_cap),
        scores=torch.zeros(batch, 1, device=device),  # width 1 at step 0: no duplicate beams
        tokens=torch.zeros(batch, 0, dtype=torch.long, device=device),
        positional=torch.zeros(batch, 0, device=device),
        n_finished=torch.zeros(batch, dtype=torch.long, device=device),
    )
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    prev = torch.full((batch,), BOS, dtype=torch.long, device=device)
    while True:
        step = beams.tokens.size(1)
        at_max = beams.limits == step  # (A,)
        log_probs, state = model.step(prev, state)
        cand = _expand(beams, log_probs, beam, at_max.repeat_interleave(beams.width))
        beams.n_finished += _finalize(beams, cand, beam, lenpen, finished, penalty)
        done = (beams.n_finished >= beam) | at_max
        if bool(done.all()):
            break
        beams, state = _advance(beams, state, _prune(beams, cand, beam), done)
        prev = beams.tokens[:, -1]
    return nbest_lists(finished, nbest)


def greedy_rule(log_probs: Tensor, length: int, limits: Tensor, rows: Tensor,
                choose: Chooser = argmax) -> tuple[Tensor, Tensor, Tensor]:
    """Greedy decoding under fairseq's rules (:func:`nmt.search.common.greedy_loop`), the same output as
    :func:`fairseq_beam_search` with beam 1: EOS forbidden at step 0 (fairseq's --min-len 1) and forced once
    ``limit`` tokens precede it; every sentence ends with EOS."""
    at_max = limits == length
    scores = mask_step(log_probs, at_max)
    if length < MIN_LEN:
        scores[:, EOS] = -torch.inf
    best_scores, best = choose(scores, rows, length)
    best = best.masked_fill(at_max, EOS)  # even if the model gives EOS probability 0
    return best_scores, best, best == EOS
