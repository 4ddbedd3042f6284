"""Schedules at known steps, the plateau decay and its stop, and the loss against its closed form."""

from __future__ import annotations

import math

import pytest
import torch

from nmt.config import TrainConfig
from nmt.loss import label_smoothed_nll
from nmt.optim import LRController, inverse_sqrt, peak_lr, warmup_plateau
from nmt.vocab import PAD


def test_default_peak_is_the_papers_rate() -> None:
    assert peak_lr(TrainConfig(), 512) == pytest.approx(512 ** -0.5 * 8000 ** -0.5)
    assert peak_lr(TrainConfig(), 512) == pytest.approx(4.94e-4, rel=1e-3)
    assert peak_lr(TrainConfig(lr=1e-3), 512) == 1e-3


def test_inverse_sqrt_values() -> None:
    assert inverse_sqrt(0, 1e-3, 1000) == 0.0
    assert inverse_sqrt(500, 1e-3, 1000) == pytest.approx(5e-4)
    assert inverse_sqrt(1000, 1e-3, 1000) == pytest.approx(1e-3)
    assert inverse_sqrt(4000, 1e-3, 1000) == pytest.approx(5e-4)


def test_warmup_plateau_values() -> None:
    assert warmup_plateau(4000, 1e-3, 8000) == pytest.approx(5e-4)
    assert warmup_plateau(8000, 1e-3, 8000) == pytest.approx(1e-3)
    assert warmup_plateau(80000, 1e-3, 8000) == pytest.approx(1e-3)
    assert warmup_plateau(80000, 1e-3, 8000, multiplier=0.8) == pytest.approx(8e-4)


def test_plateau_decay_fires_and_stops_training() -> None:
    cfg = TrainConfig(schedule="warmup_plateau", lr=1e-3, warmup_steps=10, decay=0.5, patience=3, stop_lr=2e-4)
    ctl = LRController(cfg, 512)
    assert [ctl.observe(b) for b in (10.0, 12.0, 13.0)] == [False, False, False]  # too few evaluations yet
    assert ctl.observe(14.0) is False  # beat the best of the last three
    assert ctl.observe(13.5) is True and ctl.lr(100) == pytest.approx(5e-4)
    assert not ctl.exhausted(100)
    assert ctl.observe(12.0) is True and ctl.observe(11.0) is True  # 2.5e-4 then 1.25e-4
    assert ctl.lr(100) == pytest.approx(1.25e-4) and ctl.exhausted(100)
    assert not ctl.exhausted(5)  # never during warmup
    restored = LRController(cfg, 512)
    restored.load_state_dict(ctl.state_dict())
    assert restored.lr(100) == ctl.lr(100) and restored.history == ctl.history


def test_other_schedules_never_decay() -> None:
    ctl = LRController(TrainConfig(schedule="inverse_sqrt", lr=1e-3, warmup_steps=10), 512)
    for bleu in (5.0, 4.0, 3.0, 2.0, 1.0):
        assert ctl.observe(bleu) is False
    assert ctl.lr(40) == pytest.approx(5e-4) and not ctl.exhausted(10**6)


def test_label_smoothed_loss_closed_form() -> None:
    logits = torch.tensor([[[2.0, 0.5, -1.0, 0.0], [0.1, 0.2, 0.3, 0.4]]])
    target = torch.tensor([[2, PAD]])
    eps = 0.1
    loss, nll = label_smoothed_nll(logits, target, eps)
    lp = torch.log_softmax(logits[0, 0], -1)
    assert nll.item() == pytest.approx(-lp[2].item())
    assert loss.item() == pytest.approx((1 - eps) * -lp[2].item() + eps * -lp.mean().item())
    loss0, nll0 = label_smoothed_nll(logits, target, 0.0)
    assert loss0.item() == pytest.approx(nll0.item()) and math.isfinite(loss0.item())
