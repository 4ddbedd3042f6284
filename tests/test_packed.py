"""bf16 decoding on weights packed once into oneDNN's layout (nmt/kernels/packed.py, nmt/kernels/linear.py): the
same products as autocast's ``F.linear``, repacked whenever a weight changes, one pack per weight and row range."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from nmt.kernels import linear, packed
from nmt.machine import fp32_gemm
from nmt.perf.roof import record

pytestmark = pytest.mark.skipif(not packed.available(), reason="needs oneDNN and a CPU with native bf16")

BF16 = {"atol": 2e-2, "rtol": 1e-2}  # one bf16 rounding of the result


def _decode(fn):  # type: ignore[no-untyped-def]
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        return fn()


def _autocast_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return _decode(lambda: F.linear(x, weight, bias))


@pytest.mark.parametrize("rows", [1, 5, 64, 100])
def test_packed_product_equals_autocast_linear(rows: int) -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(48, 80)
    x = torch.randn(rows, 48)
    out = _decode(lambda: linear.call(layer, x))
    assert out.dtype == torch.bfloat16 and out.shape == (rows, 80)
    torch.testing.assert_close(out.float(), _autocast_linear(x, layer.weight, layer.bias).float(), **BF16)
    assert layer in linear._PACKS  # the packed path ran, not F.linear


def test_decoding_runs_on_the_pack_with_padded_rows() -> None:
    layer = torch.nn.Linear(8, 4)
    x = torch.randn(2, 5, 8)
    matmuls = _decode(lambda: record(lambda: linear.call(layer, x)))
    assert [(m.m, m.k, m.n, m.dtype) for m in matmuls] == [(16, 8, 4, torch.bfloat16)]


def test_a_changed_weight_is_repacked() -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 24)
    x = torch.randn(7, 16)
    before = _decode(lambda: linear.call(layer, x))
    with torch.no_grad():  # an optimizer step: in place, the same storage
        layer.weight.mul_(-2.0)
        layer.bias.add_(1.0)
    after = _decode(lambda: linear.call(layer, x))
    torch.testing.assert_close(after.float(), _autocast_linear(x, layer.weight, layer.bias).float(), **BF16)
    assert not torch.allclose(after.float(), before.float(), **BF16)
    layer.load_state_dict({"weight": torch.ones(24, 16), "bias": torch.zeros(24)})
    assert torch.equal(_decode(lambda: linear.call(layer, x)), _autocast_linear(x, layer.weight, layer.bias))


def test_row_ranges_of_one_layer_have_their_own_packs(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    built = []
    of = packed.PackedWeight.of
    monkeypatch.setattr(packed.PackedWeight, "of",
                        lambda w, b, dtype=torch.bfloat16: built.append(w.shape) or of(w, b, dtype))
    layer = torch.nn.Linear(16, 48)  # as cross-attention's in_proj: queries, then keys and values
    x = torch.randn(9, 16)
    whole = _decode(lambda: linear.call(layer, x))
    queries = _decode(lambda: linear.call(layer, x, rows=slice(0, 16)))
    keys_values = _decode(lambda: linear.call(layer, x, rows=slice(16, 48)))
    assert queries.shape == (9, 16) and keys_values.shape == (9, 32)
    torch.testing.assert_close(queries.float(), whole[:, :16].float(), **BF16)
    torch.testing.assert_close(keys_values.float(), whole[:, 16:].float(), **BF16)
    torch.testing.assert_close(queries.float(), _autocast_linear(x, layer.weight[:16], layer.bias[:16]).float(),
                               **BF16)
    for _ in range(3):  # every decoder step alternates the parts: each is packed once
        _decode(lambda: (linear.call(layer, x, rows=slice(0, 16)), linear.call(layer, x, rows=slice(16, 48))))
    assert built == [(48, 16), (16, 16), (32, 16)]


def test_training_and_fp32_on_mkl_never_pack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fp32_gemm.ENV, "mkl")  # the oneDNN route packs fp32 weights: tests/test_fp32_gemm.py
    layer = torch.nn.Linear(8, 4)
    x = torch.randn(3, 8)
    with torch.no_grad():
        assert torch.equal(linear.call(layer, x), layer(x))  # fp32 decoding: F.linear itself
    with torch.autocast("cpu", dtype=torch.bfloat16):
        linear.call(layer, x.requires_grad_()).float().sum().backward()  # bf16 training: autograd's path
    assert layer not in linear._PACKS and layer.weight.grad is not None


def test_only_a_linear_layer_is_sliced() -> None:
    with pytest.raises(TypeError, match="rows of a ReLU"):
        linear.call(torch.nn.ReLU(), torch.randn(2, 4), rows=slice(0, 2))


def test_eval_after_a_fused_optimizer_step_repacks() -> None:
    """A fused Adam step bumps no version counter; changing the layer's mode drops its packs (the trainer calls
    ``eval()`` before every validation)."""
    layer = torch.nn.Linear(16, 8)
    layer.__class__ = linear.PaddedLinear
    x = torch.randn(4, 16)
    optim = torch.optim.Adam(layer.parameters(), lr=0.5, fused=True)
    layer.eval()
    before = _decode(lambda: layer(x))
    layer.train()
    layer(x).square().sum().backward()
    optim.step()
    layer.eval()
    after = _decode(lambda: layer(x))
    torch.testing.assert_close(after.float(), _autocast_linear(x, layer.weight, layer.bias).float(), **BF16)
    assert not torch.allclose(after.float(), before.float(), **BF16)
