"""What both search rule sets share: the model protocol, the hypothesis record, the length penalty and limit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import torch
from torch import Tensor

from nmt.vocab import BOS, EOS, PAD


class SearchState(Protocol):
    """Incremental decoding state: encoder output, cross-attention K/V and self-attention cache, one row each."""

    def select(self: StateT, index: Tensor) -> StateT:
        """Return the state whose row ``i`` is row ``index[i]`` of this one (reorder, duplicate or drop rows)."""
        ...


StateT = TypeVar("StateT", bound=SearchState)


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
        positional_scores: log-probability of each token, EOS last (``len(tokens) + 1`` entries; ``len(tokens)``
            for a hypothesis the ``official`` rules cut at the length limit, which has no EOS).
    """

    tokens: list[int]
    score: float
    logprob: float
    positional_scores: list[float] = field(default_factory=list)


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ``(5 + length) ** alpha / 6 ** alpha`` (the official code's operation order); ``length``
    counts EOS."""
    return (5.0 + length) ** alpha / 6.0 ** alpha


def fairseq_length_norm(length: int, alpha: float) -> float:
    """fairseq's normalization ``length ** alpha`` (``--lenpen``; alpha 0 = unnormalized); ``length`` counts EOS."""
    return float(length) ** alpha


# decode.length_norm -> the divisor of a hypothesis's summed log-probability
LENGTH_NORMS: dict[str, Callable[[int, float], float]] = {"gnmt": length_penalty, "fairseq": fairseq_length_norm}


def max_lengths(src: Tensor, max_len_a: float, max_len_b: int, cap: int | None = None) -> Tensor:
    """Per-sentence output limit ``int(a * |src| + b)`` (non-pad source length), optionally capped; shape (B,)."""
    src_len = (src != PAD).sum(dim=1).double()
    limit = (max_len_a * src_len + max_len_b).long().clamp(min=1)
    return limit.clamp(max=cap) if cap is not None else limit


def mask_step(log_probs: Tensor, at_max: Tensor) -> Tensor:
    """Forbid PAD and BOS everywhere and everything but EOS on rows that reached their length limit (a float32
    copy of ``log_probs`` (N, V))."""
    return mask_step_(log_probs.float().clone(), at_max)


def mask_step_(scores: Tensor, at_max: Tensor) -> Tensor:
    """:func:`mask_step` in place on ``scores`` (N, V): log-probs, or totals that add a per-row score to them (the
    beam search masks its fresh totals rather than copy the log-probs first)."""
    scores[:, [PAD, BOS]] = -torch.inf
    if bool(at_max.any()):  # rare: only at a sentence's last step, so no (N, V) mask is built every step
        rows = at_max.nonzero(as_tuple=True)[0]
        eos = scores[rows, EOS]
        scores[rows] = -torch.inf
        scores[rows, EOS] = eos
    return scores


def nbest_lists(finished: list[list[Hypothesis]], nbest: int) -> list[list[Hypothesis]]:
    """Sort each sentence's finished hypotheses by score; a sentence with none gets one empty -inf hypothesis."""
    result = []
    for hyps in finished:
        ranked = sorted(hyps, key=lambda h: h.score, reverse=True)[:nbest]
        result.append(ranked or [Hypothesis([], -float("inf"), -float("inf"), [-float("inf")])])
    return result


# A chooser picks each row's next token from its masked log-probabilities: (scores (N, V), the rows' original batch
# indices (N,), tokens generated so far) -> (the chosen tokens' scores, the tokens), each (N,). Greedy decoding takes
# the arg-max (:func:`argmax`); sampling draws (:mod:`nmt.search.sampling`).
Chooser = Callable[[Tensor, Tensor, int], tuple[Tensor, Tensor]]


def argmax(scores: Tensor, rows: Tensor, length: int) -> tuple[Tensor, Tensor]:
    """The greedy chooser: each row's best token."""
    best_scores, best = scores.max(dim=1)
    return best_scores, best


# A greedy rule: (log_probs (N, V), tokens generated so far, limits (N,), the rows' original indices (N,), chooser)
# -> (scores, tokens, done) of the step, each (N,); a done row's last token is EOS, or it was cut off at its limit
# (then it has no EOS).
GreedyRule = Callable[[Tensor, int, Tensor, Tensor, Chooser], tuple[Tensor, Tensor, Tensor]]


@torch.no_grad()
def greedy_loop(model: Seq2Seq[StateT], src: Tensor, lenpen: float, limits: Tensor,
                rule: GreedyRule, choose: Chooser = argmax,
                penalty: Callable[[int, float], float] = length_penalty) -> list[list[Hypothesis]]:
    """One hypothesis per row, token by token (``choose``: the arg-max, or a sample), a sentence leaving the batch
    as soon as ``rule`` says it is done; shared by the rule sets, which differ only in their ``rule`` (what may be
    chosen at each step and when a sentence ends)."""
    batch, device = src.size(0), src.device
    state = model.start(src)
    active = torch.arange(batch, device=device)
    tokens = torch.zeros(batch, 0, dtype=torch.long, device=device)
    positional = torch.zeros(batch, 0, device=device)
    totals = torch.zeros(batch, device=device)
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    prev = torch.full((batch,), BOS, dtype=torch.long, device=device)
    while True:
        log_probs, state = model.step(prev, state)
        best_scores, best, done = rule(log_probs, tokens.size(1), limits, active, choose)
        tokens = torch.cat([tokens, best[:, None]], dim=1)
        positional = torch.cat([positional, best_scores[:, None]], dim=1)
        totals = totals + best_scores
        if bool(done.any()):
            divisor = penalty(tokens.size(1), lenpen)
            for original, toks, pos, total in zip(active[done].tolist(), tokens[done].tolist(),
                                                  positional[done].tolist(), totals[done].tolist(), strict=True):
                end = len(toks) - 1 if toks[-1] == EOS else len(toks)
                finished[original].append(Hypothesis(toks[:end], total / divisor, total, pos))
            keep = (~done).nonzero(as_tuple=True)[0]
            if not keep.numel():
                break
            state = state.select(keep)
            active, limits, tokens = active[keep], limits[keep], tokens[keep]
            positional, totals = positional[keep], totals[keep]
        prev = tokens[:, -1]
    return nbest_lists(finished, 1)
