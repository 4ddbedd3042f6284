"""The fp32 GEMM route (nmt/machine/fp32_gemm.py): oneDNN's fp32 products equal MKL's within fp32 rounding (and far
inside bf16's), a Linear layer and a whole accelerated model train and decode the same on either route, the probe
picks oneDNN only where it is clearly faster, and its result is remembered per machine."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from nmt import config, kernels
from nmt.errors import NmtError
from nmt.kernels import linear
from nmt.kernels.linear import PaddedLinear
from nmt.machine import fp32_gemm, hardware
from nmt.model.spec import ModelSpec
from nmt.model.transformer import build_model
from nmt.search import beam_search

pytestmark = pytest.mark.skipif(not fp32_gemm.onednn_available(), reason="this PyTorch has no oneDNN")

TINY = dict(d_model=32, n_heads=4, d_ff=64, enc_layers=2, dec_layers=2, max_positions=64, dropout=0.0,
            attn_dropout=0.0, act_dropout=0.0, word_dropout=0.0)


@pytest.fixture
def route(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[pytest.MonkeyPatch]:
    """Set ``NMT_FP32_GEMM`` per test, with a fresh choice and a cache of this test's own."""
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path))
    fp32_gemm._choice.cache_clear()
    yield monkeypatch
    fp32_gemm._choice.cache_clear()


def _float64(name: str, *args: torch.Tensor | None) -> torch.Tensor:
    return fp32_gemm.product(name, "mkl")(*(None if a is None else a.double() for a in args))


@pytest.mark.parametrize("name", fp32_gemm.PRODUCTS)
@pytest.mark.parametrize("width_in, width_out", [(48, 96), (96, 48)])  # the weight gradient's two operand orders
def test_onednn_products_are_fp32_exact_to_rounding(name: str, width_in: int, width_out: int) -> None:
    """Against float64: both libraries' errors are fp32 rounding (~1e-6 relative), an order below the bf16 bound
    that a reduced-precision route would need (~4e-3)."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(77, width_in, generator=g), torch.randn(width_out, width_in, generator=g)
    b, grad = torch.randn(width_out, generator=g), torch.randn(77, width_out, generator=g)
    args = {"forward": (x, w, b), "grad_input": (grad, w), "grad_weight": (grad, x)}[name]
    exact = _float64(name, *args)
    for route_name in ("mkl", "onednn"):
        out = fp32_gemm.product(name, route_name)(*args)
        assert out.dtype == torch.float32 and out.shape == exact.shape
        error = float((out.double() - exact).norm() / exact.norm())
        assert error < 1e-5, (route_name, error)
    bf16 = fp32_gemm.product(name, "mkl")(*(a.bfloat16() for a in args)).double()
    assert float((bf16 - exact).norm() / exact.norm()) > 1e-4  # the bound above would catch bf16 arithmetic


@pytest.mark.parametrize("bias", [True, False])
def test_a_linear_layer_on_the_onednn_route_equals_nn_linear(route: pytest.MonkeyPatch, bias: bool) -> None:
    route.setenv(fp32_gemm.ENV, "onednn")
    torch.manual_seed(0)
    plain = torch.nn.Linear(40, 72, bias=bias)
    fast = copy.deepcopy(plain)
    fast.__class__ = PaddedLinear
    x = torch.randn(3, 23, 40, requires_grad=True)  # 69 rows: padded to 128 on this route
    x2 = x.detach().clone().requires_grad_()
    out_p, out_f = plain(x), fast(x2)
    torch.testing.assert_close(out_f, out_p, atol=1e-5, rtol=1e-5)
    grad = torch.randn_like(out_p)
    out_p.backward(grad)
    out_f.backward(grad)
    assert x2.grad is not None and x.grad is not None
    torch.testing.assert_close(x2.grad, x.grad, atol=1e-5, rtol=1e-5)
    for (name, p), q in zip(plain.named_parameters(), fast.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-4, rtol=1e-5, msg=name)


def test_decoding_packs_fp32_weights_and_repacks_after_an_update(route: pytest.MonkeyPatch) -> None:
    route.setenv(fp32_gemm.ENV, "onednn")
    layer = PaddedLinear(32, 48)
    x = torch.randn(5, 32)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)
        assert layer in linear._PACKS  # the weight was packed for decoding
        layer.weight.add_(1.0)  # an optimizer step: the pack must follow
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)


def _model() -> torch.nn.Module:
    cfg = config.config_from_dict({"system": "qknorm", "model": TINY})
    torch.manual_seed(0)
    return kernels.accelerate(build_model(cfg.model, ModelSpec(40, 12.0)))


def _train(model: torch.nn.Module, steps: int) -> list[float]:
    g = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(4, 40, (6, 11), generator=g), torch.randint(4, 40, (6, 10), generator=g)
    optim = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    model.train()
    for _ in range(steps):
        optim.zero_grad()
        loss = F.cross_entropy(model(src, tgt[:, :-1]).flatten(0, 1), tgt[:, 1:].flatten())
        loss.backward()
        optim.step()
        losses.append(float(loss.detach()))
    return losses


def test_a_model_trains_and_decodes_the_same_on_both_routes(route: pytest.MonkeyPatch) -> None:
    runs = {}
    for name in ("mkl", "onednn"):
        route.setenv(fp32_gemm.ENV, name)
        fp32_gemm._choice.cache_clear()
        model = _model()
        losses = _train(model, 30)
        src = torch.randint(4, 40, (3, 9), generator=torch.Generator().manual_seed(2))
        hyps = beam_search(model.eval(), src, beam=3, nbest=1, max_len_cap=12)
        runs[name] = (losses, [n[0].tokens for n in hyps])
    (losses_m, hyps_m), (losses_o, hyps_o) = runs["mkl"], runs["onednn"]
    assert losses_o[-1] < 0.5 * losses_o[0]  # it learns (memorizes the batch)
    for a, b in zip(losses_m, losses_o, strict=True):
        assert abs(a - b) < 1e-3 * max(1.0, a)  # 30 Adam steps apart by rounding only
    assert hyps_m == hyps_o


def test_the_probe_takes_onednn_only_where_clearly_faster() -> None:
    routes = fp32_gemm._routes({"forward": 2.1, "grad_input": 1.1, "grad_weight": fp32_gemm.MARGIN})
    assert routes == {"forward": "onednn", "grad_input": "mkl", "grad_weight": "onednn"}
    assert fp32_gemm._routes(dict.fromkeys(fp32_gemm.PRODUCTS, 0.9)) == dict.fromkeys(fp32_gemm.PRODUCTS, "mkl")


def test_decoding_has_its_own_route_and_margin() -> None:
    """Decoding's packed route adds no copy, so a smaller lead takes it; the training products keep theirs."""
    level = dict.fromkeys(fp32_gemm.PRODUCTS, 1.0)
    assert fp32_gemm._routes({**level, fp32_gemm.DECODE: 1.06}) == {**dict.fromkeys(fp32_gemm.PRODUCTS, "mkl"),
                                                                    fp32_gemm.DECODE: "onednn"}
    assert fp32_gemm._routes({**level, fp32_gemm.DECODE: 1.04})[fp32_gemm.DECODE] == "mkl"
    assert fp32_gemm.MARGIN > fp32_gemm.DECODE_MARGIN > 1.0


