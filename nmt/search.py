"""Batched beam search and greedy decoding over a model's incremental-decoding cache.

The model is anything that follows the :class:`Seq2Seq` protocol of ``docs/design.md``: ``start(src)`` encodes a
batch, ``step(prev, state)`` returns next-token log-probabilities for every live row, and ``state.select(index)``
reorders, duplicates or drops rows. Beam search keeps all sentences and all beams of a batch in one set of rows;
a sentence whose search is over leaves the computation (its rows are dropped with ``state.select``), so later steps
run on fewer rows.

Conventions (as in fairseq):

- Step 0 feeds BOS. PAD and BOS are never generated.
- A hypothesis ends when EOS is chosen. The output tokens exclude BOS and EOS, but EOS's log-probability is part of
  the score and EOS counts in the length ``|y|`` of the length penalty.
- Score = sum of log-probs / lp with the GNMT length penalty lp = ((5 + |y|) / 6) ** lenpen (Wu et al. 2016,
  arXiv:1609.08144); ``lenpen = 0`` gives the plain sum.
- A sentence of ``n`` non-pad source tokens produces at most ``max_len = int(a * n + b)`` tokens before EOS; at that
  step every live beam is forced to end with EOS.
- Each step takes the ``2 * beam`` best extensions: EOS extensions among the ``beam`` best are moved to the
  finished list, and the ``beam`` best non-EOS extensions stay live. A sentence is done once it has ``beam``
  finished hypotheses (or reached ``max_len``); its n-best list is the finished ones sorted by score.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import torch
from torch import Tensor

from nmt.vocab import BOS, EOS, PAD


class DecoderState(Protocol):
    """Incremental decoding state: encoder output, cross-attention K/V and self-attention cache, one row each."""

    def select(self: StateT, index: Tensor) -> StateT:
        """Return the state whose row ``i`` is row ``index[i]`` of this one (reorder, duplicate or drop rows)."""
        ...


StateT = TypeVar("StateT", bound=DecoderState)


class Seq2Seq(Protocol[StateT]):
    """What the search needs from a model (see ``docs/design.md``); generic in the model's own state class."""

    def start(self, src: Tensor) -> StateT:
        """Encode ``src`` (B, S) and return a state with B rows and an empty decoder cache."""
        ...

    def step(self, prev: Tensor, state: StateT) -> tuple[Tensor, StateT]:
        """Feed the previous token of each row (N,) and return float log-probs (N, V) and the updated state."""
        ...


@dataclass
class Hypothesis:
    """One finished translation.

    Attributes:
        tokens: generated token ids without BOS and EOS.
        score: ``logprob`` divided by the length penalty (the ranking key).
        logprob: sum of the token log-probabilities, EOS included.
        positional_scores: log-probability of each token, EOS last (``len(tokens) + 1`` entries).
    """

    tokens: list[int]
    score: float
    logprob: float
    positional_scores: list[float] = field(default_factory=list)


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + length) / 6) ** alpha; ``length`` counts EOS."""
    return ((5.0 + length) / 6.0) ** alpha


def max_lengths(src: Tensor, max_len_a: float, max_len_b: int, cap: int | None = None) -> Tensor:
    """Per-sentence output limit ``int(a * |src| + b)`` (non-pad source length), optionally capped; shape (B,)."""
    src_len = (src != PAD).sum(dim=1).double()
    limit = (max_len_a * src_len + max_len_b).long().clamp(min=1)
    return limit.clamp(max=cap) if cap is not None else limit


def _mask_step(log_probs: Tensor, at_max: Tensor) -> Tensor:
    """Forbid PAD and BOS everywhere and everything but EOS on rows that reached their length limit."""
    log_probs = log_probs.float().clone()
    log_probs[:, [PAD, BOS]] = -torch.inf
    if bool(at_max.any()):  # rare: only at a sentence's last step, so no (N, V) mask is built every step
        rows = at_max.nonzero(as_tuple=True)[0]
        eos = log_probs[rows, EOS]
        log_probs[rows] = -torch.inf
        log_probs[rows, EOS] = eos
    return log_probs


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


def _expand(beams: _Beams, log_probs: Tensor, beam: int) -> tuple[Tensor, Tensor, Tensor]:
    """Score every one-token extension of every live beam; return the ``2 * beam`` best per sentence.

    Returns:
        candidate cumulative scores (A, C), source beam of each candidate (A, C), its token (A, C).
    """
    n_active, width = beams.scores.shape
    vocab = log_probs.size(1)
    totals = beams.scores.unsqueeze(-1) + log_probs.view(n_active, width, vocab)  # (A, W, V)
    k = min(2 * beam, width * vocab)
    cand_scores, cand_index = totals.view(n_active, width * vocab).topk(k, dim=1)  # (A, W*V) -> (A, C)
    return cand_scores, cand_index // vocab, cand_index % vocab


def _finalize(
    beams: _Beams, cand: tuple[Tensor, Tensor, Tensor], beam: int, lenpen: float, finished: list[list[Hypothesis]]
) -> Tensor:
    """Move the EOS candidates ranked among the ``beam`` best to ``finished``; return how many each sentence got."""
    cand_scores, cand_beam, cand_tok = cand
    is_final = (cand_tok == EOS) & torch.isfinite(cand_scores)
    is_final[:, beam:] = False
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
    penalty = length_penalty(beams.tokens.size(1) + 1, lenpen)
    for original, toks, pos, total in zip(originals, tokens, positional, totals.tolist()):
        finished[original].append(Hypothesis(toks, total / penalty, total, pos))
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


def _nbest(finished: list[list[Hypothesis]], nbest: int) -> list[list[Hypothesis]]:
    """Sort each sentence's finished hypotheses by score; a sentence with none gets one empty -inf hypothesis."""
    result = []
    for hyps in finished:
        ranked = sorted(hyps, key=lambda h: h.score, reverse=True)[:nbest]
        result.append(ranked or [Hypothesis([], -float("inf"), -float("inf"), [-float("inf")])])
    return result


