"""An int8 Linear layer whose activations are quantized row by row, so a row's output never depends on its batch.

torch's dynamically quantized Linear (``torch.ao.nn.quantized.dynamic.Linear``) quantizes its input with one scale
and zero point for the whole tensor, from the tensor's minimum and maximum: a sentence's products then depend on the
other sentences of its batch (and on its beam's other rows), so ``nmt translate --precision int8`` translated a line
differently alone, in another batch, or under a service's load. CTranslate2 quantizes activations per row
(symmetric, the row's largest magnitude to 127), which keeps every row to itself and each row's full range.

:class:`RowInt8Linear` does the same on torch's quantized kernels, which take one scale and zero point per input
tensor: each row is divided by its largest magnitude, so every row lies in [-1, 1], and the kernel quantizes it with
a fixed scale and zero point; the product of a row is multiplied back by its magnitude and the bias added in float.
fbgemm (torch's ``x86`` engine) takes the fixed scale and zero point as arguments; oneDNN's kernel computes them from
the tensor's range, which one *sentinel* row appended to the batch pins to the same interval whatever the batch holds.
Inputs known to be non-negative (after a ReLU) use the unsigned interval [0, 1], all levels on the side they occupy.
Weights are quantized as torch's ``per_channel_dynamic_qconfig`` does (int8, one symmetric scale per output row).
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

TINY = 1e-30  # a row of zeros (padding) is divided by this instead of 0
# (scale, zero point) of the scaled rows on torch's 7-bit activation levels 0..127 (its range reduction on x86, which
# keeps fbgemm's 16-bit pair sums from saturating): signed [-64/63, 1] covers [-1, 1], unsigned [0, 1]
SIGNED = (1.0 / 63.0, 64)
UNSIGNED = (1.0 / 127.0, 0)


def _packed(weight: Tensor) -> Tensor:
    """``weight`` (out, in) quantized to int8 with one symmetric scale per output row (torch's dynamic per-channel
    qconfig) and packed for the current quantized engine, without a bias."""
    observer = torch.ao.quantization.per_channel_dynamic_qconfig.weight()
    observer(weight)
    scales, zero_points = observer.calculate_qparams()
    with warnings.catch_warnings():  # quantized tensors announce their move to torchao; torch's kernels take them
        warnings.simplefilter("ignore")
        qweight = torch.quantize_per_channel(weight, scales.double(), zero_points.long(), 0, torch.qint8)
        return torch.ops.quantized.linear_prepack(qweight, None)


def _has_fixed_scale_kernel(packed: Tensor, in_features: int) -> bool:
    """Whether this engine's packed weights take a given input scale and zero point (fbgemm: yes; oneDNN: no)."""
    try:
        torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(torch.zeros(1, in_features), *SIGNED, packed)
    except RuntimeError:
        return False
    return True


class RowInt8Linear(nn.Module):
    """``x W^T + b`` with ``W`` in int8 (per output row) and ``x`` quantized per row (module doc).

    Args:
        weight: the float weight (out, in).
        bias: the float bias (out,) or None.
        nonnegative: the inputs are never negative (the layer after a ReLU).
    """

    bias: Tensor | None
    sentinel: Tensor

    def __init__(self, weight: Tensor, bias: Tensor | None, nonnegative: bool = False) -> None:
        super().__init__()
        self.in_features, self.out_features = weight.size(1), weight.size(0)
        self.nonnegative = nonnegative
        self.scale, self.zero_point = UNSIGNED if nonnegative else SIGNED
        self._packed_weight = _packed(weight.detach().float())
        self._fixed_scale = _has_fixed_scale_kernel(self._packed_weight, self.in_features)
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())
        # the sentinel row's values span the interval whose range gives (scale, zero point): its lowest and highest
        sentinel = torch.zeros(self.in_features)
        ends = torch.tensor([-self.zero_point * self.scale, (127 - self.zero_point) * self.scale])
        sentinel[: 2] = ends[: self.in_features]
        self.register_buffer("sentinel", sentinel)

    def weight(self) -> Tensor:
        """The int8 weight, dequantized (out, in)."""
        qweight, _ = torch.ops.quantized.linear_unpack(self._packed_weight)
        return qweight.dequantize()

    def forward(self, x: Tensor) -> Tensor:
        rows = x.reshape(-1, self.in_features)
        magnitude = (rows if self.nonnegative else rows.abs()).amax(dim=1, keepdim=True).clamp_min_(TINY)
        scaled = rows / magnitude
        if self._fixed_scale:
            products = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
                scaled, self.scale, self.zero_point, self._packed_weight)
        else:
            pinned = torch.cat([scaled, self.sentinel[None]])
            products = torch.ops.quantized.linear_dynamic(pinned, self._packed_weight, True)[: rows.size(0)]
        out = products.mul_(magnitude) if self.bias is None else torch.addcmul(self.bias, products, magnitude)
        return out.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, nonnegative={self.nonnegative}"
