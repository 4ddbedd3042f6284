"""Linear layers whose row count comes in a few sizes, so oneDNN reuses its matmul primitives (CPU bf16/fp16).

On CPU, PyTorch runs bf16 (and fp16) matmuls through oneDNN, which builds a primitive (a JIT-compiled kernel) for
every new shape: about 3.5 ms for a (4000, 256) x (256, 1024) product that then runs in 0.7 ms (torch 2.13, AMX).
Token-budget batches give every update a new number of rows ``B * T`` (3,796 to 4,096 for 4096-token batches), so
each Linear layer's forward and both backward products built new primitives every update: the matmuls of a bf16
training step ran at half the speed of the same matmuls replayed with warm primitives. Beam search meets a new row
count at every batch's encoder and whenever finished sentences leave the decoder's rows (7% of bf16 decoding).
Here the rows are padded with zeros to a multiple of 1/32 to 1/16 of their count (:func:`padded_rows`: 4,096 rows
for 3,969 to 4,096), the product runs on the padded rows and the result keeps the real ones: the zero rows add
nothing to the weight and bias gradients, and a handful of shapes recur, which oneDNN's primitive cache keeps. fp32
matmuls (MKL) build nothing per shape, and GPUs have their own kernels: there this is ``F.linear``; so are the int8
layers of int8 decoding (padding them was 3% slower). Decoding in bf16 (no autograd) multiplies by weights packed once
into oneDNN's layout (:mod:`nmt.modules.packed`) when the caller names the weight's owner, as :func:`call` does.
"""

from __future__ import annotations

import typing
import weakref
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.modules import packed

MIN_ROW_STEP = 64  # rows are padded to a multiple of at least this (above it)
MIN_SMALL_ROWS = 8  # fewer rows are padded to a power of two, at least this


def padded_rows(rows: int) -> int:
    """``rows`` rounded up to a multiple of the power of two between 1/32 and 1/16 of it (at least
    :data:`MIN_ROW_STEP`): at most ~6% padding, and a few sizes per octave; below :data:`MIN_ROW_STEP` rows, the
    next power of two (at least :data:`MIN_SMALL_ROWS`).

    The small sizes are the last steps of a beam search, when a few sentences are left: padding their 4-16 rows to
    64 made the output projection 2.5x slower than on 16 rows (bf16, packed, (3900, 256) weight)."""
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