@torch.no_grad()
def beam_search(
    model: Seq2Seq[StateT],
    src: Tensor,
    beam: int = 4,
    lenpen: float = 0.6,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    nbest: int = 1,
    max_len_cap: int | None = None,
) -> list[list[Hypothesis]]:
    """Beam search for a batch of source sentences.

    Args:
        model: a :class:`Seq2Seq` (``start``/``step``/``state.select``).
        src: (B, S) source ids, PAD-padded, on the model's device.
        beam: live hypotheses kept per sentence.
        lenpen: alpha of the GNMT length penalty.
        max_len_a, max_len_b: output limit ``int(a * |src| + b)`` tokens before EOS.
        nbest: hypotheses returned per sentence (at most ``beam``).
        max_len_cap: optional absolute limit on the output length (e.g. the model's positions).

    Returns:
        For each sentence, up to ``nbest`` hypotheses sorted by score (best first).
    """
    if not 1 <= nbest <= beam:
        raise ValueError(f"nbest must be in [1, beam={beam}], got {nbest}")
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
        log_probs = _mask_step(log_probs, at_max.repeat_interleave(beams.width))
        cand = _expand(beams, log_probs, beam)
        beams.n_finished += _finalize(beams, cand, beam, lenpen, finished)
        done = (beams.n_finished >= beam) | at_max
        if bool(done.all()):
            break
        beams, state = _advance(beams, state, _prune(beams, cand, beam), done)
        prev = beams.tokens[:, -1]
    return _nbest(finished, nbest)


@torch.no_grad()
def greedy_search(
    model: Seq2Seq[StateT],
    src: Tensor,
    lenpen: float = 0.6,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    max_len_cap: int | None = None,
) -> list[list[Hypothesis]]:
    """Greedy decoding (arg-max each step); same conventions and output type as :func:`beam_search` (1-best)."""
    batch, device = src.size(0), src.device
    state = model.start(src)
    active = torch.arange(batch, device=device)
    limits = max_lengths(src, max_len_a, max_len_b, max_len_cap)
    tokens = torch.zeros(batch, 0, dtype=torch.long, device=device)
    positional = torch.zeros(batch, 0, device=device)
    totals = torch.zeros(batch, device=device)
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    prev = torch.full((batch,), BOS, dtype=torch.long, device=device)
    while True:
        at_max = limits == tokens.size(1)
        log_probs, state = model.step(prev, state)
        best_scores, best = _mask_step(log_probs, at_max).max(dim=1)
        best = best.masked_fill(at_max, EOS)  # even if the model gives EOS probability 0
        tokens = torch.cat([tokens, best[:, None]], dim=1)
        positional = torch.cat([positional, best_scores[:, None]], dim=1)
        totals = totals + best_scores
        ended = (best == EOS) | at_max
        if bool(ended.any()):
            penalty = length_penalty(tokens.size(1), lenpen)
            for original, toks, pos, total in zip(active[ended].tolist(), tokens[ended, :-1].tolist(),
                                                  positional[ended].tolist(), totals[ended].tolist()):
                finished[original].append(Hypothesis(toks, total / penalty, total, pos))
            keep = (~ended).nonzero(as_tuple=True)[0]
            if not keep.numel():
                break
            state = state.select(keep)
            active, limits, tokens = active[keep], limits[keep], tokens[keep]
            positional, totals = positional[keep], totals[keep]
        prev = tokens[:, -1]
    return _nbest(finished, 1)
