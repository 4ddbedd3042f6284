"""Attention scoring variants: QKNorm bounds, init and scale invariance; fused path == explicit-weights path;
cached incremental self-attention == full causal self-attention."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from nmt import config
from nmt.model.incremental import cross_attention_step, self_attention_step
from nmt.model.placement import Placement
from nmt.modules.attention import ATTENTIONS, MultiHeadAttention, QKNorm, QKRMSNorm, qknorm_gain_init

D, H = 16, 4


def _attention(name: str, length: float = 20.0) -> MultiHeadAttention:
    torch.manual_seed(0)
    attn = MultiHeadAttention(D, H, ATTENTIONS[name](D // H, length))
    with torch.no_grad():  # non-trivial biases and gains so every term is exercised
        for p in attn.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return attn.eval()


def _key_mask(lengths: list[int], total: int) -> torch.Tensor:
    return (torch.arange(total)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]  # (B, 1, 1, S)


def test_attention_names_match_config() -> None:
    (registry,) = config.AttentionName.__metadata__
    assert registry.choices() == list(ATTENTIONS)  # the config's choices are the registry's keys


@pytest.mark.parametrize("length", [2.0, 20.0, 72.0])
def test_qknorm_gain_init(length: float) -> None:
    g = QKNorm(4, length).gain
    assert g.shape == ()
    assert math.isclose(g.item(), math.log2(length * length - length), rel_tol=1e-6)
    assert math.isclose(qknorm_gain_init(72), 12.32, abs_tol=0.005)  # the papers' en->vi value


def test_qknorm_requires_length() -> None:
    with pytest.raises(ValueError):
        QKNorm(4, None)


def test_qknorm_logits_bounded_by_gain() -> None:
    attn = _attention("qknorm")
    x = torch.randn(2, 9, D) * 50
    for gain in [attn.scoring.gain.item(), -3.5]:
        with torch.no_grad():
            attn.scoring.gain.fill_(gain)
        q, k, _ = attn.project_self(x)
        logits = attn.scores(q, k)
        assert logits.abs().max().item() <= abs(gain) * (1 + 1e-5)
        # the bound is attained: a key parallel to the query scores |g|
        q_hat = torch.nn.functional.normalize(q, dim=-1)
        torch.testing.assert_close(attn.scores(q, q_hat)[..., 0, 0], torch.full((2, H), abs(gain)))


def test_qknorm_one_scalar_per_module() -> None:
    attn = _attention("qknorm")
    gains = [p for name, p in attn.named_parameters() if name.startswith("scoring")]
    assert len(gains) == 1 and gains[0].numel() == 1


def test_qknorm_invariant_to_positive_scaling_of_q_and_k() -> None:
    attn = _attention("qknorm")
    x, memory = torch.randn(2, 6, D), torch.randn(2, 5, D)
    before_self, before_cross = attn(x), attn(x, memory=memory)
    with torch.no_grad():
        attn.in_proj.weight[: 2 * D] *= 7.5  # q and k rows, not v
        attn.in_proj.bias[: 2 * D] *= 7.5
    torch.testing.assert_close(attn(x), before_self)
    torch.testing.assert_close(attn(x, memory=memory), before_cross)


def test_qk_rmsnorm_per_dim_gains() -> None:
    attn = _attention("qk_rmsnorm")
    assert isinstance(attn.scoring, QKRMSNorm)
    assert attn.scoring.q_norm.weight.shape == (D // H,) and attn.scoring.k_norm.weight.shape == (D // H,)
    with torch.no_grad():
        attn.scoring.q_norm.weight.fill_(1.0)
    q, _, _ = attn.project_self(torch.randn(2, 5, D) * 10)
    torch.testing.assert_close(q.pow(2).mean(-1), torch.ones(2, H, 5), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", sorted(ATTENTIONS))
def test_fused_path_equals_weights_path(name: str) -> None:
    attn = _attention(name)
    x, memory = torch.randn(3, 6, D), torch.randn(3, 7, D)
    mask = _key_mask([7, 4, 1], 7)
    cases = [
        (attn.project_self(x), None, True),
        (attn.project_self(x), _key_mask([6, 3, 5], 6), False),
        ((attn.project_queries(x), *attn.project_memory(memory)), mask, False),
    ]
    for (q, k, v), m, causal in cases:
        with torch.no_grad():  # with autograd on CPU, attend() itself takes the explicit path
            fused = attn.attend(q, k, v, m, causal)
        explicit, weights = attn.attend_with_weights(q, k, v, m, causal)
        torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
        if causal:
            assert weights.triu(1).abs().max().item() == 0.0
        if m is not None:
            assert weights.masked_select(~m).abs().max().item() == 0.0


def test_fully_masked_row_gives_no_nan() -> None:
    attn = _attention("qknorm")
    q, k, v = attn.project_self(torch.randn(2, 4, D))
    mask = _key_mask([4, 0], 4)
    with torch.no_grad():
        fused = attn.attend(q, k, v, mask)
    training_path = attn.attend(q, k, v, mask)
    explicit, weights = attn.attend_with_weights(q, k, v, mask)
    assert torch.isfinite(fused).all() and torch.isfinite(explicit).all() and torch.isfinite(weights).all()
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(training_path, explicit, atol=1e-5, rtol=1e-5)
    training_path.sum().backward()
    assert attn.in_proj.weight.grad is not None and torch.isfinite(attn.in_proj.weight.grad).all()


@pytest.mark.parametrize("name", sorted(ATTENTIONS))
def test_record_collects_weights(name: str) -> None:
    attn = _attention(name)
    x = torch.randn(2, 5, D)
    record: list[torch.Tensor] = []
    torch.testing.assert_close(attn(x, is_causal=True, record=record), attn(x, is_causal=True), atol=1e-5, rtol=1e-5)
    assert len(record) == 1 and record[0].shape == (2, H, 5, 5)


@pytest.mark.parametrize("name", sorted(ATTENTIONS))
def test_cached_step_equals_causal_forward(name: str) -> None:
    attn = _attention(name)
    x = torch.randn(2, 7, D)
    full = attn(x, is_causal=True)
    cache = torch.zeros(2, 2, H, 1, 8, D // H)
    place = Placement(group=1, n_blocks=2)
    steps = [self_attention_step(attn, x[:, t : t + 1], cache, None, t, place) for t in range(7)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(ATTENTIONS))
def test_grouped_step_reads_each_rows_ancestors(name: str) -> None:
    """Two beams of one sentence share a block: row 1 descends from row 0 until position 3, then from itself; each
    row's step attends exactly to its own history (the keys/values its ancestors wrote), nothing else."""
    attn = _attention(name)
    g, capacity, steps = 2, 8, 6
    x = torch.randn(g, steps, D)
    cache = torch.zeros(2, 1, H, g, capacity, D // H)
    slots = torch.tensor([[0] * capacity, [0, 0, 0] + [1] * (capacity - 3)])  # slot of each row's positions
    place = Placement(group=g, n_blocks=1)
    for t in range(steps):
        visible = (slots[:, None, :] == torch.arange(g)[:, None]) & (torch.arange(capacity) <= t)
        out = self_attention_step(attn, x[:, t : t + 1], cache, visible.view(1, 1, g, g * capacity), t, place)
        _, k, v = attn.project_self(x)  # every row's own keys/values at every position
        for j in range(g):
            history = slots[j, : t + 1]  # row j's position s was written by row history[s]
            keys = k[history, :, torch.arange(t + 1)].transpose(0, 1)[None]  # (1, H, t + 1, D/H)
            values = v[history, :, torch.arange(t + 1)].transpose(0, 1)[None]
            q = attn.project_self(x[j : j + 1, t : t + 1])[0]
            expected = attn.out_proj(F.scaled_dot_product_attention(q, keys, values, scale=attn.scoring.scale)
                                     .transpose(1, 2).reshape(1, 1, D))
            torch.testing.assert_close(out[j : j + 1], expected, atol=1e-5, rtol=1e-5)


def test_attention_dropout_only_in_training() -> None:
    attn = MultiHeadAttention(D, H, ATTENTIONS["scaled_dot"](D // H), dropout=0.5)
    x = torch.randn(2, 5, D)
    attn.eval()
    torch.testing.assert_close(attn(x), attn(x))
    attn.train()
    torch.manual_seed(1)
    a = attn(x)
    torch.manual_seed(2)
    assert not torch.allclose(a, attn(x))


def test_bf16_autocast_runs() -> None:
    for name in ATTENTIONS:
        attn = _attention(name)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = attn(torch.randn(2, 5, D), is_causal=True)
        assert torch.isfinite(out.float()).all()


@pytest.mark.parametrize("name", list(ATTENTIONS))
def test_bf16_cross_attention_step_equals_the_fused_kernel(name: str) -> None:
    """Under CPU bf16 autocast the decoding step's cross-attention takes two batched matmuls (with the softmax in
    float32) instead of the fused kernel: the same attention within bf16 rounding, masked source positions
    included. Two sentences of 3 beams (the rows of a block), sources of 6 and 9 tokens."""
    attn = _attention(name)
    memory, x = torch.randn(2, 9, D), torch.randn(6, 1, D)
    mask = _key_mask([6, 9], 9)
    place = Placement(group=3, n_blocks=2)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        k, v = attn.project_memory(memory)
        out = cross_attention_step(attn, x, k, v, mask, place)
        q = place.to_blocks(attn.project_queries(x))
        fused = attn.out_proj(place.to_rows(torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=attn.scoring.scale)))
    assert out.dtype == fused.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), fused.float(), atol=3e-2, rtol=3e-2)
    with torch.no_grad():  # and the masked positions get no weight: changing the padding's memory changes nothing
        memory[0, 6:] = 100.0
        with torch.autocast("cpu", dtype=torch.bfloat16):
            k2, v2 = attn.project_memory(memory)
            torch.testing.assert_close(cross_attention_step(attn, x, k2, v2, mask, place)[:3], out[:3])
