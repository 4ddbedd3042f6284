"""Sampling instead of searching: each output token drawn from the model's distribution (fairseq's ``--sampling``,
``--sampling-topk``, ``--sampling-topp``, ``--temperature``), for back-translation (Edunov et al. 2018, "Understanding
Back-Translation at Scale") and diverse outputs.

A sample is produced by the greedy loop of the chosen rule set (:func:`nmt.search.common.greedy_loop`: the same
forbidden tokens, EOS rules and length limit as greedy decoding) with the arg-max replaced by a draw: the masked
log-probabilities are divided by the temperature and renormalized, restricted to the ``topk`` most probable tokens
and/or the smallest set whose probability reaches ``topp`` (nucleus sampling, Holtzman et al. 2020; the token that
crosses ``topp`` is kept, as in fairseq), and a token is drawn by inverting the restricted distribution's CDF. A
token's score is the model's log-probability of it, untempered, and a sample's score their sum divided by the length
penalty: samples and the search's hypotheses rank on one scale, the model's (fairseq reports tempered scores). With
``topk = 1`` the draw is the arg-max: exactly greedy decoding, scores included.

The uniform number behind each draw is a counter-based hash of (seed, the sample's key, the step), not a generator's
next value: a sample's key is its input sentence's index in the whole input times the number of samples plus which
sample it is, so the same seed gives the same samples whatever the batch composition, batch size or buffer size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class Sampling:
    """How to draw samples: ``topk`` 0 and ``topp`` 1.0 mean no restriction."""

    topk: int = 0
    topp: float = 1.0
    temperature: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.topk < 0:
            raise ValueError(f"--sampling-topk {self.topk} must be 0 (off) or positive")
        if not 0.0 < self.topp <= 1.0:
            raise ValueError(f"--sampling-topp {self.topp} must be in (0, 1]")
        if not self.temperature > 0.0:
            raise ValueError(f"--temperature {self.temperature} must be positive")


def _mix(x: Tensor) -> Tensor:
    """splitmix64's finalizer on int64 tensors (wrapping arithmetic; logical shifts through masks)."""
    def shift(v: Tensor, bits: int) -> Tensor:
        return (v >> bits) & ((1 << (64 - bits)) - 1)

    x = (x ^ shift(x, 30)) * -4658895280553007687  # 0xbf58476d1ce4e5b9 as a signed 64-bit integer
    x = (x ^ shift(x, 27)) * -7723592293110705685  # 0x94d049bb133111eb
    return x ^ shift(x, 31)


def uniforms(seed: int, keys: Tensor, step: int) -> Tensor:
    """A float64 uniform in [0, 1) per key (N,) for this ``seed`` and ``step``: a pure function of the three."""
    golden = -7046029254386353131  # 0x9e3779b97f4a7c15, splitmix64's increment
    base = (seed * 0x9E3779B97F4A7C15 + step * 0xD1B54A32D192ED03) & MASK64
    base = base - (1 << 64) if base >= 1 << 63 else base
    x = _mix(_mix(keys.to(torch.int64) * golden + base))
    return ((x >> 11) & ((1 << 53) - 1)).to(torch.float64) / float(1 << 53)


class Sampler:
    """The chooser (:data:`nmt.search.common.Chooser`) that draws a token for each row.

    Args:
        settings: temperature, top-k, top-p and seed.
        keys: (B,) the key of every row of the batch as it started (see the module docstring).
    """

    def __init__(self, settings: Sampling, keys: Tensor) -> None:
        self.settings = settings
        self.keys = keys

    def __call__(self, scores: Tensor, rows: Tensor, length: int) -> tuple[Tensor, Tensor]:
        s = self.settings
        tempered = F.log_softmax(scores.double() / s.temperature, dim=-1)  # forbidden tokens stay -inf
        probs = tempered.exp()
        keep = probs > 0
        if s.topk:
            kth = probs.topk(min(s.topk, probs.size(1)), dim=1).values[:, -1:]
            keep &= probs >= kth
        if s.topp < 1.0:
            ordered, order = probs.sort(dim=1, descending=True)
            before = ordered.cumsum(dim=1) - ordered  # mass of the more probable tokens
            keep &= torch.zeros_like(keep).scatter(1, order, before < s.topp)
        cdf = torch.where(keep, probs, torch.zeros_like(probs)).cumsum(dim=1)
        u = uniforms(s.seed, self.keys.to(rows.device)[rows], length).to(cdf.device) * cdf[:, -1]
        tokens = torch.searchsorted(cdf, u[:, None], right=True).squeeze(1).clamp(max=probs.size(1) - 1)
        return scores.gather(1, tokens[:, None]).squeeze(1), tokens
