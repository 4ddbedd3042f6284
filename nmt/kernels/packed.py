"""Weights packed once into oneDNN's layout for CPU decoding in bf16, and in fp32 where oneDNN runs fp32 matmuls.

Under bf16 autocast a CPU ``F.linear`` goes to oneDNN, which reorders the weight into its blocked layout inside
every call (so does ``_linear_pointwise`` on a dense fp32 weight, the route :mod:`nmt.machine.fp32_gemm` may choose).
Decoding calls each Linear layer once per beam-search step with the same weight, so that reorder is
much of a small product's time; ``torch.ops.mkldnn._linear_pointwise`` on a weight packed once by
``_reorder_linear_weight`` skips it (PyTorch's inductor packs frozen CPU graphs' weights the same way). Figures:
``docs/performance.md``, "The speed wing".

A pack belongs to one weight as it is: :class:`PackCache` keys it by the weight's version counter (in-place updates
bump it, ``load_state_dict`` among them), address, shape and strides, and a layer keeps one pack per row range
(cross-attention slices its input projection into queries and keys/values). A fused optimizer step
(``Adam(fused=True)``, the trainer's) does not bump version counters, so the layers also drop their packs whenever
their mode changes (:func:`nmt.kernels.linear.drop_packs`): validation during training, which always starts with
``model.eval()``, decodes with the weights of that step (before this, it kept the packs of the first validation).
bf16 packing is used only where bf16 is native (:func:`nmt.machine.hardware.bf16_support`): where oneDNN emulates bf16
this path would not be taken anyway, and its reorder may not exist there.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.machine import fp32_gemm, hardware


@functools.cache
def available(dtype: torch.dtype = torch.bfloat16) -> bool:
    """Whether this PyTorch has oneDNN's packed linear ops, and for bf16 whether the CPU runs it natively (probed
    once)."""
    ops = getattr(torch.ops, "mkldnn", None)
    has_ops = (torch.backends.mkldnn.is_available() and hasattr(ops, "_reorder_linear_weight")
               and hasattr(ops, "_linear_pointwise"))
    if dtype == torch.float32:
        return bool(has_ops)
    # oneDNN's own check first: its bf16 reorder does not exist on a CPU it has no bf16 kernels for (AVX2 only),
    # whatever a probe (or a test faking a CPU class) says
    return (bool(has_ops) and dtype == torch.bfloat16 and hardware.onednn_bf16() is not False
            and hardware.bf16_support().native)


@dataclass(frozen=True)
class PackedWeight:
    """A bf16 or fp32 weight (out, in) in oneDNN's blocked layout and its bias in the same dtype."""

    weight: Tensor
    bias: Tensor | None

    @classmethod
    def of(cls, weight: Tensor, bias: Tensor | None, dtype: torch.dtype = torch.bfloat16) -> PackedWeight:
        with torch.no_grad():
            packed = fp32_gemm.onednn_pack(weight.detach().to(dtype))
            return cls(packed, None if bias is None else bias.detach().to(dtype))

    def __call__(self, x: Tensor) -> Tensor:
        """``x @ weight^T + bias`` for ``x`` (rows, in) in the pack's dtype: ``F.linear``'s values in it."""
        return fp32_gemm.onednn_linear(x, self.weight, self.bias)


def _key(t: Tensor | None) -> tuple[object, ...]:
    if t is None:
        return ()
    return (t._version, t.data_ptr(), t.dtype, tuple(t.shape), t.stride())


class PackCache:
    """Packs of one owner's weights, one per name, each rebuilt when its weight or bias changes."""

    def __init__(self) -> None:
        self._packs: dict[object, tuple[tuple[object, ...], PackedWeight]] = {}

    def get(self, name: object, weight: Tensor, bias: Tensor | None,
            dtype: torch.dtype = torch.bfloat16) -> PackedWeight:
        """The pack in ``dtype`` of ``weight``/``bias`` stored under ``name``, built now if they changed since."""
        key = (*_key(weight), *_key(bias), dtype)
        hit = self._packs.get(name)
        if hit is None or hit[0] != key:
            hit = (key, PackedWeight.of(weight, bias, dtype))
            self._packs[name] = hit
        return hit[1]
