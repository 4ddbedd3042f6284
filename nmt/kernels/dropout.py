"""Dropout whose mask comes from 16 random bits per element on CPU and is kept as one byte per element.

``F.dropout`` on CPU draws its mask with ``bernoulli_``, several times slower than ``torch.rand`` of the same size,
and ``torch.rand`` draws one 32-bit number per element. Here one full-range 64-bit draw gives four 16-bit integers,
each compared with a threshold. Each element is kept with probability ``1 - p`` (``p`` rounded to a multiple of
1/65536, an error below 8e-6) and scaled by ``1 / (1 - p)``. What backward keeps is the boolean mask (as
``F.dropout`` does), not a float copy of it. On other devices this is ``F.dropout``. Figures: ``docs/performance.md``,
"The speed wing".
"""

from __future__ import annotations

import math
import typing
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor


class _KeepScale(torch.autograd.Function):
    """``x * keep / (1 - p)`` for a boolean ``keep``; saves only ``keep`` for backward."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, keep: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x.mul(_as(keep, x.dtype)).mul_(scale)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        return grad.mul(_as(keep, grad.dtype)).mul_(ctx.scale), None, None


def _as(keep: Tensor, dtype: torch.dtype) -> Tensor:
    """The boolean mask as 0/1 in ``dtype``, converted from its bytes as uint8 (vectorized; a bool tensor is
    converted element by element), so the product runs in one dtype."""
    return keep.view(torch.uint8).to(dtype)


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> Tensor:
    """A boolean mask of ``shape``, each element True with probability ``1 - round(p * 2**16) / 2**16`` (at least
    ``2**-16``: the threshold must stay an int16)."""
    n = math.prod(shape)
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(2**63), None)  # all 64 bits
    threshold = min(round(p * 65536), 65535) - 32768  # int16 values are uniform on [-32768, 32767]
    return (words.view(torch.int16)[:n] >= threshold).view(shape)


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout (Srivastava et al. 2014): zero each element with probability ``p`` while training."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or torch.compiler.is_compiling():  # compiled: the compiler's own fused dropout
        return F.dropout(x, p, True)
    return typing.cast(Tensor, _KeepScale.apply(x, keep_mask(x.shape, p, x.device), 1.0 / (1.0 - p)))
