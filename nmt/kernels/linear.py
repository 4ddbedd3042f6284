"""Linear layers whose row count comes in a few sizes, so oneDNN reuses its matmul primitives (CPU bf16/fp16),
and whose bf16 decoding multiplies by weights packed once (:mod:`nmt.kernels.packed`).

On CPU, PyTorch runs bf16 (and fp16) matmuls through oneDNN, which builds a primitive (a JIT-compiled kernel) for
every new shape, and token-budget batches give every update a new number of rows ``B * T``; so does beam search
whenever finished sentences leave the decoder's rows. Here the rows are padded with zeros to one of a few sizes
(:func:`padded_rows`), the product runs on the padded rows and the result keeps the real ones: the zero rows add
nothing to the weight and bias gradients, and the few shapes recur in oneDNN's primitive cache. fp32 matmuls (MKL)
build nothing per shape, and GPUs have their own kernels: there this is ``F.linear``; so are the int8 layers of int8
decoding. :class:`PaddedLinear` is the ``nn.Linear`` that :func:`nmt.kernels.accelerate` swaps in. The
measurements behind each choice: ``docs/performance.md``, "The speed wing".
"""

from __future__ import annotations

import typing
import weakref
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.kernels import packed

MIN_ROW_STEP = 64  # rows are padded to a multiple of at least this (above it)
MIN_SMALL_ROWS = 8  # fewer rows are padded to a power of two, at least this


def padded_rows(rows: int) -> int:
    """``rows`` rounded up to a multiple of the power of two between 1/32 and 1/16 of it (at least
    :data:`MIN_ROW_STEP`): at most ~6% padding, and a few sizes per octave; below :data:`MIN_ROW_STEP` rows, the
    next power of two (at least :data:`MIN_SMALL_ROWS`).

    The small sizes are the last steps of a beam search, when a few sentences are left."""
    if rows <= MIN_ROW_STEP:
        return max(MIN_SMALL_ROWS, 1 << (rows - 1).bit_length()) if rows > 0 else MIN_SMALL_ROWS
    step = max(MIN_ROW_STEP, 1 << max(rows.bit_length() - 5, 0))
    return -(-rows // step) * step


def _bucketed_dtype(x: Tensor) -> torch.dtype | None:
    """The autocast dtype when this product would go to oneDNN: on CPU under bf16 or fp16 autocast; else None."""
    if x.device.type != "cpu" or not torch.is_autocast_enabled("cpu"):
        return None
    dtype = torch.get_autocast_dtype("cpu")
    return dtype if dtype in (torch.bfloat16, torch.float16) else None


# the packs of each owner's weights (a weakly held module: its packs go with it)
_PACKS: weakref.WeakKeyDictionary[object, packed.PackCache] = weakref.WeakKeyDictionary()


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, owner: object | None = None,
           part: object = None) -> Tensor:
    """``F.linear(x, weight, bias)``; under CPU bf16/fp16 autocast, on zero-padded rows (module doc).

    ``owner`` (the module holding ``weight``) and ``part`` (which of its weights, e.g. a row range) name the weight
    for its pack in bf16 decoding; without an owner the weight is not packed."""
    # compiled: the row count is a symbolic size, and padding it to a bucket would recompile the graph per batch
    dtype = None if torch.compiler.is_compiling() else _bucketed_dtype(x)
    if dtype is None:
        return F.linear(x, weight, bias)
    flat = x.reshape(-1, x.size(-1))
    if torch.is_grad_enabled():
        out = typing.cast(Tensor, _PaddedLinear.apply(flat, weight, bias, dtype))
    elif owner is not None and dtype == torch.bfloat16 and packed.available():  # decoding with a packed weight
        cache = _PACKS.get(owner)
        if cache is None:  # once per owner (setdefault would build a cache on every call, every decoding step)
            cache = _PACKS[owner] = packed.PackCache()
        out = cache.get(part, weight, bias)(_padded(flat, dtype))[: flat.size(0)]
    else:  # decoding: the same product without autograd (autocast casts each weight once per batch)
        out = F.linear(_padded(flat, dtype), weight, bias)[: flat.size(0)]
    return out.view(*x.shape[:-1], weight.size(0))


def call(layer: nn.Module, x: Tensor, rows: slice | None = None) -> Tensor:
    """``layer(x)`` for an ``nn.Linear`` through :func:`linear`; any other module (the int8 layers that replace
    ``nn.Linear`` for int8 decoding) is called as it is.

    ``rows``: only these output rows of the layer's weight and bias (cross-attention's queries, keys/values);
    ``nn.Linear`` only."""
    if isinstance(layer, nn.Linear):  # nn.Linear.forward is F.linear, which linear() falls back to
        if rows is None:
            return linear(x, layer.weight, layer.bias, owner=layer)
        bias = None if layer.bias is None else layer.bias[rows]
        return linear(x, layer.weight[rows], bias, owner=layer, part=(rows.start, rows.stop))
    if rows is not None:
        raise TypeError(f"rows of a {type(layer).__name__}: only an nn.Linear's weight can be sliced")
    return typing.cast(Tensor, layer(x))


class PaddedLinear(nn.Linear):
    """``nn.Linear`` through :func:`linear` (the same parameters; its own packs in bf16 decoding)."""

    def forward(self, input: Tensor) -> Tensor:
        return linear(input, self.weight, self.bias, owner=self)


def _padded(x: Tensor, dtype: torch.dtype) -> Tensor:
    """``x`` (rows, width) cast to ``dtype`` into a buffer of :func:`padded_rows` rows, the extra ones zero."""
    rows, width = x.shape
    padded = padded_rows(rows)
    if padded == rows:  # already a bucket size (a full beam-search batch): no buffer, and no copy in dtype
        return x.to(dtype)
    buffer = x.new_empty((padded, width), dtype=dtype)
    buffer[:rows].copy_(x)
    buffer[rows:].zero_()
    return buffer


class _PaddedLinear(torch.autograd.Function):
    """``x @ w^T + b`` in ``dtype`` on the rows of ``x`` padded to :func:`padded_rows`; returns the real rows.

    The cast to ``dtype`` writes straight into the padded buffer (autocast would cast in a pass of its own), and what
    backward keeps is what autocast keeps: the input and the weight in ``dtype``.
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None, dtype: torch.dtype) -> Tensor:
        rows = x.size(0)
        with torch.autocast("cpu", enabled=False):
            xp = _padded(x, dtype)
            w = weight.to(dtype)
            out = xp @ w.t() if bias is None else torch.addmm(bias.to(dtype), xp, w.t())
        ctx.save_for_backward(xp, w)
        ctx.rows, ctx.dtypes = rows, (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        return out[:rows]

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        xp, w = ctx.saved_tensors
        rows = ctx.rows
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        with torch.autocast("cpu", enabled=False):
            gp = _padded(grad, xp.dtype)
            grad_x = (gp @ w)[:rows].to(x_dtype) if ctx.needs_input_grad[0] else None
            grad_w = (gp.t() @ xp).to(w_dtype) if ctx.needs_input_grad[1] else None
            grad_b = gp[:rows].sum(0).to(b_dtype) if b_dtype is not None and ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b, None
