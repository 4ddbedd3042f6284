"""The speed wing (nmt/kernels) against the plain maths (nmt/modules): an accelerated model has the same parameters
and state-dict keys, computes the same logits and gradients (fp32 to rounding, bf16 within its tolerance) and
decodes the same output for every system; a model saved by the layout before the wing existed still loads and
computes what it computed then."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from nmt import config, kernels
from nmt.kernels.attention import FastAttention, FastQKNorm
from nmt.kernels.linear import PaddedLinear
from nmt.model.spec import ModelSpec
from nmt.model.transformer import Transformer, build_model
from nmt.modules.attention import MultiHeadAttention, Scoring
from nmt.search import beam_search

FIXTURE = Path(__file__).parent / "fixtures" / "layout-9f6097e.json"
V = 24
TINY = dict(d_model=16, n_heads=2, d_ff=32, enc_layers=2, dec_layers=2, max_positions=64, dropout=0.0,
            attn_dropout=0.0, act_dropout=0.0, word_dropout=0.0, logit_mask=True)
SYSTEMS = sorted(set(config.SYSTEMS) - {"custom"})


def _pair(system: str, **model: Any) -> tuple[Transformer, Transformer]:
    cfg = config.config_from_dict({"system": system, "model": {**TINY, **model}})
    torch.manual_seed(0)
    plain = build_model(cfg.model, ModelSpec(V, 12.0, logit_mask=torch.arange(V) != 7))
    return plain, kernels.accelerate(copy.deepcopy(plain))


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, V, (3, 9), generator=g)
    src[1, 6:] = 0  # padding in one sentence
    src[:, -1:].clamp_(max=V - 1)
    tgt = torch.randint(4, V, (3, 8), generator=g)
    tgt[:, 0] = 1
    return src, tgt[:, :-1], tgt[:, 1:]


def _grads(model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor, gold: torch.Tensor,
           autocast: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.train()
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(src, tgt_in)
    torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), gold.flatten()).backward()
    return logits.detach().float(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_accelerate_swaps_classes_and_keeps_every_parameter() -> None:
    plain, fast = _pair("qknorm")
    assert not kernels.is_accelerated(plain) and kernels.is_accelerated(fast)
    assert isinstance(fast.decoder.blocks[0].cross_attn, FastAttention)
    assert isinstance(fast.encoder.blocks[0].self_attn.scoring, FastQKNorm)
    assert isinstance(fast.encoder.blocks[0].ffn.up, PaddedLinear)
    assert list(fast.state_dict()) == list(plain.state_dict())
    for (name, a), (_, b) in zip(plain.state_dict().items(), fast.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    kernels.plain(fast)
    assert not kernels.is_accelerated(fast)
    assert {type(m) for m in fast.modules()} == {type(m) for m in plain.modules()}


def test_a_subclass_of_a_plain_module_is_left_alone() -> None:
    class Mine(MultiHeadAttention):
        pass

    attn = Mine(8, 2, Scoring(4))
    kernels.accelerate(attn)
    assert type(attn) is Mine and type(attn.in_proj) is PaddedLinear


@pytest.mark.parametrize("system", SYSTEMS)
def test_accelerated_equals_plain_logits_and_gradients_fp32(system: str) -> None:
    plain, fast = _pair(system)
    src, tgt_in, gold = _batch()
    logits_p, grads_p = _grads(plain, src, tgt_in, gold)
    logits_f, grads_f = _grads(fast, src, tgt_in, gold)
    torch.testing.assert_close(logits_f, logits_p, atol=1e-5, rtol=1e-5)
    assert grads_f.keys() == grads_p.keys()
    for name in grads_p:
        torch.testing.assert_close(grads_f[name], grads_p[name], atol=1e-5, rtol=1e-4, msg=name)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / (b.norm() + 1e-9))


@pytest.mark.parametrize("system", SYSTEMS)
def test_accelerated_under_bf16_autocast_is_as_close_to_fp32_as_plain(system: str) -> None:
    """bf16 rounds differently on the two paths; measured against the fp32 gradients, the wing's are no further off
    than the plain maths' (at most 1.5x their relative error, or 0.1)."""
    plain, fast = _pair(system)
    src, tgt_in, gold = _batch()
    logits_32, grads_32 = _grads(plain, src, tgt_in, gold)
    logits_p, grads_p = _grads(plain, src, tgt_in, gold, autocast=True)
    logits_f, grads_f = _grads(fast, src, tgt_in, gold, autocast=True)
    assert _relative(logits_f, logits_32) <= max(1.5 * _relative(logits_p, logits_32), 0.05)
    assert grads_f.keys() == grads_p.keys() == grads_32.keys()
    for name, reference in grads_32.items():
        bound = max(1.5 * _relative(grads_p[name], reference), 0.1)
        assert _relative(grads_f[name], reference) <= bound, name