def _chosen(routes: tuple[str, str, str, str]) -> fp32_gemm.Fp32Gemm:
    speedups = dict(zip(fp32_gemm.PROBED, (1.2, 1.0, 1.0, 1.1), strict=True))
    return fp32_gemm.Fp32Gemm(*routes, speedups=speedups, threads=1, source="probe")


@pytest.mark.parametrize("decode", ["mkl", "onednn"])
def test_decoding_follows_the_decoding_route_and_training_the_training_routes(
        route: pytest.MonkeyPatch, decode: str) -> None:
    """Training products all on MKL but decoding on oneDNN packs the weight in decoding only; a oneDNN forward with
    decoding on MKL decodes through plain ``F.linear``, unpacked. Either way the values are ``nn.Linear``'s."""
    training = "mkl" if decode == "onednn" else "onednn"
    chosen = _chosen((training, "mkl", "mkl", decode))
    route.setattr(fp32_gemm, "choice", lambda: chosen)
    layer = PaddedLinear(32, 48)
    x = torch.randn(5, 32)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)
    assert (layer in linear._PACKS) == (decode == "onednn")
    assert (linear._fp32_route(x, layer.weight, decoding=True) is not None) == (decode == "onednn")
    assert (linear._fp32_route(x, layer.weight) is not None) == (training == "onednn")
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)  # training
    described = chosen.describe()
    name = {"mkl": "MKL", "onednn": "oneDNN"}[decode]
    assert described.endswith(f"forward/grad input/grad weight; decoding {name} 1.10x)"), described


