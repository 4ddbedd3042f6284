"""The assembled Transformer: presets build and train, cached decoding == full forward, padding and causality
invariants, tied FixNorm embeddings, QKNorm gains, initializations."""

from __future__ import annotations

import math
import typing
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from nmt import config, kernels
from nmt.errors import NmtError
from nmt.kernels import linear, packed
from nmt.machine import fp32_gemm
from nmt.model.spec import ModelSpec
from nmt.model.transformer import INITS, Transformer, build_model
from nmt.modules.embeddings import sinusoidal_positions, word_dropout
from nmt.vocab import BOS, EOS, PAD, SPECIALS, UNK

V = 40
TINY: dict[str, Any] = dict(enc_layers=2, dec_layers=2, d_model=32, d_ff=64, n_heads=4, dropout=0.0,
                            word_dropout=0.0, max_positions=128)
PRESETS = [name for name in config.SYSTEMS if name != "custom"]
VARIANTS = [*PRESETS, "qk_rmsnorm", "rmsnorm_post"]


def _model(variant: str = "qknorm", vocab: int = V, length: float | None = 12.0, **model: Any) -> Transformer:
    extra: dict[str, Any] = {
        "qk_rmsnorm": dict(attention="qk_rmsnorm"),
        "rmsnorm_post": dict(norm="rmsnorm", norm_position="post", init="xavier", attention="scaled_dot"),
    }.get(variant, {})
    system = variant if variant in config.SYSTEMS else "custom"
    cfg = config.config_from_dict({"system": system, "model": {**TINY, **extra, **model}})
    torch.manual_seed(0)
    return build_model(cfg.model, ModelSpec(vocab, length))


def _batch(lengths: list[int], vocab: int = V, bos: bool = False) -> torch.Tensor:
    """Random sentences (ending in EOS, or starting with BOS), right-padded to the longest."""
    out = torch.full((len(lengths), max(lengths)), PAD)
    for i, n in enumerate(lengths):
        body = torch.randint(SPECIALS, vocab, (n - 1,))
        out[i, :n] = torch.cat([torch.tensor([BOS]), body]) if bos else torch.cat([body, torch.tensor([EOS])])
    return out


def test_init_names_match_config() -> None:
    assert set(typing.get_args(config.InitName)) == set(INITS)


@pytest.mark.parametrize("variant", VARIANTS)
def test_incremental_decoding_equals_forward(variant: str) -> None:
    model = _model(variant).eval()
    torch.manual_seed(1)
    src, tgt = _batch([7, 4, 9]), _batch([6, 6, 6], bos=True)
    index = torch.tensor([2, 0, 0, 1])  # reorder, duplicate (beam expansion)
    full = model(src[index], tgt[index]).log_softmax(-1)
    state = model.start(src)
    steps = []
    for t in range(tgt.size(1)):
        if t == 2:
            state = state.select(index)
        log_probs, state = model.step(tgt[:, t] if t < 2 else tgt[index, t], state)
        assert log_probs.dtype == torch.float32
        steps.append(log_probs if t >= 2 else log_probs[index])
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-4, rtol=1e-4)


def test_incremental_decoding_grows_cache_past_initial_capacity() -> None:
    model = _model("qknorm").eval()
    src, tgt = _batch([5, 3]), _batch([70, 70], bos=True)
    full = model(src, tgt).log_softmax(-1)
    state = model.start(src)
    steps = []
    for t in range(tgt.size(1)):
        log_probs, state = model.step(tgt[:, t], state)
        steps.append(log_probs)
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-4, rtol=1e-4)
    assert state.length == 70