@pytest.mark.parametrize("system", SYSTEMS)
def test_accelerated_decodes_what_plain_decodes(system: str) -> None:
    plain, fast = _pair(system)
    src, _, _ = _batch()
    hyps = [beam_search(model.eval(), src, beam=3, nbest=3, max_len_cap=12) for model in (plain, fast)]
    assert [[h.tokens for h in n] for n in hyps[0]] == [[h.tokens for h in n] for n in hyps[1]]
    for ours, theirs in zip(hyps[0], hyps[1], strict=True):
        for a, b in zip(ours, theirs, strict=True):
            assert abs(a.score - b.score) < 1e-4


def test_dropout_is_dropout_in_both() -> None:
    """The wing's CPU dropout draws other random numbers than F.dropout, so outputs differ, but each keeps the
    expected activations' scale and is off in eval mode."""
    plain, fast = _pair("qknorm", dropout=0.3, attn_dropout=0.3, act_dropout=0.3, word_dropout=0.1)
    src, tgt_in, _ = _batch()
    for model in (plain, fast):
        model.eval()
        with torch.no_grad():
            reference = model(src, tgt_in)
            assert torch.equal(model(src, tgt_in), reference)
            model.train()
            assert not torch.allclose(model(src, tgt_in), reference)


def _tensor(entry: dict[str, Any]) -> torch.Tensor:
    dtype = getattr(torch, entry["dtype"])
    raw = np.frombuffer(base64.b64decode(entry["base64"]), dtype={torch.float32: np.float32, torch.bool: np.bool_,
                                                                  torch.int64: np.int64}[dtype])
    return torch.from_numpy(raw.copy()).reshape(entry["shape"])


@pytest.mark.parametrize("system", sorted(json.loads(FIXTURE.read_text())["models"]))
@pytest.mark.parametrize("accelerated", [False, True])
def test_a_model_saved_by_the_old_layout_loads_and_computes_the_same(system: str, accelerated: bool) -> None:
    """The fixture holds tiny models saved by commit 9f6097e (before nmt.kernels), every system, with the logits
    that code computed: the new layout keeps every state-dict key (the key map is the identity) and every value."""
    fixture = json.loads(FIXTURE.read_text())
    saved = fixture["models"][system]
    cfg = config.config_from_dict({"system": system, "model": saved["model"]})
    model = build_model(cfg.model, ModelSpec(fixture["vocab_size"], fixture["qknorm_length"]))
    if accelerated:
        kernels.accelerate(model)
    model.load_state_dict({name: _tensor(entry) for name, entry in saved["state"].items()}, strict=True)
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor(fixture["src"]), torch.tensor(fixture["tgt"]))
    expected = np.frombuffer(base64.b64decode(saved["logits_base64"]), dtype=np.float32)
    expected_logits = torch.from_numpy(expected.copy()).reshape(saved["logits_shape"])
    torch.testing.assert_close(logits, expected_logits, atol=1e-5, rtol=1e-5)
