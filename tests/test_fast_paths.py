"""Hand-written fast paths equal what they replace: QKNorm's unit norm (forward and gradients), CPU dropout and the
label-smoothed loss's gradient; the bounded oneDNN primitive cache of CPU bf16 runs keeps memory down."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import nmt.training.loss
from nmt.kernels.attention import split_heads, unit_norm
from nmt.kernels.dropout import dropout, keep_mask
from nmt.training.loss import label_smoothed_nll
from nmt.vocab import PAD


def test_unit_norm_matches_normalize_and_gradcheck() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 2, 5, 8, dtype=torch.float64, requires_grad=True)
    g = torch.tensor(2.5, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(unit_norm(x, g), F.normalize(x, dim=-1) * g)
    torch.testing.assert_close(unit_norm(x), F.normalize(x, dim=-1))
    assert torch.autograd.gradcheck(unit_norm, (x, g))
    assert torch.autograd.gradcheck(lambda t: unit_norm(t), (x,))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_unit_norm_without_autograd_equals_the_autograd_path(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    qkv = torch.randn(6, 1, 3, 4, 8).to(dtype)
    qkv[0] = 0.0  # zero vectors stay zero
    heads = qkv.permute(2, 0, 3, 1, 4)[0]  # a permuted view, as the projections give them
    g = torch.tensor(2.5)
    with torch.no_grad():
        fast, fast_plain = unit_norm(heads, g), unit_norm(heads)
    assert fast.dtype == dtype
    torch.testing.assert_close(fast, unit_norm(heads, g).detach())
    torch.testing.assert_close(fast_plain, unit_norm(heads).detach())
    assert torch.equal(fast[0], torch.zeros_like(fast[0]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unit_norm_gradients_match_float64_normalize(dtype: torch.dtype) -> None:
    """Permuted heads in, a transposed gradient back (as the score matmul gives the keys'): both gradients within
    the dtype's rounding of autograd through F.normalize in float64."""
    torch.manual_seed(0)
    qkv = torch.randn(5, 7, 3, 2, 16, dtype=torch.float64)
    upstream = torch.randn(5, 2, 16, 7, dtype=torch.float64).transpose(-1, -2)  # (B, H, T, D/H), not contiguous
    grads = []
    for work in (dtype, torch.float64):
        x = qkv.to(work).requires_grad_()
        g = torch.tensor(3.5, requires_grad=True)
        heads = x.permute(2, 0, 3, 1, 4)[0]
        out = unit_norm(heads, g) if work == dtype else F.normalize(heads, dim=-1) * g
        out.backward(upstream.to(work))
        assert x.grad is not None and g.grad is not None
        grads.append((x.grad.double(), g.grad.double()))
    rounding = 2.0**-8 if dtype == torch.bfloat16 else 2.0**-23
    torch.testing.assert_close(grads[0][0], grads[1][0], atol=8 * rounding, rtol=8 * rounding)
    # the gain's gradient sums grad . unit over every row, with cancellation: bounded by the rounding of its terms
    terms = (upstream * F.normalize(qkv.permute(2, 0, 3, 1, 4)[0], dim=-1)).abs().sum()
    assert abs(grads[0][1] - grads[1][1]) <= 4 * rounding * terms, (grads[0][1], grads[1][1], terms)


@pytest.mark.parametrize("parts", [2, 3])
def test_split_heads_gradient_equals_unbind(parts: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 5, parts, 3, 4, dtype=torch.float64)
    upstream = [torch.randn(2, 3, 5, 4, dtype=torch.float64) for _ in range(parts)]
    grads = []
    for split in (split_heads, lambda t: t.permute(2, 0, 3, 1, 4).unbind(0)):
        leaf = x.clone().requires_grad_()
        outs = split(leaf)
        assert [o.shape for o in outs] == [(2, 3, 5, 4)] * parts
        sum((o * u).sum() for o, u in zip(outs[:-1], upstream, strict=False)).backward()  # the last part unused
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[0], grads[1], atol=0, rtol=0)
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(split_heads(x), x.permute(2, 0, 3, 1, 4).unbind(0), strict=True))


def test_unit_norm_zero_vector_and_bf16_autocast() -> None:
    assert torch.equal(unit_norm(torch.zeros(2, 4)), torch.zeros(2, 4))
    x = torch.randn(4, 6, 16).bfloat16().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = unit_norm(x, torch.tensor(3.0, requires_grad=True))
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert x.grad is not None and x.grad.dtype == torch.bfloat16


def test_cpu_dropout_keeps_expected_fraction_and_scales() -> None:
    torch.manual_seed(0)
    x = torch.ones(200_000)
    y = dropout(x, 0.3, training=True)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.01
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / 0.7))
    assert dropout(x, 0.3, training=False) is x and dropout(x, 0.0, training=True) is x
    z = torch.randn(100, requires_grad=True)
    out = dropout(z, 0.5, training=True)
    out.sum().backward()
    assert z.grad is not None
    torch.testing.assert_close(z.grad, (out != 0).float() * 2.0)


