"""``train.compile``: the model compiles as one graph (no graph breaks, so no per-batch recompiles from data-dependent
branches or the CPU bf16 row padding) and computes what the eager model computes, gradients included."""

from __future__ import annotations

import pytest
import torch

from nmt import config
from nmt.model.spec import ModelSpec
from nmt.model.transformer import build_model
from nmt.vocab import BOS, EOS, PAD

V = 40


def _model(system: str, dropout: float) -> torch.nn.Module:
    cfg = config.config_from_dict({"system": system, "model": dict(
        enc_layers=1, dec_layers=1, d_model=32, d_ff=64, n_heads=4, dropout=dropout, word_dropout=0.0,
        max_positions=64)})
    torch.manual_seed(0)
    return build_model(cfg.model, ModelSpec(V, 12.0))


def _batch(lengths: list[int], first: int | None = None) -> torch.Tensor:
    out = torch.full((len(lengths), max(lengths)), PAD)
    for i, n in enumerate(lengths):
        out[i, :n] = torch.randint(4, V, (n,))
        out[i, n - 1] = EOS
        if first is not None:
            out[i, 0] = first
    return out


def _loss_and_grads(net: torch.nn.Module, model: torch.nn.Module, src: torch.Tensor, tgt: torch.Tensor,
                    precision: torch.dtype | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=precision or torch.bfloat16, enabled=precision is not None):
        logits = net(src, tgt)
    weights = torch.randn(logits.shape, generator=torch.Generator().manual_seed(3))  # the same for both nets
    loss = (logits.float() * weights).sum()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("system", ["qknorm", "prenorm_fixnorm_scalenorm"])
def test_compiled_model_is_one_graph_and_matches_eager(system: str) -> None:
    model = _model(system, dropout=0.0).train()
    # aot_eager: dynamo and AOT autograd as with inductor, minus the C++ code generation (seconds, not minutes)
    net = torch.compile(model, fullgraph=True, dynamic=True, backend="aot_eager")
    torch.manual_seed(1)
    for lengths in ([5, 3, 7], [9, 2], [4, 4, 4]):  # new shapes, padded batches and a source without padding
        src, tgt = _batch(lengths), _batch([n + 1 for n in lengths], first=BOS)
        loss, grads = _loss_and_grads(net, model, src, tgt, None)
        ref_loss, ref_grads = _loss_and_grads(model, model, src, tgt, None)
        torch.testing.assert_close(loss, ref_loss, rtol=1e-4, atol=1e-3)  # fp32 rounding of other kernels
        assert len(grads) == len(ref_grads)
        for got, want in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


def test_compiled_bf16_is_as_accurate_as_eager_bf16() -> None:
    """Under CPU bf16 autocast the eager model pads rows and runs hand-written backward passes, the compiled one
    plain operations: both round differently, so each is compared with the fp32 gradients, and the compiled
    model's error must stay within that of the eager one."""
    model = _model("qknorm", dropout=0.0).train()
    net = torch.compile(model, fullgraph=True, dynamic=True, backend="aot_eager")
    torch.manual_seed(1)
    for lengths in ([5, 3, 7], [9, 2]):
        src, tgt = _batch(lengths), _batch([n + 1 for n in lengths], first=BOS)
        _, compiled = _loss_and_grads(net, model, src, tgt, torch.bfloat16)
        _, eager = _loss_and_grads(model, model, src, tgt, torch.bfloat16)
        _, exact = _loss_and_grads(model, model, src, tgt, None)
        for got, ours, want in zip(compiled, eager, exact, strict=True):
            scale = float(want.abs().max())
            assert float((got - want).abs().max()) <= 1.5 * float((ours - want).abs().max()) + 0.01 * scale


def test_compiled_training_with_dropout_is_one_graph() -> None:
    model = _model("qknorm", dropout=0.3).train()
    net = torch.compile(model, fullgraph=True, dynamic=True, backend="aot_eager")
    torch.manual_seed(2)
    src, tgt = _batch([6, 4]), _batch([5, 7], first=BOS)
    loss, grads = _loss_and_grads(net, model, src, tgt, torch.bfloat16)
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
