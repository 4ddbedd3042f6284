"""The official models' options (issue 17): a language embedding per side, the target-vocabulary logit mask with
label smoothing over the kept types, the FixNorm PAD row, and the pair configs' dropout sites."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from nmt import config
from nmt.config import config_to_dict, load_config
from nmt.model.spec import ModelSpec
from nmt.model.transformer import Transformer, build_model
from nmt.modules.attention import MultiHeadAttention
from nmt.modules.feedforward import FeedForward
from nmt.search import beam_search
from nmt.training.data import target_vocabulary
from nmt.training.loss import label_smoothed_nll
from nmt.vocab import BOS, EOS, PAD, SPECIALS, UNK

V = 40
TINY: dict[str, Any] = dict(enc_layers=2, dec_layers=2, d_model=32, d_ff=64, n_heads=4, dropout=0.0,
                            word_dropout=0.0, max_positions=128)
CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PAPER_PAIRS = ["gl-en", "sk-en", "en-vi", "en-he", "ar-en"]


def _model(system: str = "qknorm", keep: torch.Tensor | None = None, **model: Any) -> Transformer:
    cfg = config.config_from_dict({"system": system, "model": {**TINY, **model}})
    torch.manual_seed(0)
    return build_model(cfg.model, ModelSpec(V, 12.0, logit_mask=keep))


def _batch(lengths: list[int], bos: bool = False) -> torch.Tensor:
    out = torch.full((len(lengths), max(lengths)), PAD)
    for i, n in enumerate(lengths):
        body = torch.randint(SPECIALS, V, (n - 1,))
        out[i, :n] = torch.cat([torch.tensor([BOS]), body]) if bos else torch.cat([body, torch.tensor([EOS])])
    return out


def _keep() -> torch.Tensor:
    keep = torch.zeros(V, dtype=torch.bool)
    keep[[UNK, EOS, *range(SPECIALS, 20)]] = True
    return keep


def _first_step_gnorm(model: Transformer) -> float:
    torch.manual_seed(3)
    src, tgt = _batch([7, 4, 9]), _batch([6, 3, 6], bos=True)
    out = torch.cat([tgt[:, 1:], torch.full((3, 1), PAD)], 1)
    out[torch.arange(3), tgt.ne(PAD).sum(1) - 1] = EOS
    loss, _ = label_smoothed_nll(model.train()(src, tgt), out, 0.1, model.logit_mask)
    (loss / out.ne(PAD).sum()).backward()
    return float(torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")))


@pytest.mark.parametrize("system", ["qknorm", "prenorm_fixnorm_scalenorm"])
def test_fixnorm_first_step_gradient_norm_is_bounded(system: str) -> None:
    assert _first_step_gnorm(_model(system)) < 1e3
    zero_pad = _model(system)  # the old initialization, for contrast: a zero row normalized by eps ~ 1e-12
    with torch.no_grad():
        zero_pad.embed.weight[PAD].zero_()
    assert _first_step_gnorm(zero_pad) > 1e6


def test_language_embedding_rows_per_side() -> None:
    model = _model(lang_embedding=True).eval()
    lang = model.embed.lang_embedding
    assert lang is not None and lang.shape == (2, 32)
    tokens = torch.tensor([[5, 6, 7]])
    plain = model.embed(tokens, side=0) - lang[0]
    torch.testing.assert_close(model.embed(tokens, side=1) - lang[1], plain)
    assert not torch.allclose(lang[0], lang[1])
    # every source token gets row 0: the gradient of row 0 is the sum of the encoder-input gradients
    model.train()
    src, tgt = _batch([5, 3]), _batch([4, 4], bos=True)
    model(src, tgt).sum().backward()
    assert lang.grad is not None and (lang.grad.abs().sum(-1) > 0).all()
    assert _model().embed.lang_embedding is None


def test_target_vocabulary_is_training_targets_plus_unk_and_eos() -> None:
    keep = target_vocabulary([np.array([5, 7, 7]), np.array([9], dtype=np.int32)], 12)
    assert keep.dtype == torch.bool
    assert keep.nonzero().flatten().tolist() == [UNK, EOS, 5, 7, 9]
    assert not keep[PAD] and not keep[BOS]


def test_logit_mask_sets_masked_logits_and_never_decodes_them() -> None:
    keep = _keep()
    model = _model(logit_mask=True, keep=keep).eval()
    assert model.logit_mask is not None and torch.equal(model.logit_mask, keep)
    src, tgt = _batch([6, 5]), _batch([4, 4], bos=True)
    logits = model(src, tgt)
    assert (logits[..., ~keep] == -1e9).all()
    assert (logits[..., keep].abs() < 1e3).all()
    unmasked = _model(logit_mask=False).eval()(src, tgt)
    torch.testing.assert_close(logits[..., keep], unmasked[..., keep])  # the kept logits are untouched
    for hyps in beam_search(model, src, beam=3, nbest=3, max_len_b=8):
        for hyp in hyps:
            assert all(keep[t] for t in hyp.tokens)


def test_logit_mask_smooths_over_kept_types_only() -> None:
    keep = _keep()
    torch.manual_seed(0)
    raw = torch.randn(2, 3, V)
    logits = raw.masked_fill(~keep, -1e9)
    target = torch.tensor([[5, 6, EOS], [7, PAD, PAD]])
    eps = 0.1
    loss, nll = label_smoothed_nll(logits, target, eps, keep)
    lp = F.log_softmax(raw[..., keep], dim=-1)  # the distribution over the kept types alone
    ids = {int(t): i for i, t in enumerate(keep.nonzero().flatten())}
    expect_nll = expect_smooth = 0.0
    for b, t in [(0, 0), (0, 1), (0, 2), (1, 0)]:
        expect_nll -= float(lp[b, t, ids[int(target[b, t])]])
        expect_smooth -= float(lp[b, t].mean())
    assert nll.item() == pytest.approx(expect_nll, rel=1e-5)
    assert loss.item() == pytest.approx((1 - eps) * expect_nll + eps * expect_smooth, rel=1e-5)
    # a target outside the mask adds nothing (official: log_softmax * logit_mask)
    masked_target = torch.tensor([[5, 6, EOS], [30, PAD, PAD]])
    _, nll_masked = label_smoothed_nll(logits, masked_target, eps, keep)
    assert nll_masked.item() == pytest.approx(expect_nll + float(lp[1, 0, ids[7]]), rel=1e-5)


def test_logit_mask_blocks_gradients_to_masked_types() -> None:
    keep = _keep()
    model = _model(logit_mask=True, keep=keep)
    _first_step_gnorm(model)
    assert model.embed.output_bias.grad is not None
    assert (model.embed.output_bias.grad[~keep] == 0).all()
    assert (model.embed.output_bias.grad[keep] != 0).any()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_masked_logits_stay_finite_under_autocast(dtype: torch.dtype) -> None:
    model = _model(logit_mask=True, keep=_keep()).eval()
    src, tgt = _batch([6]), _batch([4], bos=True)
    with torch.autocast("cpu", dtype=dtype):
        logits = model(src, tgt)
    assert torch.isfinite(logits).all()
    assert (logits[..., ~_keep()].float() < -3e4).all()
    loss, _ = label_smoothed_nll(logits, torch.tensor([[5, 6, 7, EOS]]), 0.1, model.logit_mask)
    assert torch.isfinite(loss)


def test_logit_mask_round_trips_through_a_checkpoint_and_old_ones_still_load() -> None:
    cfg = config.config_from_dict({"system": "qknorm", "model": {**TINY, "logit_mask": True, "lang_embedding": True}})
    state = build_model(cfg.model, ModelSpec(V, 12.0, logit_mask=_keep())).state_dict()
    # what restore_model does: rebuild from the checkpoint's config alone (no data), then load the state
    restored = build_model(config.config_from_dict(config_to_dict(cfg)).model, ModelSpec(V, 12.0))
    assert restored.logit_mask is not None and restored.logit_mask.all()
    restored.load_state_dict(state)
    assert torch.equal(restored.logit_mask, _keep())
    old_cfg = config_to_dict(config.config_from_dict({"system": "qknorm", "model": TINY}))
    for key in ("logit_mask", "lang_embedding"):  # a checkpoint written before these options existed
        del old_cfg["model"][key]
    old = build_model(config.config_from_dict(old_cfg).model, ModelSpec(V, 12.0))
    assert old.logit_mask is None and old.embed.lang_embedding is None
    old.load_state_dict(_model().state_dict())


@pytest.mark.parametrize("pair", PAPER_PAIRS)
def test_paper_configs_use_the_official_dropout_sites_and_options(pair: str) -> None:
    cfg = load_config(CONFIGS / f"{pair}.yaml")
    m = cfg.model
    assert m.attn_dropout == m.act_dropout == m.dropout == (0.4 if pair == "gl-en" else 0.3)
    assert m.lang_embedding and m.logit_mask
    model = build_model(m.__class__(**{**m.__dict__, "d_model": 32, "d_ff": 64, "n_heads": 4}), ModelSpec(V, 12.0))
    attention = [mod for mod in model.modules() if isinstance(mod, MultiHeadAttention)]
    assert attention and all(a.dropout == m.dropout for a in attention)
    assert all(f.act_dropout == m.dropout for f in model.modules() if isinstance(f, FeedForward))


def test_training_stores_the_data_target_vocabulary_and_decoding_respects_it(tmp_path: Path) -> None:
    from nmt.checkpoint.files import load_checkpoint
    from nmt.inference.restore import restore_model
    from nmt.training.data import load_training_data
    from nmt.training.loop import train
    from tests.synthetic import prepare_synthetic, tiny_config

    tree = tiny_config(prepare_synthetic(tmp_path / "synthetic"), tmp_path / "run", max_steps=30, eval_every=30)
    tree["model"].update(logit_mask=True, lang_embedding=True, attn_dropout=0.1, act_dropout=0.1)
    cfg = config.config_from_dict(tree)
    train(cfg)
    keep = load_training_data(cfg).spec.logit_mask
    assert 0 < int(keep.sum()) < keep.numel() - 10  # the source-only pieces of the synthetic pair are masked
    model, _, tokenizer = restore_model(load_checkpoint(tmp_path / "run" / "checkpoint_last.pt"))
    assert model.logit_mask is not None and torch.equal(model.logit_mask, keep)
    src = torch.tensor([tokenizer.encode("ka lo mi") + [EOS]])
    for hyp in beam_search(model, src, beam=4, nbest=4, max_len_b=8)[0]:
        assert all(keep[t] for t in hyp.tokens)
