"""The ``official`` rule set: the papers' beam search (QKNorm/TwT ``layers.py`` ``Decoder.beam_decode``).

The beam holds ``beam`` entries per sentence, finished (EOS-ended) ones included; a finished entry competes with
the live ones' extensions under its frozen score until it falls out of the beam or the search ends. EOS is forbidden
at step 0. A sentence is done when all its entries end with EOS or once they have ``max_len`` tokens. See
:mod:`nmt.search` for the rules side by side and ``docs/fidelity.md`` for the checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.config import DecodeConfig
from nmt.search.common import (
    Chooser,
    Hypothesis,
    Seq2Seq,
    StateT,
    argmax,
    length_penalty,
    max_lengths,
    nbest_lists,
)
from nmt.search.topk import topk
from nmt.vocab import BOS, EOS, PAD


@dataclass
class _Pool:
    """The entries of the active sentences: ``width`` rows per sentence, sentence-major (A * width, ...)."""

    active: Tensor  # (A,) index of each active sentence in the original batch
    limits: Tensor  # (A,) max output length (EOS included) of each active sentence
    limit_penalty: Tensor  # (A,) the length penalty at that length (:func:`_settled`)
    logprob: Tensor  # (A, width) summed log-probability of each entry
    scores: Tensor  # (A, width) logprob / length penalty of each entry (frozen once it ended with EOS)
    tokens: Tensor  # (A * width, t) generated tokens, EOS repeated after the first one
    positional: Tensor  # (A * width, t) log-probability of each token (0 for the repeated EOS)


_FORBIDDEN = {False: [PAD, BOS], True: [PAD, BOS, EOS]}  # at step 0 also EOS (the official ``probs[:, eos_id] = -inf``)


def _mask(log_probs: Tensor, first: bool) -> Tensor:
    """Forbid PAD and BOS, and EOS at step 0 (a float32 copy)."""
    log_probs = log_probs.float().clone()
    log_probs[:, _FORBIDDEN[first]] = -torch.inf
    return log_probs


def _ended(pool: _Pool) -> Tensor:
    """(A, width) entries that are over: they end with EOS, or have score -inf (only when a sentence has fewer
    than ``beam`` possible continuations, e.g. a tiny vocabulary; such entries are never returned)."""
    last = pool.tokens[:, -1].view_as(pool.scores)
    return (last == EOS) | ~torch.isfinite(pool.scores)


def _extend(pool: _Pool, log_probs: Tensor, beam: int, lenpen: float,
            ended: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The ``beam`` best entries of the next step among all extensions of live entries and the finished entries
    (``ended``: :func:`_ended` of ``pool``, None at step 0).

    The official decoder divides all (A, W, V) extensions by the length penalty and takes the top ``beam``. The
    penalty is the same for every live extension of a step, so the ``beam`` best live extensions by log-prob are
    the ``beam`` best by score: only those are divided (bitwise the official scores) and ranked together with the
    finished entries (EOS again at their frozen score), sparing two passes over the (A, W, V) tensor.

    Returns:
        new scores (A, K), new summed log-probs (A, K), parent row of each (A * K,), its token (A * K,).
    """
    n_active, width = pool.scores.shape
    vocab = log_probs.size(1)
    totals = pool.logprob.view(-1, 1) + log_probs.float()  # (A * W, V)
    totals[:, _FORBIDDEN[pool.tokens.size(1) == 0]] = -torch.inf  # on the fresh totals: no copy of log_probs
    k = min(beam, width * vocab)
    if ended is not None and not bool(ended.any()):
        ended = None  # no finished entry: nothing to rank beside the extensions
    if ended is not None:
        # finished entries have no extension (filling their rows only, not a pass over a broadcast (A * W, V) mask)
        totals.index_fill_(0, ended.view(-1).nonzero().squeeze(1), -torch.inf)
    new_logprob, index = topk(totals.view(n_active, width * vocab), k)  # (A, W*V) -> (A, K)
    new_scores = new_logprob / length_penalty(pool.tokens.size(1) + 1, lenpen)
    if ended is not None:
        kept = torch.where(ended, pool.scores, -torch.inf)  # (A, W): a finished entry's only candidate
        eos_index = (torch.arange(width, device=index.device) * vocab + EOS).expand(n_active, width)
        new_scores, pick = torch.cat([new_scores, kept], dim=1).topk(k, dim=1)  # (A, K + W) -> (A, K)
        new_logprob = torch.cat([new_logprob, pool.logprob], dim=1).gather(1, pick)
        index = torch.cat([index, eos_index], dim=1).gather(1, pick)
    base = torch.arange(n_active, device=index.device)[:, None] * width
    parents = (base + index // vocab).view(-1)  # (A, K) -> (A * K,)
    return new_scores, new_logprob, parents, (index % vocab).view(-1)


# a log-probability computed in float32 can come out a few ulps above 0 (log_softmax of a near-certain token): the
# bound of :func:`_settled` allows this much per remaining step, far above such rounding and far below real margins
ROUNDING_PER_STEP = 1e-4
SETTLE = True  # stop a sentence once its n-best can no longer change (:func:`_settled`)


def _settled(pool: _Pool, ended: Tensor, nbest: int) -> Tensor:
    """(A,) sentences whose ``nbest`` best entries are finished and can no longer be displaced: the search would
    return them whatever it did next, so stopping now returns the same n-best, only sooner.

    A live entry with summed log-probability ``s < 0`` at length ``t`` can only add log-probabilities <= 0, so any
    entry descending from it, finished at a length ``L <= limit`` or cut off at ``limit``, scores at most
    ``s / lp(L) <= s / lp(limit)`` (``lp`` grows with the length for ``lenpen >= 0``). When every live entry's bound
    is below the ``nbest``-th best finished score, nothing that can still enter the beam outranks the ``nbest`` best
    finished entries, and none of them can fall out of it (that takes ``beam`` better entries). Under the official
    rules a sentence otherwise runs until all ``beam`` entries end or the limit (``|src| + 50``): a batch's last
    steps are mostly sentences waiting on entries that cannot win.
    """
    finished = torch.where(ended, pool.scores, -torch.inf)  # (A, W); impossible entries are -inf already
    kth = finished.topk(nbest, dim=1).values[:, -1] if nbest > 1 else finished.amax(dim=1)  # (A,), -inf if none
    # a positive kth (rounding) is not trusted: at most 0 keeps every accepted bound's numerator negative, where
    # dividing by lp(limit) gives its largest value
    kth = kth.clamp(max=0.0)
    slack = (pool.limits - pool.tokens.size(1)).clamp(min=0) * ROUNDING_PER_STEP  # (A,)
    bound = (pool.logprob + slack[:, None]) / pool.limit_penalty[:, None]  # (A, W)
    return ((bound < kth[:, None]) | ended).all(dim=1)


def _emit(pool: _Pool, done: Tensor, finished: list[list[Hypothesis]]) -> None:
    """Add every entry of the done sentences to ``finished``: tokens up to the first EOS (none if cut off)."""
    width = pool.scores.size(1)
    sentences = done.nonzero(as_tuple=True)[0]
    rows = (sentences[:, None] * width + torch.arange(width, device=done.device)).view(-1)
    originals = pool.active[sentences].repeat_interleave(width).tolist()
    for original, toks, pos, score, total in zip(originals, pool.tokens[rows].tolist(), pool.positional[rows].tolist(),
                                                 pool.scores[sentences].view(-1).tolist(),
                                                 pool.logprob[sentences].view(-1).tolist(), strict=True):
        if score == -torch.inf:
            continue
        end = toks.index(EOS) if EOS in toks else len(toks)
        finished[original].append(Hypothesis(toks[:end], score, total, pos[: end + 1]))


@torch.no_grad()
def official_beam_search(
    model: Seq2Seq[StateT], src: Tensor, settings: DecodeConfig, max_len_cap: int | None
) -> list[list[Hypothesis]]:
    """Beam search under the official rules (arguments and result as :func:`nmt.search.beam_search`; the official
    decoder has the GNMT penalty only)."""
    beam, lenpen, length_norm, nbest = settings.beam, settings.lenpen, settings.length_norm, settings.nbest
    max_len_a, max_len_b = settings.max_len_a, settings.max_len_b
    if length_norm != "gnmt":
        raise ValueError(f"the official search has the GNMT length penalty only, not {length_norm!r}")
    batch, device = src.size(0), src.device
    state = model.start(src)
    limits = max_lengths(src, max_len_a, max_len_b, max_len_cap)
    pool = _Pool(
        active=torch.arange(batch, device=device),
        limits=limits,
        limit_penalty=torch.tensor([length_penalty(n, lenpen) for n in limits.tolist()], device=device),
        logprob=torch.zeros(batch, 1, device=device),  # width 1 at step 0: one row per sentence
        scores=torch.zeros(batch, 1, device=device),
        tokens=torch.zeros(batch, 0, dtype=torch.long, device=device),
        positional=torch.zeros(batch, 0, device=device),
    )
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    prev = torch.full((batch,), BOS, dtype=torch.long, device=device)
    ended: Tensor | None = None  # (A, width) the pool's entries that are over (none at step 0)
    while True:
        log_probs, state = model.step(prev, state)
        scores, logprob, parents, new_tok = _extend(pool, log_probs, beam, lenpen, ended)
        step_scores = logprob.view(-1) - pool.logprob.view(-1)[parents]
        width = scores.size(1)
        pool = _Pool(pool.active, pool.limits, pool.limit_penalty, logprob, scores,
                     torch.cat([pool.tokens[parents], new_tok[:, None]], dim=1),
                     torch.cat([pool.positional[parents], step_scores[:, None]], dim=1))
        ended = _ended(pool)
        done = ended.all(dim=1) | (pool.limits <= pool.tokens.size(1))  # (A,)
        if SETTLE and lenpen >= 0 and width >= nbest:
            done |= _settled(pool, ended, nbest)
        if bool(done.any()):
            _emit(pool, done, finished)
            keep = (~done).nonzero(as_tuple=True)[0]  # (A',)
            if not keep.numel():
                break
            rows = (keep[:, None] * width + torch.arange(width, device=device)).view(-1)  # (A' * width,)
            state = state.select(parents[rows])
            pool = _Pool(pool.active[keep], pool.limits[keep], pool.limit_penalty[keep], logprob[keep],
                         scores[keep], pool.tokens[rows], pool.positional[rows])
            ended = ended[keep]
        else:  # every sentence goes on: the pool is already the next one's
            state = state.select(parents)
        prev = pool.tokens[:, -1]
    return nbest_lists(finished, nbest)


def greedy_rule(log_probs: Tensor, length: int, limits: Tensor, rows: Tensor,
                choose: Chooser = argmax) -> tuple[Tensor, Tensor, Tensor]:
    """Greedy decoding under the official rules (:func:`nmt.search.common.greedy_loop`), the same output as
    :func:`official_beam_search` with beam 1: no EOS at step 0; a sentence ends with EOS or is cut off (without
    EOS) after ``limit`` tokens."""
    best_scores, best = choose(_mask(log_probs, first=length == 0), rows, length)
    return best_scores, best, (best == EOS) | (limits <= length + 1)