def test_cpu_dropout_mask_probability_and_independence() -> None:
    torch.manual_seed(0)
    for p in (0.1, 0.3, 0.4):
        mask = keep_mask(torch.Size([1000, 1001]), p, torch.device("cpu"))  # an odd size: not a multiple of 4
        assert mask.shape == (1000, 1001) and mask.dtype == torch.bool
        assert abs(mask.float().mean().item() - (1 - p)) < 0.003
        flat = mask.flatten().float()  # the four 16-bit draws of one 64-bit word are independent
        for lag in (1, 2, 3, 4):
            corr = torch.corrcoef(torch.stack([flat[:-lag], flat[lag:]]))[0, 1].item()
            assert abs(corr) < 0.005, (p, lag, corr)
    assert keep_mask(torch.Size([64]), 0.0, torch.device("cpu")).all()
    assert keep_mask(torch.Size([4096]), 0.9999, torch.device("cpu")).float().mean() < 0.01


def test_cpu_dropout_keeps_only_a_boolean_mask_for_backward() -> None:
    saved: list[torch.Tensor] = []
    x = torch.randn(64, 32, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = dropout(x, 0.3, training=True)
    assert [t.dtype for t in saved] == [torch.bool]  # one byte per element, not a float copy of the mask
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad, saved[0].float() / 0.7)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the activation's dtype is kept
        assert dropout(x.bfloat16(), 0.3, training=True).dtype == torch.bfloat16


def _plain_label_smoothed_nll(logits: torch.Tensor, target: torch.Tensor, eps: float,
                              keep: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss written with autograd's own operations (log_softmax, nll_loss, sums), as the fast path replaces."""
    lprobs = F.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), -1).flatten(0, 1)
    flat = target.reshape(-1)
    real = flat != PAD
    if keep is None:
        nll = F.nll_loss(lprobs, flat, ignore_index=PAD, reduction="sum")
        smooth = -(lprobs.sum(-1) * real).sum() / lprobs.size(-1)
    else:
        nll = -(lprobs.gather(-1, flat[:, None])[:, 0] * (real & keep[flat])).sum()
        smooth = -((lprobs @ keep.to(lprobs.dtype)) * real).sum() / keep.sum()
    return (1 - eps) * nll + eps * smooth, nll


@pytest.mark.parametrize("block_rows", [None, 4])  # None: one block of all 15 rows; 4: blocks of 4, 4, 4 and 3
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_label_smoothed_loss_gradient_equals_autograd(masked: bool, dtype: torch.dtype, block_rows: int | None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    if block_rows is not None:
        monkeypatch.setattr(nmt.training.loss, "CHUNK_ELEMENTS", block_rows * 11)
    torch.manual_seed(0)
    V = 11
    keep = torch.tensor([i % 3 != 0 for i in range(V)]) if masked else None
    raw = torch.randn(3, 5, V, dtype=torch.float64)
    if keep is not None:
        raw = raw.masked_fill(~keep, -1e9)
    target = torch.randint(4, V, (3, 5))
    target[0, 3:] = PAD
    target[2, 0] = 3  # outside the mask when there is one: adds nothing to the NLL
    for w_loss, w_nll in ((1.0, 0.0), (0.0, 1.0), (0.7, -0.3)):  # either output, or both, carries the gradient
        fast, plain = raw.to(dtype).requires_grad_(), raw.to(dtype).requires_grad_()
        loss, nll = label_smoothed_nll(fast, target, 0.1, keep)
        loss_ref, nll_ref = _plain_label_smoothed_nll(plain, target, 0.1, keep)
        torch.testing.assert_close((loss, nll), (loss_ref, nll_ref))
        (w_loss * loss + w_nll * nll).backward()
        (w_loss * loss_ref + w_nll * nll_ref).backward()
        assert fast.grad is not None and fast.grad.dtype == dtype
        tolerance = {"atol": 4e-3, "rtol": 1e-2} if dtype == torch.bfloat16 else {}
        torch.testing.assert_close(fast.grad, plain.grad, **tolerance)
    if dtype == torch.float64:
        x = raw.clone().requires_grad_()
        assert torch.autograd.gradcheck(lambda z: label_smoothed_nll(z, target, 0.1, keep), (x,))


# bf16 matmuls of 600 different shapes, then the process's resident memory in MiB
_MANY_SHAPES = textwrap.dedent("""
    import torch
    from nmt.machine.runtime import setup
    setup("cpu", "bf16")
    w = torch.randn(1024, 1024, dtype=torch.bfloat16)
    for n in range(1, 601):
        torch.randn(n, 1024, dtype=torch.bfloat16) @ w
    print(int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20)
""")


def _rss_after_many_shapes(capacity: str | None) -> float:
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    if capacity is not None:
        env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = capacity
    result = subprocess.run([sys.executable, "-c", _MANY_SHAPES], env=env, capture_output=True, text=True, check=True)
    return float(result.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux") or not torch.ops.mkldnn._is_mkldnn_bf16_supported(),
                    reason="needs Linux /proc and oneDNN bf16 matmuls")
def test_cpu_bf16_setup_bounds_the_onednn_primitive_cache() -> None:
    bounded = _rss_after_many_shapes(None)  # nmt.machine.runtime.setup sets its default capacity
    unbounded = _rss_after_many_shapes("1024")  # a value the user set is kept: oneDNN's own default
    assert bounded < unbounded - 50, (bounded, unbounded)