def test_select_prunes_rows() -> None:
    model = _model().eval()
    src = _batch([4, 6, 5])
    state = model.start(src)
    _, state = model.step(torch.full((3,), BOS), state)
    kept = state.select(torch.tensor([1]))
    assert kept.memory_kv.size(2) == 1 and kept.self_kv.size(2) == 1 and kept.length == 1
    log_probs, _ = model.step(torch.tensor([5]), kept)
    alone = model(src[1:2], torch.tensor([[BOS, 5]])).log_softmax(-1)[:, -1]
    torch.testing.assert_close(log_probs, alone, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("variant", VARIANTS)
def test_padding_does_not_change_outputs(variant: str) -> None:
    model = _model(variant).eval()
    torch.manual_seed(2)
    src, tgt = _batch([6, 3, 8]), _batch([5, 2, 7], bos=True)
    batched = model(src, tgt)
    for i in range(3):
        s, t = src[i : i + 1, : int(src[i].ne(PAD).sum())], tgt[i : i + 1, : int(tgt[i].ne(PAD).sum())]
        torch.testing.assert_close(batched[i : i + 1, : t.size(1)], model(s, t), atol=1e-4, rtol=1e-4)
    extra = F.pad(src, (0, 5), value=PAD)  # more source padding
    torch.testing.assert_close(model(extra, tgt), batched, atol=1e-4, rtol=1e-4)


def test_all_padding_source_row_gives_no_nan() -> None:
    model = _model().eval()
    src = _batch([5, 5])
    src[1] = PAD
    logits = model(src, _batch([4, 4], bos=True))
    assert torch.isfinite(logits).all()
    maps = model.attention_maps(src, _batch([4, 4], bos=True))
    assert all(torch.isfinite(w).all() for ws in maps.values() for w in ws)


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_position_attends_to_the_future(variant: str) -> None:
    model = _model(variant).eval()
    src, tgt = _batch([6, 4]), _batch([7, 7], bos=True)
    before = model(src, tgt)
    changed = tgt.clone()
    changed[:, 4] = (changed[:, 4] + 1 - SPECIALS) % (V - SPECIALS) + SPECIALS
    after = model(src, changed)
    torch.testing.assert_close(after[:, :4], before[:, :4])
    assert not torch.allclose(after[:, 4:], before[:, 4:])


def test_fixnorm_rows_unit_norm_pad_row_included() -> None:
    model = _model("qknorm")
    norms = model.embed.table().norm(dim=-1)
    torch.testing.assert_close(norms, torch.ones(V))  # PAD too: a zero row would normalize with a ~1e12 gradient
    assert model.embed.weight.abs().max().item() <= 0.01  # U(-0.01, 0.01)
    assert model.embed.weight[PAD].abs().max().item() > 0.0
    emb = _model("prenorm_layernorm").embed
    assert math.isclose(emb.weight[SPECIALS:].std().item(), 32**-0.5, rel_tol=0.1)  # N(0, d^-0.5)


def test_fixnorm_table_cache_follows_weight_updates() -> None:
    model = kernels.accelerate(_model("qknorm")).eval()
    src, tgt = _batch([5]), _batch([4], bos=True)
    with torch.no_grad():
        first = model(src, tgt)
        assert model.embed.table() is model.embed.table()  # cached while decoding
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    model(src, tgt).logsumexp(-1).sum().backward()
    optimizer.step()  # still in eval mode: the version counter must invalidate the cache
    with torch.no_grad():
        torch.testing.assert_close(model.embed.table(), F.normalize(model.embed.weight, dim=-1))
        assert not torch.allclose(model(src, tgt), first)
        model.load_state_dict(_model("qknorm").state_dict())
        torch.testing.assert_close(model(src, tgt), first)


@pytest.mark.parametrize("variant", ["qknorm", "rmsnorm_post"])  # FixNorm's table, and the plain weight
def test_decoding_logits_under_autocast_cast_once_and_follow_updates(variant: str) -> None:
    model = kernels.accelerate(_model(variant, logit_mask=True)).eval()
    model.embed.set_logit_mask(torch.arange(V) != 7)
    h = torch.randn(3, 32)

    def autocast_logits() -> torch.Tensor:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return model.embed.logits(h)

    def reference() -> torch.Tensor:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return F.linear(h, model.embed.table(), model.embed.masked_bias(h))  # autocast's own casts, every call

    first = autocast_logits()
    cached = model.embed._cast_cache
    assert first.dtype == torch.bfloat16 and torch.equal(first, reference())
    assert autocast_logits() is not None and model.embed._cast_cache is cached  # cast once
    with torch.no_grad():
        model.embed.weight.mul_(2.0)  # in place, still in eval mode
        model.embed.output_bias.add_(1.0)
    model.embed.set_logit_mask(torch.arange(V) != 9)
    assert torch.equal(autocast_logits(), reference()) and model.embed._cast_cache is not cached
    model.train().eval()
    assert model.embed._cast_cache is None


@pytest.mark.skipif(not packed.available(torch.float32), reason="this PyTorch has no oneDNN packed linear")
def test_fp32_decoding_logits_pack_the_table_once_on_the_onednn_decoding_route(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The masked bias is built per call outside decoding; decoding keeps it (and the FixNorm table), so the
    output projection's fp32 pack is built once, and rebuilt when the weights change."""
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(fp32_gemm.ENV, "onednn")
    fp32_gemm._choice.cache_clear()
    try:
        model = kernels.accelerate(_model("qknorm", logit_mask=True)).eval()
        model.embed.set_logit_mask(torch.arange(V) != 7)
        h = torch.randn(3, 32)

        def reference() -> torch.Tensor:
            return F.linear(h, F.normalize(model.embed.weight, dim=-1), model.embed.masked_bias(h))

        with torch.no_grad():
            torch.testing.assert_close(model.embed.logits(h), reference(), atol=1e-5, rtol=1e-5)
            pack = linear._PACKS[model.embed].get(None, *model.embed._decoding_operands(
                model.embed.table(), torch.float32, h), torch.float32)
            model.embed.logits(h)
            assert linear._PACKS[model.embed].get(None, *model.embed._decoding_operands(
                model.embed.table(), torch.float32, h), torch.float32) is pack  # not rebuilt by the second step
            model.embed.weight.mul_(2.0)
            torch.testing.assert_close(model.embed.logits(h), reference(), atol=1e-5, rtol=1e-5)
    finally:
        fp32_gemm._choice.cache_clear()


def test_fixnorm_scales_inputs_by_sqrt_d() -> None:
    model = _model("qknorm").eval()
    tokens = torch.tensor([[5, 6, 7]])
    x = model.embed(tokens) - model.embed.positions[:3]
    torch.testing.assert_close(x.norm(dim=-1), torch.full((1, 3), math.sqrt(32)))


@pytest.mark.parametrize("variant", ["qknorm", "prenorm_layernorm"])
def test_embeddings_tied_one_storage(variant: str) -> None:
    model = _model(variant)
    vocab_tensors = [t for t in model.state_dict().values() if t.dim() == 2 and t.size(0) == V]
    assert len({t.data_ptr() for t in vocab_tensors}) == 1
    assert [p.shape for p in model.parameters() if p.dim() == 2 and p.size(0) == V] == [(V, 32)]
    # the same rows feed the source input, the target input and the output projection
    src, tgt = _batch([4]), _batch([3], bos=True)
    model(src, tgt).sum().backward()
    grad = model.embed.weight.grad
    assert grad is not None
    used = torch.cat([src.flatten(), tgt.flatten()]).unique()
    assert (grad[used[used != PAD]].abs().sum(-1) > 0).all()


def test_qknorm_gains_one_per_attention_module() -> None:
    model = _model("qknorm", enc_layers=6, dec_layers=6, length=72.0)
    gains = model.qknorm_gains()
    assert len(gains) == 18
    assert set(gains) == {f"encoder.{i}.self_attn" for i in range(6)} | {
        f"decoder.{i}.{kind}" for i in range(6) for kind in ("self_attn", "cross_attn")
    }
    for value in gains.values():
        assert math.isclose(value, math.log2(72 * 72 - 72), rel_tol=1e-6)
    assert _model("prenorm_layernorm").qknorm_gains() == {}


def test_qknorm_length_is_resolved_once_by_the_spec() -> None:
    """L comes from model.qknorm_length when set, else from the data (ModelSpec.resolve); build_model only reads it."""
    cfg = config.config_from_dict({"system": "qknorm", "model": TINY}).model
    with pytest.raises(NmtError, match="model.qknorm_length"):
        build_model(cfg, ModelSpec(V))
    from_cfg = config.config_from_dict({"system": "qknorm", "model": {**TINY, "qknorm_length": 10.0}}).model
    for model_cfg, data_length, length in [(from_cfg, None, 10.0), (from_cfg, 20.0, 10.0), (cfg, 20.0, 20.0)]:
        spec = ModelSpec.resolve(model_cfg, V, data_length)
        assert spec.qknorm_length == length
        gain = next(iter(build_model(model_cfg, spec).qknorm_gains().values()))
        assert math.isclose(gain, math.log2(length * length - length), rel_tol=1e-6)
    with pytest.raises(NmtError, match="must be > 1"):
        ModelSpec.resolve(cfg, V, 1.0)
    scaled = config.config_from_dict({"system": "prenorm_layernorm", "model": TINY}).model
    build_model(scaled, ModelSpec(V))  # no length needed without QKNorm


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_parameter_gets_a_gradient(variant: str) -> None:
    model = _model(variant, word_dropout=0.1, dropout=0.1).train()
    src, tgt = _batch([6, 4]), _batch([5, 3], bos=True)
    logits = model(src, tgt)
    F.cross_entropy(logits.flatten(0, 1), torch.randint(SPECIALS, V, (logits.shape[0] * logits.shape[1],))).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or p.grad.abs().sum().item() == 0]
    assert missing == []


def test_smallinit_and_xavier_closed_forms() -> None:
    small = _model("qknorm", d_model=32, d_ff=64)
    attn = small.encoder.layers[0].self_attn
    ffn = small.encoder.layers[0].ffn
    assert math.isclose(attn.in_proj.weight.std().item(), math.sqrt(2 / (5 * 32)), rel_tol=0.1)
    assert math.isclose(ffn.up.weight.std().item(), math.sqrt(2 / (32 + 64)), rel_tol=0.1)
    assert attn.in_proj.bias.abs().max().item() == 0.0 and ffn.down.bias.abs().max().item() == 0.0
    xavier = _model("qknorm", init="xavier")
    attn = xavier.decoder.layers[1].cross_attn
    assert attn.in_proj.weight.abs().max().item() <= math.sqrt(6 / (32 + 32))
    assert attn.in_proj.weight.abs().max().item() > 0.9 * math.sqrt(6 / (32 + 32))
    assert xavier.decoder.layers[0].ffn.up.weight.abs().max().item() <= math.sqrt(6 / (32 + 64))


def test_sinusoidal_positions_sin_even_cos_odd() -> None:
    table = sinusoidal_positions(50, 8)
    p = torch.arange(50, dtype=torch.float32)
    for i in range(4):
        freq = 10000 ** (-2 * i / 8)
        torch.testing.assert_close(table[:, 2 * i], torch.sin(p * freq))
        torch.testing.assert_close(table[:, 2 * i + 1], torch.cos(p * freq))


def test_word_dropout_replaces_only_ordinary_tokens() -> None:
    torch.manual_seed(0)
    tokens = torch.tensor([[BOS, 5, 6, 7, EOS, PAD], [BOS, 9, UNK, EOS, PAD, PAD]])
    dropped = word_dropout(tokens, 0.9999)
    special = tokens < SPECIALS
    assert torch.equal(dropped[special], tokens[special])
    assert (dropped[~special] == UNK).all()
    assert torch.equal(word_dropout(tokens, 0.0), tokens)
    model = _model(word_dropout=0.5).eval()
    src, tgt = _batch([6]), _batch([4], bos=True)
    torch.testing.assert_close(model(src, tgt), model(src, tgt))  # no word dropout at eval


def test_attention_maps_shapes() -> None:
    model = _model().eval()
    src, tgt = _batch([6, 4]), _batch([5, 5], bos=True)
    maps = model.attention_maps(src, tgt)
    assert [w.shape for w in maps["encoder"]] == [(2, 4, 6, 6)] * 2
    assert [w.shape for w in maps["decoder"]] == [(2, 4, 5, 5)] * 2
    assert [w.shape for w in maps["cross"]] == [(2, 4, 5, 6)] * 2
    assert maps["cross"][0][1, :, :, 4:].abs().max().item() == 0.0  # padded source keys get no weight


def test_too_long_input_is_an_error() -> None:
    model = _model(max_positions=8)
    assert model.max_positions == 8
    with pytest.raises(ValueError, match="max_positions"):
        model(_batch([9]), _batch([3], bos=True))


@pytest.mark.parametrize("variant", ["qknorm", "prenorm_fixnorm_scalenorm", "qk_rmsnorm"])
def test_bf16_autocast_forward_and_step(variant: str) -> None:
    model = _model(variant).eval()
    src, tgt = _batch([6, 4]), _batch([5, 5], bos=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(src, tgt)
        state = model.start(src)
        log_probs, state = model.step(tgt[:, 0], state)
        log_probs, state = model.step(tgt[:, 1], state)
    assert torch.isfinite(logits.float()).all()
    assert log_probs.dtype == torch.float32 and torch.isfinite(log_probs).all()
    reference = model(src, tgt).log_softmax(-1)[:, 1]
    assert (log_probs.exp() - reference.exp()).abs().max().item() < 0.05


@pytest.mark.parametrize("system", PRESETS)
def test_presets_forward_backward(system: str) -> None:
    model = _model(system, dropout=0.1, word_dropout=0.1).train()
    logits = model(_batch([5, 3]), _batch([4, 2], bos=True))
    assert logits.shape == (2, 4, V)
    logits.logsumexp(-1).sum().backward()


def _copy_task(batch: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lengths = torch.randint(3, 7, (batch,)).tolist()
    src = torch.full((batch, 7), PAD)
    tgt_in, tgt_out = src.clone(), src.clone()
    for i, n in enumerate(lengths):
        body = torch.randint(SPECIALS, vocab, (n,))
        src[i, : n + 1] = torch.cat([body, torch.tensor([EOS])])
        tgt_in[i, : n + 1] = torch.cat([torch.tensor([BOS]), body])
        tgt_out[i, : n + 1] = src[i, : n + 1]
    return src, tgt_in, tgt_out


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_tiny_model_learns_copy(variant: str) -> None:
    vocab = 20
    model = _model(variant, vocab=vocab, length=7.0).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    torch.manual_seed(3)
    losses: list[float] = []
    for _ in range(300):  # stops as soon as the loss has halved (about 60 steps)
        src, tgt_in, tgt_out = _copy_task(32, vocab)
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if len(losses) >= 10 and sum(losses[-5:]) < 0.5 * sum(losses[:5]):
            break
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.5 * first and last < math.log(vocab - SPECIALS), (first, last)
