"""The speed wing: the CPU and decoding machinery that :mod:`nmt.modules` leaves out, applied by one call.

:func:`accelerate` swaps each plain module of a built model for its subclass here (same parameters, buffers and
state-dict keys; the same results within rounding, tests/test_kernels.py):

- ``nn.Linear`` -> :class:`~nmt.kernels.linear.PaddedLinear`: bucketed row counts under CPU bf16/fp16 autocast,
  weights packed once for bf16 decoding;
- ``MultiHeadAttention`` -> :class:`~nmt.kernels.attention.FastAttention`: the one-pass head split, the explicit
  path for CPU training, the CPU dropout on attention weights;
- ``QKNorm`` -> :class:`~nmt.kernels.attention.FastQKNorm`: normalization with a hand-written backward;
- ``Residual``, ``FeedForward`` -> :mod:`nmt.kernels.layers`: the CPU dropout;
- ``TiedEmbedding`` -> :class:`~nmt.kernels.embedding.FastTiedEmbedding`: decoding caches, the CPU dropout.

Only the exact classes are swapped, so a user's own subclass keeps its own code. Every swapped path checks the
device, autocast and ``torch.compile`` at call time, so an accelerated model may move between devices. Incremental
decoding (:mod:`nmt.model.incremental`) works on plain and accelerated models alike; int8 decoding is
:mod:`nmt.inference.int8`.
"""

from __future__ import annotations

from typing import TypeVar

from torch import nn

from nmt.kernels.attention import FastAttention, FastQKNorm
from nmt.kernels.embedding import FastTiedEmbedding
from nmt.kernels.layers import FastFeedForward, FastResidual
from nmt.kernels.linear import PaddedLinear
from nmt.modules.attention import MultiHeadAttention, QKNorm
from nmt.modules.embeddings import TiedEmbedding
from nmt.modules.feedforward import FeedForward
from nmt.modules.layers import Residual

ACCELERATED: dict[type[nn.Module], type[nn.Module]] = {
    nn.Linear: PaddedLinear,
    MultiHeadAttention: FastAttention,
    QKNorm: FastQKNorm,
    Residual: FastResidual,
    FeedForward: FastFeedForward,
    TiedEmbedding: FastTiedEmbedding,
}
PLAIN: dict[type[nn.Module], type[nn.Module]] = {fast: plain for plain, fast in ACCELERATED.items()}

M = TypeVar("M", bound=nn.Module)


def _swap(model: M, classes: dict[type[nn.Module], type[nn.Module]]) -> M:
    for module in model.modules():
        target = classes.get(type(module))
        if target is not None:
            module.__class__ = target
            adopt = getattr(module, "adopt", None)
            if adopt is not None:
                adopt()
    return model


def accelerate(model: M) -> M:
    """``model`` with its plain modules swapped in place for the speed wing's (module doc); returns it."""
    return _swap(model, ACCELERATED)


def plain(model: M) -> M:
    """:func:`accelerate`'s inverse, in place: every module of the wing back to its plain class; returns it."""
    return _swap(model, PLAIN)


def is_accelerated(model: nn.Module) -> bool:
    """Whether some module of ``model`` is one of the wing's."""
    return any(type(module) in PLAIN for module in model.modules())
