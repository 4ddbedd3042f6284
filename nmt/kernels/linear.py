"""Linear layers whose row count comes in a few sizes, so oneDNN reuses its matmul primitives (CPU bf16/fp16, and
fp32 where :mod:`nmt.machine.fp32_gemm` routes fp32 products to oneDNN), and whose decoding multiplies by weights packed
once (:mod:`nmt.kernels.packed`).

On CPU, PyTorch runs bf16 (and fp16) matmuls through oneDNN, which builds a primitive (a JIT-compiled kernel) for
every new shape, and token-budget batches give every update a new number of rows ``B * T``; so does beam search
whenever finished sentences leave the decoder's rows. Here the rows are padded with zeros to one of a few sizes
(:func:`padded_rows`), the product runs on the padded rows and the result keeps the real ones: the zero rows add
nothing to the weight and bias gradients, and the few shapes recur in oneDNN's primitive cache. fp32 matmuls go to
MKL, which builds nothing per shape, unless :func:`nmt.machine.fp32_gemm.choice` found oneDNN clearly faster for one of
a layer's three products on this CPU (AMD): then that product runs through oneDNN, in fp32, on padded rows too; fp32
decoding follows that choice's decoding route (oneDNN on packed weights, or MKL). GPUs
have their own kernels: there this is ``F.linear``; so are the int8 layers of int8 decoding.
:class:`PaddedLinear` is the ``nn.Linear`` that :func:`nmt.kernels.accelerate` swaps in. The
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
from nmt.machine import fp32_gemm
from nmt.machine.fp32_gemm import Fp32Gemm

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


def _fp32_route(x: Tensor, weight: Tensor, decoding: bool = False) -> Fp32Gemm | None:
    """The fp32 route when this product is a CPU fp32 one and oneDNN runs some product of it here (``decoding``:
    decoding's route, else the training products'); else None."""
    if x.device.type != "cpu" or x.dtype != torch.float32 or weight.dtype != torch.float32:
        return None
    gemm = fp32_gemm.choice()
    onednn = gemm.decode == "onednn" if decoding else gemm.uses_onednn()
    return gemm if onednn else None


# the packs of each owner's weights (a weakly held module: its packs go with it)
_PACKS: weakref.WeakKeyDictionary[object, packed.PackCache] = weakref.WeakKeyDictionary()


def drop_packs(owner: object) -> None:
    """Forget ``owner``'s packs: called when its module changes mode (``train()``/``eval()``), since a fused
    optimizer step (``torch.optim.Adam(fused=True)``, the trainer's) updates weights without bumping their version
    counters, so the packs' keys alone would not see the update (:mod:`nmt.kernels.packed`)."""
    _PACKS.pop(owner, None)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, owner: object | None = None,
           part: object = None) -> Tensor:
    """``F.linear(x, weight, bias)``; under CPU bf16/fp16 autocast, and in CPU fp32 where oneDNN runs it, on
    zero-padded rows (module doc).

    ``owner`` (the module holding ``weight``) and ``part`` (which of its weights, e.g. a row range) name the weight
    for its pack in decoding; without an owner the weight is not packed."""
    # compiled: the row count is a symbolic size, and padding it to a bucket would recompile the graph per batch
    if torch.compiler.is_compiling():
        return F.linear(x, weight, bias)
    decoding = owner is not None and not torch.is_grad_enabled()
    dtype, gemm = _bucketed_dtype(x), None
    if dtype is None:
        gemm = _fp32_route(x, weight, decoding)
        if gemm is None:
            return F.linear(x, weight, bias)
        dtype = torch.float32
    flat = x.reshape(-1, x.size(-1))
    if torch.is_grad_enabled():
        out = typing.cast(Tensor, _PaddedLinear.apply(flat, weight, bias, dtype, gemm))
    elif decoding and packed.available(dtype):  # bf16/fp16 go to oneDNN anyway; fp32 on its decoding route
        cache = _PACKS.get(owner)
        if cache is None:  # once per owner (setdefault would build a cache on every call, every decoding step)
            cache = _PACKS[owner] = packed.PackCache()
        out = cache.get(part, weight, bias, dtype)(_padded(flat, dtype))[: flat.size(0)]
    else:  # decoding: the same product without autograd (autocast casts each weight once per batch)
        forward = fp32_gemm.product("forward", gemm.forward) if gemm is not None else F.linear
        out = forward(_padded(flat, dtype), weight, bias)[: flat.size(0)]
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

    def train(self, mode: bool = True) -> PaddedLinear:
        drop_packs(self)  # the trainer's eval() before each validation: packs of the weights as they are now
        super().train(mode)
        return self


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
    backward keeps is what autocast keeps: the input and the weight in ``dtype``. ``gemm``: the fp32 route of each
    product (None for bf16/fp16, which PyTorch sends to oneDNN itself).
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None, dtype: torch.dtype,
                gemm: Fp32Gemm | None) -> Tensor:
        rows = x.size(0)
        with torch.autocast("cpu", enabled=False):
            xp = _padded(x, dtype)
            w = weight.to(dtype)
            b = None if bias is None else bias.to(dtype)
            if gemm is not None:
                out = fp32_gemm.product("forward", gemm.forward)(xp, w, b)
            else:
                out = xp @ w.t() if b is None else torch.addmm(b, xp, w.t())
        # fp32: keep x itself, which the layer before often keeps anyway (a ReLU its output), not a padded copy
        # of every layer's input (+25% peak memory in training); backward pads it again
        ctx.save_for_backward(x if gemm is not None else xp, w)
        ctx.rows, ctx.gemm = rows, gemm
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        return out[:rows]

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        xp, w = ctx.saved_tensors
        if ctx.gemm is not None:
            xp = _padded(xp, xp.dtype)
        rows = ctx.rows
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        with torch.autocast("cpu", enabled=False):
            gp = _padded(grad, xp.dtype)
            gemm = ctx.gemm  # bf16/fp16: torch.mm, which PyTorch sends to oneDNN
            grad_input = fp32_gemm.product("grad_input", "mkl" if gemm is None else gemm.grad_input)
            grad_weight = fp32_gemm.product("grad_weight", "mkl" if gemm is None else gemm.grad_weight)
            grad_x = grad_input(gp, w)[:rows].to(x_dtype) if ctx.needs_input_grad[0] else None
            grad_w = grad_weight(gp, xp).to(w_dtype) if ctx.needs_input_grad[1] else None
            grad_b = gp[:rows].sum(0).to(b_dtype) if b_dtype is not None and ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b, None, None
