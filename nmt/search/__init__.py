"""Batched beam search and greedy decoding over a model's incremental-decoding cache.

The model is anything that follows the :class:`Seq2Seq` protocol of ``docs/design.md``: ``start(src)`` encodes a
batch, ``step(prev, state)`` returns next-token log-probabilities for every live row, and ``state.select(index)``
reorders, duplicates or drops rows. Beam search keeps all sentences and all beams of a batch in one set of rows;
a sentence whose search is over leaves the computation (its rows are dropped with ``state.select``), so later steps
run on fewer rows.

Two rule sets (``decode.search``, :data:`SEARCHES`); both feed BOS at step 0, never generate PAD or BOS, return
tokens without BOS and EOS, count EOS in the length ``|y|`` and score a hypothesis by its summed log-probability
divided by the GNMT length penalty ``lp = (5 + |y|) ** a / 6 ** a`` (Wu et al. 2016, arXiv:1609.08144; ``lenpen
= 0`` gives the plain sum). The length limit is ``max_len = int(a * n + b)`` for ``n`` non-pad source tokens (EOS
included, as fed to the model).

- ``official`` (default): the papers' decoder (QKNorm/TwT ``Decoder.beam_decode``). EOS is forbidden at step 0.
  The beam holds ``beam`` entries, finished ones included: each step ranks every one-token extension of the live
  entries (scored with the penalty of their new length) together with the finished entries (which keep their
  score), and keeps the ``beam`` best. A sentence is done when all ``beam`` entries end with EOS or after
  ``max_len`` tokens (EOS included): entries cut off there are returned without EOS, scored at their length. Its
  n-best list is the ``beam`` entries sorted by score. A sentence leaves the search sooner once its ``nbest`` best
  entries are finished and no live entry can outscore them whatever it generates (its summed log-probability
  only falls, and the penalty of ``max_len`` is the largest it can divide by): the same n-best, fewer steps.
- ``fairseq``: fairseq's ``SequenceGenerator`` with its defaults (its own unit tests pass:
  ``tests/test_fairseq_cases.py``). EOS is forbidden at step 0 (``--min-len 1``). Each step takes the ``2 * beam``
  best extensions: EOS extensions among the ``beam`` best move to a finished list (at most ``beam`` per sentence in
  all, best first, as ``finalize_hypos``) and the ``beam`` best non-EOS extensions stay live. A sentence is done once
  it has ``beam`` finished hypotheses or has produced ``max_len`` tokens, where every live beam is forced to end with
  EOS (``max_len`` tokens before EOS). ``decode.length_norm: fairseq`` scores by ``logprob / |y| ** lenpen``,
  fairseq's normalization (``lenpen 0``: its ``--unnormalized``), instead of the GNMT penalty.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from nmt.config import DecodeConfig
from nmt.search import fairseq, official
from nmt.search.common import (
    LENGTH_NORMS,
    GreedyRule,
    Hypothesis,
    SearchState,
    Seq2Seq,
    StateT,
    greedy_loop,
    length_penalty,
    max_lengths,
)
from nmt.search.sampling import Sampler, Sampling

__all__ = ["SEARCHES", "Hypothesis", "Sampling", "SearchState", "Seq2Seq", "beam_search", "decode",
           "greedy_search", "length_penalty", "max_lengths", "sample"]

_DEFAULTS = DecodeConfig()  # the defaults live in DecodeConfig's fields only

# decode.search -> (beam search, greedy rule); the keys equal config.SearchName (checked by a test).
# A rule's beam search: (model, src, settings, max_len_cap) -> n-best lists.
BeamSearch = Callable[[Seq2Seq[Any], Tensor, DecodeConfig, int | None], list[list[Hypothesis]]]
SEARCHES: dict[str, tuple[BeamSearch, GreedyRule]] = {
    "official": (official.official_beam_search, official.greedy_rule),
    "fairseq": (fairseq.fairseq_beam_search, fairseq.greedy_rule),
}


def _rules(search: str) -> tuple[BeamSearch, GreedyRule]:
    if search not in SEARCHES:
        raise ValueError(f"unknown search {search!r} (valid: {', '.join(SEARCHES)})")
    return SEARCHES[search]


def beam_search(
    model: Seq2Seq[StateT],
    src: Tensor,
    beam: int = _DEFAULTS.beam,
    lenpen: float = _DEFAULTS.lenpen,
    max_len_a: float = _DEFAULTS.max_len_a,
    max_len_b: int = _DEFAULTS.max_len_b,
    nbest: int = _DEFAULTS.nbest,
    max_len_cap: int | None = None,
    search: str = _DEFAULTS.search,
    length_norm: str = _DEFAULTS.length_norm,
) -> list[list[Hypothesis]]:
    """Beam search for a batch of source sentences.

    Args:
        model: a :class:`Seq2Seq` (``start``/``step``/``state.select``).
        src: (B, S) source ids (EOS-terminated), PAD-padded, on the model's device.
        beam: hypotheses kept per sentence.
        lenpen: alpha of the GNMT length penalty.
        max_len_a, max_len_b: output limit ``int(a * |src| + b)`` (``official``: tokens with EOS; ``fairseq``:
            tokens before EOS).
        nbest: hypotheses returned per sentence (at most ``beam``).
        max_len_cap: optional absolute limit on the output length (e.g. the model's positions).
        search: the rule set, a key of :data:`SEARCHES` (see the module docstring).
        length_norm: ``gnmt`` (the penalty above) or ``fairseq`` (``score / |y| ** lenpen``; fairseq rules only).

    Returns:
        For each sentence, up to ``nbest`` hypotheses sorted by score (best first).
    """
    settings = dataclasses.replace(_DEFAULTS, beam=beam, lenpen=lenpen, max_len_a=max_len_a, max_len_b=max_len_b,
                                   nbest=nbest, search=search, length_norm=length_norm)
    return _beam(model, src, settings, max_len_cap)


def _beam(model: Seq2Seq[StateT], src: Tensor, settings: DecodeConfig,
          max_len_cap: int | None) -> list[list[Hypothesis]]:
    if not 1 <= settings.nbest <= settings.beam:
        raise ValueError(f"nbest must be in [1, beam={settings.beam}], got {settings.nbest}")
    return _rules(settings.search)[0](model, src, settings, max_len_cap)


def greedy_search(
    model: Seq2Seq[StateT],
    src: Tensor,
    lenpen: float = _DEFAULTS.lenpen,
    max_len_a: float = _DEFAULTS.max_len_a,
    max_len_b: int = _DEFAULTS.max_len_b,
    max_len_cap: int | None = None,
    search: str = _DEFAULTS.search,
    length_norm: str = _DEFAULTS.length_norm,
) -> list[list[Hypothesis]]:
    """Arg-max decoding: the 1-best of :func:`beam_search` with ``beam=1`` under the same rules, faster."""
    return greedy_loop(model, src, lenpen, max_lengths(src, max_len_a, max_len_b, max_len_cap), _rules(search)[1],
                       penalty=LENGTH_NORMS[length_norm])


def sample(model: Seq2Seq[StateT], src: Tensor, settings: DecodeConfig, sampling: Sampling,
           keys: Tensor | None = None, max_len_cap: int | None = None) -> list[list[Hypothesis]]:
    """``settings.nbest`` samples per sentence (:mod:`nmt.search.sampling`) under ``settings.search``'s rules and
    length limit, best score first.

    Args:
        keys: (B,) each sentence's index in the whole input (default: its row), which with the seed fixes its
            samples whatever the batch it is decoded in.
    """
    count, batch = settings.nbest, src.size(0)
    keys = torch.arange(batch) if keys is None else keys
    rows = src.repeat_interleave(count, dim=0)
    sample_keys = (keys.to(torch.int64).repeat_interleave(count) * count + torch.arange(count).repeat(batch))
    limits = max_lengths(rows, settings.max_len_a, settings.max_len_b, max_len_cap)
    rule = _rules(settings.search)[1]
    drawn = greedy_loop(model, rows, settings.lenpen, limits, rule, Sampler(sampling, sample_keys),
                        LENGTH_NORMS[settings.length_norm])
    return [sorted((d[0] for d in drawn[i * count:(i + 1) * count]), key=lambda h: h.score, reverse=True)
            for i in range(batch)]


def decode(model: Seq2Seq[StateT], src: Tensor, settings: DecodeConfig, max_len_cap: int | None = None,
           sampling: Sampling | None = None, keys: Tensor | None = None) -> list[list[Hypothesis]]:
    """Decode one batch as ``settings`` say: with ``sampling``, :func:`sample` (``keys`` as there); else
    :func:`greedy_search` at ``beam == 1`` (the same 1-best, faster), else :func:`beam_search` returning
    ``settings.nbest`` hypotheses per sentence. The one place validation and ``nmt translate`` choose how to
    search."""
    if sampling is not None:
        return sample(model, src, settings, sampling, keys, max_len_cap)
    if settings.beam == 1:
        return greedy_search(model, src, settings.lenpen, settings.max_len_a, settings.max_len_b, max_len_cap,
                             settings.search, settings.length_norm)
    return _beam(model, src, settings, max_len_cap)  # the settings travel to the rules unchanged