def test_a_cache_without_the_decoding_route_is_probed_again(route: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A cache written before decoding had a route (version 3, three products) is not read as a full answer."""
    key = fp32_gemm.machine_key(torch.get_num_threads())
    old = {"version": 3, "entries": {key: dict.fromkeys(fp32_gemm.PRODUCTS, 1.0)}}
    (tmp_path / "fp32-gemm.json").write_text(json.dumps(old))
    assert fp32_gemm._read_cache(key) is None
    same_version = {"version": fp32_gemm.CACHE_VERSION, "entries": {key: dict.fromkeys(fp32_gemm.PRODUCTS, 1.0)}}
    (tmp_path / "fp32-gemm.json").write_text(json.dumps(same_version))
    assert fp32_gemm._read_cache(key) is None
    full = {"version": fp32_gemm.CACHE_VERSION, "entries": {key: dict.fromkeys(fp32_gemm.PROBED, 1.0)}}
    (tmp_path / "fp32-gemm.json").write_text(json.dumps(full))
    assert fp32_gemm._read_cache(key) == dict.fromkeys(fp32_gemm.PROBED, 1.0)


def test_one_noisy_round_does_not_decide_a_route(route: pytest.MonkeyPatch) -> None:
    """The speed-up is the median of rounds that time both routes in turn: one round where oneDNN looked 1.6x
    faster (a moment's noise; measured so once on a quiet Intel machine) leaves MKL's level figure standing."""
    rounds = iter([1.0, 1.0, 1.0, 1 / 1.6] + [1.0, 1.0] * (fp32_gemm.PROBE_ROUNDS - 2))
    route.setattr(fp32_gemm, "_best_seconds", lambda fn: next(rounds))  # mkl, onednn, mkl, onednn, ...
    speedup = fp32_gemm._speedup({"mkl": lambda: None, "onednn": lambda: None})
    assert speedup == 1.0 and fp32_gemm._routes(dict.fromkeys(fp32_gemm.PRODUCTS, speedup))["forward"] == "mkl"
    rounds = iter([2.0, 1.0] * fp32_gemm.PROBE_ROUNDS)  # oneDNN steadily 2x faster: taken
    assert fp32_gemm._speedup({"mkl": lambda: None, "onednn": lambda: None}) == 2.0


def test_the_probe_runs_once_per_machine_and_its_cache_is_reused(route: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = []
    real = fp32_gemm.probe

    def counted() -> dict[str, float]:
        calls.append(1)
        return real()

    route.setattr(fp32_gemm, "probe", counted)
    first = fp32_gemm.choice()
    assert first.source == "probe" and set(first.speedups) == set(fp32_gemm.PROBED)
    assert all(value > 0 for value in first.speedups.values())
    saved = json.loads((tmp_path / "fp32-gemm.json").read_text())
    assert saved["entries"][fp32_gemm.machine_key(torch.get_num_threads())] == first.speedups
    fp32_gemm._choice.cache_clear()  # a new process on the same machine
    second = fp32_gemm.choice()
    assert second.source == "cache" and second.speedups == first.speedups and len(calls) == 1
    (tmp_path / "fp32-gemm.json").write_text("{not json")  # a damaged cache is probed again, never an error
    fp32_gemm._choice.cache_clear()
    assert fp32_gemm.choice().source == "probe" and len(calls) == 2


def test_the_setting_overrides_the_probe_and_is_checked(route: pytest.MonkeyPatch) -> None:
    route.setenv(fp32_gemm.ENV, "MKL")
    chosen = fp32_gemm.choice()
    assert (chosen.forward, chosen.grad_input, chosen.grad_weight, chosen.decode) == ("mkl",) * 4
    assert not chosen.uses_onednn()
    assert chosen.describe() == "fp32 GEMM MKL (set by NMT_FP32_GEMM)"
    assert linear._fp32_route(torch.ones(2, 2), torch.ones(2, 2)) is None  # MKL: plain F.linear, no padding
    route.setenv(fp32_gemm.ENV, "fast")
    with pytest.raises(NmtError, match="NMT_FP32_GEMM='fast': choose one of auto, mkl, onednn"):
        fp32_gemm.choice()


def test_the_machine_line_names_the_route(route: pytest.MonkeyPatch) -> None:
    route.setenv(fp32_gemm.ENV, "onednn")
    line = hardware.describe_machine(hardware.machine_info())
    assert line.endswith("fp32 GEMM oneDNN (set by NMT_FP32_GEMM)")


def test_validation_after_a_fused_optimizer_step_uses_the_new_weights(route: pytest.MonkeyPatch) -> None:
    """``Adam(fused=True)`` (the trainer's) leaves version counters as they were, so the packs' keys cannot see its
    step; the trainer's ``eval()`` before validation drops them (the bug it fixes: validation decoded with the
    weights of the first validation, dev loss and BLEU frozen)."""
    route.setenv(fp32_gemm.ENV, "onednn")
    layer = PaddedLinear(16, 8)
    x = torch.randn(4, 16)
    optim = torch.optim.Adam(layer.parameters(), lr=0.5, fused=True)
    layer.eval()
    with torch.no_grad():
        before = layer(x)
    layer.train()
    version = layer.weight._version
    layer(x).square().sum().backward()
    optim.step()
    assert layer.weight._version == version  # what the packs' keys alone would miss
    layer.eval()
    with torch.no_grad():
        after = layer(x)
        torch.testing.assert_close(after, F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(after, before)
