"""Normalization layers for the residual stream: LayerNorm, RMSNorm and ScaleNorm.

Every class takes the normalized size as its only required argument, so :data:`NORMS` maps a config name to a
constructor ``(d_model) -> nn.Module``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class LayerNorm(nn.Module):
    """Layer normalization (Ba et al. 2016, arXiv 1607.06450).

    ``y = gain * (x - mean(x)) / sqrt(var(x) + eps) + bias`` over the last dimension, gain 1 and bias 0 at init.

    Args:
        d_model: size of the normalized (last) dimension.
        eps: added to the variance for numerical safety.
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.d_model = d_model
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, (self.d_model,), self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """Root-mean-square normalization (Zhang & Sennrich 2019, arXiv 1910.07467).

    ``y = gain * x / sqrt(mean(x^2) + eps)`` over the last dimension: no centering and no bias, gain 1 at init.
    Also used per attention head on queries and keys by ``qk_rmsnorm`` scoring.

    Args:
        d_model: size of the normalized (last) dimension.
        eps: added to the mean square for numerical safety.
    """

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.d_model = d_model
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        if hasattr(F, "rms_norm"):  # fused kernel (torch >= 2.4)
            # a float32 gain on bf16 input (autocast) would miss the fused kernel
            return F.rms_norm(x, (self.d_model,), self.weight.to(x.dtype), self.eps)
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class ScaleNorm(nn.Module):
    """ScaleNorm (Nguyen & Salazar 2019, "Transformers without Tears", arXiv 1910.05895).

    ``y = g * x / max(||x||_2, eps)`` with a single learnable scalar ``g`` per norm site, initialized to
    ``sqrt(d_model)`` so that the output has the same scale as a unit-variance vector.

    Args:
        d_model: size of the normalized (last) dimension; sets the initial ``g``.
        eps: lower bound on the norm, so an all-zero vector maps to zero instead of NaN.
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.tensor(math.sqrt(d_model)))

    def forward(self, x: Tensor) -> Tensor:
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(self.eps)
        return x * (self.scale / norm)


NORMS: dict[str, Callable[[int], nn.Module]] = {
    "layernorm": LayerNorm,
    "scalenorm": ScaleNorm,
    "rmsnorm": RMSNorm,
}
