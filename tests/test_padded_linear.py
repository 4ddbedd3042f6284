"""Linear layers on zero-padded rows (nmt/kernels/linear.py): CPU bf16 training runs its matmuls on a few row counts
(so oneDNN reuses their primitives) and gets the same outputs and gradients as ``F.linear`` under autocast; so does
fp32 on the oneDNN route."""

from __future__ import annotations

import pytest
import torch

from nmt.kernels import linear
from nmt.kernels.linear import MIN_ROW_STEP, padded_rows
from nmt.machine import fp32_gemm
from nmt.perf.roof import record


def test_padded_rows_are_few_sizes_with_little_padding() -> None:
    for rows in range(MIN_ROW_STEP + 1, 20_000, 7):
        padded = padded_rows(rows)
        assert padded >= rows and padded % MIN_ROW_STEP == 0
        assert padded - rows < max(MIN_ROW_STEP, rows / 16 + 1)
    # a beam search's last steps: powers of two from 8
    assert [padded_rows(rows) for rows in (1, 4, 8, 9, 16, 17, 33, 64)] == [8, 8, 8, 16, 16, 32, 64, 64]
    # the rows of 4096-token batches (3,796 to 4,096): three sizes
    assert {padded_rows(rows) for rows in range(3796, 4097)} == {3840, 3968, 4096}


@pytest.mark.parametrize("batch", [3, 4])  # 3 x 37 = 111 rows, padded to 128; 4 x 32 = 128 rows, not padded
@pytest.mark.parametrize("bias", [True, False])
def test_bf16_training_equals_autocast_linear(bias: bool, batch: int) -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(24, 40, bias=bias)
    x = torch.randn(batch, 37 if batch == 3 else 32, 24)
    grads = []
    for fn in (lambda t: linear.call(layer, t), layer):
        layer.zero_grad()
        inp = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = fn(inp)
        assert out.shape == (*x.shape[:2], 40) and out.dtype == torch.bfloat16
        (out.float() * torch.linspace(-1, 1, 40)).sum().backward()
        assert inp.grad is not None and inp.grad.dtype == torch.float32
        grads.append((out.float(), inp.grad, layer.weight.grad.clone(), None if not bias else layer.bias.grad.clone()))
    (out_pad, gx_pad, gw_pad, gb_pad), (out_ref, gx_ref, gw_ref, gb_ref) = grads
    tolerance = {"atol": 2e-2, "rtol": 2e-2}  # bf16 rounding
    torch.testing.assert_close(out_pad, out_ref, **tolerance)
    torch.testing.assert_close(gx_pad, gx_ref, **tolerance)
    torch.testing.assert_close(gw_pad, gw_ref, **tolerance)
    assert gw_pad.dtype == torch.float32
    if bias:
        torch.testing.assert_close(gb_pad, gb_ref, **tolerance)


def test_matmuls_run_on_the_padded_row_count() -> None:
    layer = torch.nn.Linear(16, 32)
    shapes = []
    for rows in (3969, 4000, 4096):
        x = torch.randn(rows, 16, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            matmuls = record(lambda x=x: linear.call(layer, x).float().sum().backward())
        shapes.append(sorted((m.m, m.k, m.n) for m in matmuls))
    assert shapes[0] == shapes[1] == shapes[2] == sorted([(4096, 16, 32), (4096, 32, 16), (32, 4096, 16)])


def test_decoding_pads_without_autograd_and_fp32_on_mkl_stays_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fp32_gemm.ENV, "mkl")
    layer = torch.nn.Linear(8, 4)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            padded = linear.call(layer, x)
            assert [(m.m, m.k, m.n) for m in record(lambda: linear.call(layer, x))] == [(16, 8, 4)]
            torch.testing.assert_close(padded, layer(x), atol=0, rtol=0)  # the rows are independent
        assert torch.equal(linear.call(layer, x), layer(x))  # fp32: F.linear itself
        assert [(m.m, m.k, m.n) for m in record(lambda: linear.linear(x, layer.weight, layer.bias))] == [(10, 8, 4)]
    xg = x.clone().requires_grad_()
    matmuls = record(lambda: linear.call(layer, xg).sum().backward())
    assert sorted((m.m, m.k, m.n) for m in matmuls) == [(4, 10, 8), (10, 4, 8), (10, 8, 4)]  # fp32 training


@pytest.mark.skipif(not fp32_gemm.onednn_available(), reason="this PyTorch has no oneDNN")
def test_fp32_on_the_onednn_route_runs_on_padded_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where nmt/machine/fp32_gemm.py routes fp32 to oneDNN, its products get bf16's few row counts too (oneDNN builds a
    primitive per shape), and each product goes through oneDNN's linear op."""
    monkeypatch.setenv(fp32_gemm.ENV, "onednn")
    layer = torch.nn.Linear(8, 4)
    xg = torch.randn(2, 5, 8, requires_grad=True)
    matmuls = record(lambda: linear.call(layer, xg).sum().backward())
    assert sorted((m.m, m.k, m.n, m.onednn) for m in matmuls) == [(4, 16, 8, True), (16, 4, 8, True),
                                                                 (16, 8, 4, True)]
    with torch.no_grad():
        assert [(m.m, m.k, m.n, m.onednn) for m in record(lambda: linear.call(layer, xg))] == [(16, 8, 4, True)]
