"""Each norm against its closed form, and the config's norm names against the NORMS dict."""

from __future__ import annotations

import math

import pytest
import torch

from nmt import config
from nmt.modules.norms import NORMS, LayerNorm, RMSNorm, ScaleNorm


def _inputs() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(3, 5, 8) * 3 + 1


def test_norm_names_match_config() -> None:
    (registry,) = config.NormName.__metadata__
    assert registry.choices() == list(NORMS)  # the config's choices are the registry's keys


def test_layernorm_closed_form() -> None:
    x = _inputs()
    norm = LayerNorm(8)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 2.0, 8))
        norm.bias.copy_(torch.linspace(-1.0, 1.0, 8))
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    expected = (x - mean) / torch.sqrt(var + 1e-5) * norm.weight + norm.bias
    torch.testing.assert_close(norm(x), expected)


def test_rmsnorm_closed_form() -> None:
    x = _inputs()
    norm = RMSNorm(8)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 2.0, 8))
    expected = x / torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-6) * norm.weight
    torch.testing.assert_close(norm(x), expected)
    assert not hasattr(norm, "bias")


def test_scalenorm_closed_form_and_init() -> None:
    x = _inputs()
    norm = ScaleNorm(8)
    assert norm.scale.shape == () and math.isclose(norm.scale.item(), math.sqrt(8), rel_tol=1e-6)
    expected = math.sqrt(8) * x / x.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(norm(x), expected)
    assert sum(p.numel() for p in norm.parameters()) == 1  # one scalar g per norm site
    torch.testing.assert_close(norm(x).norm(dim=-1), torch.full((3, 5), math.sqrt(8)))


def test_scalenorm_zero_vector_is_safe() -> None:
    out = ScaleNorm(4)(torch.zeros(2, 4))
    assert torch.equal(out, torch.zeros(2, 4))


@pytest.mark.parametrize("name", sorted(NORMS))
def test_norms_are_shape_preserving_and_differentiable(name: str) -> None:
    norm = NORMS[name](8)
    x = _inputs().requires_grad_()
    out = norm(x)
    assert out.shape == x.shape
    out.square().sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    for p in norm.parameters():
        assert p.grad is not None


@pytest.mark.parametrize("name", sorted(NORMS))
def test_norms_under_bf16_autocast(name: str) -> None:
    norm = NORMS[name](8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = norm(_inputs().bfloat16())
    assert torch.isfinite(out.float()).all()
