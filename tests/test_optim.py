"""Schedules at known steps, the plateau decay and its stop, and the loss against its closed form."""

from __future__ import annotations

import math

import pytest
import torch

from nmt.config import TrainConfig
from nmt.training.loss import label_smoothed_nll
from nmt.training.optim import LRController, budget_used, inverse_sqrt, linear_decay, peak_lr, warmup_plateau
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
    # The official controller sets the rate only while step < warmup, so the plateau keeps the rate of step 7999.
    assert warmup_plateau(4000, 1e-3, 8000) == pytest.approx(5e-4)
    assert warmup_plateau(7999, 1e-3, 8000) == pytest.approx(1e-3 * 7999 / 8000, rel=1e-12)
    assert warmup_plateau(8000, 1e-3, 8000) == warmup_plateau(7999, 1e-3, 8000)
    assert warmup_plateau(80000, 1e-3, 8000) == warmup_plateau(7999, 1e-3, 8000)
    assert warmup_plateau(80000, 1e-3, 8000, multiplier=0.8) == pytest.approx(0.8e-3 * 7999 / 8000, rel=1e-12)
    assert warmup_plateau(1, 1e-3, 2) == warmup_plateau(5, 1e-3, 2) == pytest.approx(5e-4)
    assert warmup_plateau(1, 1e-3, 1) == warmup_plateau(3, 1e-3, 0) == 1e-3  # no warmup: flat from the start


def plateau(warmup: int = 10, patience: int = 3) -> LRController:
    return LRController(TrainConfig(schedule="warmup_plateau", lr=1e-3, warmup_steps=warmup, decay=0.5,
                                    patience=patience, stop_lr=2e-4), 512)


def test_plateau_decays_only_below_every_previous_evaluation() -> None:
    ctl = plateau()
    assert [ctl.observe(b, 100) for b in (10.0, 12.0, 13.0)] == [False, False, False]  # too few evaluations yet
    assert ctl.observe(14.0, 100) is False  # improved
    assert ctl.observe(12.0, 100) is False  # below 13 and 14 but equal to 12 (three back): no decay
    assert ctl.observe(12.5, 100) is False  # below 13 and 14, not below 12
    assert ctl.observe(11.8, 100) is True  # below 14, 12 and 12.5: decay
    assert ctl.lr(100) == pytest.approx(0.5e-3 * 9 / 10)
    assert ctl.observe(11.8, 100) is False  # a tie with the previous one
    restored = plateau()
    restored.load_state_dict(ctl.state_dict())
    assert restored.lr(100) == ctl.lr(100) and restored.history == ctl.history


def test_equal_bleu_never_decays() -> None:
    # The old rule (decay unless the new BLEU beats the best of the last three) decayed at every one of these.
    ctl = plateau()
    assert not any(ctl.observe(0.0, step) for step in range(10, 200, 10))
    assert ctl.multiplier == 1.0


def test_no_decay_during_warmup_but_warmup_evaluations_are_history() -> None:
    ctl = plateau(warmup=100)
    assert not any(ctl.observe(b, step) for b, step in ((5.0, 20), (4.0, 40), (3.0, 60), (2.0, 80), (1.0, 99)))
    assert ctl.multiplier == 1.0
    assert ctl.observe(0.5, 100) is True  # first evaluation at step == warmup: compares with 3.0, 2.0, 1.0


def test_stop_only_after_warmup_and_below_stop_lr() -> None:
    ctl = plateau(warmup=10)
    ctl.multiplier = 0.1  # plateau 1e-3 * 0.9 * 0.1 < stop_lr 2e-4
    assert not ctl.exhausted(5) and not ctl.exhausted(10)  # official: step > warmup_steps
    assert ctl.exhausted(11)
    ctl.multiplier = 0.25  # 2.25e-4 >= 2e-4
    assert not ctl.exhausted(11)


def test_other_schedules_never_decay() -> None:
    ctl = LRController(TrainConfig(schedule="inverse_sqrt", lr=1e-3, warmup_steps=10), 512)
    for bleu in (5.0, 4.0, 3.0, 2.0, 1.0):
        assert ctl.observe(bleu, 100) is False
    assert ctl.lr(40) == pytest.approx(5e-4) and not ctl.exhausted(10**6)


def test_linear_decay_values() -> None:
    assert linear_decay(0, 1e-3, 100) == 0.0
    assert linear_decay(50, 1e-3, 100) == pytest.approx(5e-4)  # warmup ramp, nothing spent
    assert linear_decay(100, 1e-3, 100, used=0.25) == pytest.approx(7.5e-4)
    assert linear_decay(500, 1e-3, 0, used=0.5) == pytest.approx(5e-4)  # no warmup
    assert linear_decay(500, 1e-3, 100, used=1.0) == 0.0 == linear_decay(500, 1e-3, 100, used=1.2)


def test_budget_is_the_larger_of_steps_and_minutes() -> None:
    assert budget_used(TrainConfig(max_steps=1000), 251, 1e6) == pytest.approx(0.25)  # no time limit: steps only
    assert budget_used(TrainConfig(max_minutes=10), 10**6, 150.0) == pytest.approx(0.25)  # time only
    both = TrainConfig(max_steps=1000, max_minutes=10)
    assert budget_used(both, 251, 300.0) == pytest.approx(0.5)  # half the time gone: the time limit ends it first
    assert budget_used(both, 801, 300.0) == pytest.approx(0.8)
    assert budget_used(both, 2000, 0.0) == 1.0 and budget_used(TrainConfig(), 5, 5.0) == 0.0


def test_linear_decay_follows_the_wall_clock() -> None:
    ctl = LRController(TrainConfig(schedule="linear_decay", lr=1e-3, warmup_steps=10, max_minutes=60), 512)
    assert ctl.lr(20, seconds=0.0) == pytest.approx(1e-3)
    assert ctl.lr(20, seconds=900.0) == pytest.approx(7.5e-4)  # a quarter of the hour spent
    assert ctl.lr(20, seconds=3600.0) == 0.0
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
    assert ctl.apply(optimizer, 5, seconds=1800.0) == pytest.approx(2.5e-4)  # ramp 5/10 x half the budget left
    assert optimizer.param_groups[0]["lr"] == pytest.approx(2.5e-4)
    steps = LRController(TrainConfig(schedule="linear_decay", lr=1e-3, warmup_steps=0, max_steps=100), 512)
    # no time limit: the fraction spent before each update, so update 100 of 100 still moves
    assert [steps.lr(s, seconds=1e9) for s in (1, 51, 100, 101)] == pytest.approx([1e-3, 5e-4, 1e-5, 0.0])


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
