"""Attention's CPU speed paths: hand-written backward passes for QKNorm's normalization and the head split, and the
explicit (matmul) path for CPU training.

:class:`FastQKNorm` and :class:`FastAttention` are what :func:`nmt.kernels.accelerate` makes of
:class:`~nmt.modules.attention.QKNorm` and :class:`~nmt.modules.attention.MultiHeadAttention`: the same parameters
and the same results (tests/test_kernels.py), fewer passes over memory. Why each exists, with its measurements:
``docs/performance.md``, "The speed wing".
"""

from __future__ import annotations

import typing

import torch
from torch import Tensor

from nmt.kernels import linear
from nmt.kernels.dropout import dropout
from nmt.modules.attention import MultiHeadAttention, QKNorm, heads, pad_keys, pads_keys


class _UnitNorm(torch.autograd.Function):
    """``scale * x / max(||x||_2, eps)`` over the last dimension, in ``x``'s dtype, with a hand-written backward
    (4 elementwise passes instead of autograd's ~10 through ``F.normalize``)."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: Tensor, scale: Tensor | None) -> Tensor:
        with torch.autocast(x.device.type, enabled=False):  # norms accumulate in float32, outputs keep x's dtype
            x = x.contiguous()  # heads are a permuted view of the projection: copied first, each pass is faster
            inv = _inverse_norm(x)
            ctx.save_for_backward(x, inv, scale)  # type: ignore[arg-type]
            # the scale folded into the per-row factor: one pass over x, and one rounding
            return x * (inv if scale is None else inv * scale.to(inv.dtype)).to(x.dtype)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: Tensor) -> tuple[Tensor, Tensor | None]:
        x, inv, scale = ctx.saved_tensors  # type: ignore[attr-defined]
        with torch.autocast(grad.device.type, enabled=False):
            # the keys' gradient arrives as a transposed view (the score matmul's backward): elementwise passes on
            # such a view are slower than the copy that makes it contiguous
            grad = grad.contiguous()
            dot = torch.linalg.vecdot(grad, x, dim=-1).unsqueeze(-1).to(inv.dtype) * inv  # grad . unit, (..., 1)
            factor = inv if scale is None else inv * scale.to(inv.dtype)
            # (grad - unit * dot) * factor with unit = x * inv, as grad * factor + x * (-dot * factor * inv): two
            # passes, every per-row factor computed in float32
            grad_x = torch.addcmul(grad * factor.to(x.dtype), x, (dot * factor * inv).neg_().to(x.dtype))
            grad_scale = None if scale is None else dot.sum().to(scale.dtype)
        return grad_x, grad_scale


def _inverse_norm(x: Tensor) -> Tensor:
    """``1 / max(||x||_2, 1e-12)`` over the last dimension, (..., 1), accumulated in at least float32 (out of place:
    under ``torch.compile`` autograd differentiates it)."""
    acc = torch.promote_types(x.dtype, torch.float32)
    return torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=acc).clamp_min(1e-12).reciprocal()


def unit_norm(x: Tensor, scale: Tensor | None = None) -> Tensor:
    """:func:`nmt.modules.attention.unit_norm` in fewer passes: the autograd Function while training, three
    kernels without autograd (decoding); compiled, plain operations the compiler differentiates and fuses."""
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():
        return typing.cast(Tensor, _UnitNorm.apply(x, scale))
    x = x.contiguous()
    factor = _inverse_norm(x)
    if scale is not None:
        factor = factor * scale.to(factor.dtype)
    return x * factor.to(x.dtype)


class _SplitHeads(torch.autograd.Function):
    """:func:`nmt.modules.attention.heads` whose backward writes the parts' gradients into one tensor in one pass
    (``unbind``'s backward stacks them and the permute back copies them again)."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: Tensor) -> tuple[Tensor, ...]:
        ctx.shape, ctx.dtype = x.shape, x.dtype  # type: ignore[attr-defined]
        return heads(x)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, *grads: Tensor) -> Tensor:
        # an unused part's gradient arrives as zeros (autograd materializes it), so every part is a tensor
        out = grads[0].new_empty(ctx.shape, dtype=ctx.dtype)  # type: ignore[attr-defined]
        for part, grad in zip(heads(out), grads, strict=True):
            part.copy_(grad)
        return out


def split_heads(x: Tensor) -> tuple[Tensor, ...]:
    """(B, T, P, H, D/H) -> P views (B, H, T, D/H), through :class:`_SplitHeads` when autograd records."""
    if torch.is_grad_enabled() and x.requires_grad and not torch.compiler.is_compiling():
        return typing.cast(tuple[Tensor, ...], _SplitHeads.apply(x))
    return heads(x)


class FastQKNorm(QKNorm):
    """:class:`~nmt.modules.attention.QKNorm` through :func:`unit_norm`."""

    def queries(self, q: Tensor) -> Tensor:
        return unit_norm(q, self.gain)

    def keys(self, k: Tensor) -> Tensor:
        return unit_norm(k)


class FastAttention(MultiHeadAttention):
    """:class:`~nmt.modules.attention.MultiHeadAttention` with the projections through :mod:`nmt.kernels.linear`
    (row slices included), the one-pass head split, and on CPU while training the explicit path instead of the
    fused kernel (whose backward is slower there for sentence-length sequences)."""

    def project_rows(self, x: Tensor, rows: slice) -> Tensor:
        return linear.call(self.in_proj, x, rows=rows)

    def project_self(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        B, T, _ = x.shape
        q, k, v = split_heads(linear.call(self.in_proj, x).view(B, T, 3, self.n_heads, self.d_head))
        return self.scoring.queries(q), self.scoring.keys(k), v

    def project_memory(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        B, S, _ = memory.shape
        kv = self.project_rows(memory, slice(self.d_model, 3 * self.d_model))
        k, v = split_heads(kv.view(B, S, 2, self.n_heads, self.d_head))
        return self.scoring.keys(k), v

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        if q.device.type == "cpu" and torch.is_grad_enabled():
            return self.attend_with_weights(q, k, v, mask, is_causal)[0]
        if pads_keys(q) and not is_causal:  # decoding's encoder: the same sums in any batch
            mask, (k, v) = pad_keys(mask, q.size(0), k, v)
        return super().attend(q, k, v, mask, is_causal)

    def softmax(self, logits: Tensor, mask: Tensor | None) -> Tensor:
        if mask is None:
            return logits.softmax(-1)
        weights = logits.masked_fill(~mask, float("-inf")).softmax(-1)
        # the NaN pass only where a row is fully masked (a training batch never has one); a compiled graph cannot
        # branch on data, and fuses the pass into the softmax
        if torch.compiler.is_compiling() or not bool(mask.any(-1).all()):
            weights = weights.nan_to_num(0.0)
        return weights

    def attend_with_weights(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, is_causal: bool = False
    ) -> tuple[Tensor, Tensor]:
        weights = self.weights(q, k, mask, is_causal)
        dropped = dropout(weights, self.dropout, self.training)
        return self.merge(torch.matmul(dropped.to(v.dtype), v)), weights
