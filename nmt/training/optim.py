"""Adam and the papers' learning-rate schedules.

Schedules are pure functions of the step (and, for ``warmup_plateau``, of a multiplier that only dev-BLEU
evaluations change; for ``linear_decay``, of the fraction of the run's budget spent, by steps or by wall time).
:class:`LRController` holds that multiplier and the evaluation history, and round-trips through
``state_dict`` so a resumed run follows the same schedule.

``warmup_plateau`` and its decay/stop rules follow the papers' official controller (``controller.py``,
``Controller.adjust_lr``, ``eval_and_decay`` and the stop test in ``train``, scheduler ``UPFLAT_WU``); the equality is
checked step by step in ``fidelity/schedule_checks.py`` and listed in ``docs/fidelity.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from nmt.config import TrainConfig


def peak_lr(cfg: TrainConfig, d_model: int) -> float:
    """``train.lr`` if set, else the papers' d_model^-0.5 * warmup^-0.5 (about 4.94e-4 for d=512, warmup 8000)."""
    if cfg.lr is not None:
        return cfg.lr
    return d_model ** -0.5 * max(cfg.warmup_steps, 1) ** -0.5


def inverse_sqrt(step: int, peak: float, warmup: int) -> float:
    """Linear warmup to ``peak`` over ``warmup`` steps, then ``peak * sqrt(warmup / step)``."""
    if warmup > 0 and step < warmup:
        return peak * step / warmup
    return peak * math.sqrt(max(warmup, 1) / max(step, 1))


def warmup_plateau(step: int, peak: float, warmup: int, multiplier: float = 1.0) -> float:
    """Linear warmup, then flat at the rate of the last warmup step; ``multiplier`` is the product of decays so far.

    As in the official controller, the rate of update ``step`` (1-based) is ``peak * step / warmup`` while
    ``step < warmup`` and is then left unchanged, so the plateau is ``peak * (warmup - 1) / warmup`` (0.0125% below
    ``peak`` for warmup 8000). Without warmup (``warmup <= 1``) the rate is ``peak`` from the first step.
    """
    if warmup <= 1:
        return peak * multiplier
    return peak * min(step, warmup - 1) / warmup * multiplier


def constant(step: int, peak: float, warmup: int, multiplier: float = 1.0) -> float:
    """``peak`` at every step (``warmup`` and ``multiplier`` ignored)."""
    return peak


def linear_decay(step: int, peak: float, warmup: int, multiplier: float = 1.0, used: float = 0.0) -> float:
    """Linear warmup to ``peak`` over ``warmup`` steps, times a linear decay to zero at the end of the budget.

    ``used`` is the fraction of the run's budget spent (:func:`budget_used`): the rate is
    ``peak * min(step / warmup, 1) * (1 - used)``, so it reaches zero when ``train.max_steps`` or
    ``train.max_minutes`` ends the run: the linear schedule that Li et al. 2020 ("Budgeted Training", arXiv
    1905.04753) found best at every budget. ``multiplier`` is ignored.
    """
    ramp = min(step / warmup, 1.0) if warmup > 0 else 1.0
    return peak * ramp * max(0.0, 1.0 - used)


SCHEDULES: dict[str, Callable[..., float]] = {
    "inverse_sqrt": lambda step, peak, warmup, multiplier=1.0: inverse_sqrt(step, peak, warmup),
    "warmup_plateau": warmup_plateau,
    "constant": constant,
    "linear_decay": linear_decay,
}
BUDGETED = frozenset({"linear_decay"})  # schedules that also take ``used``, the fraction of the budget spent


def budget_used(cfg: TrainConfig, step: int, seconds: float) -> float:
    """The fraction of the budget spent before update ``step`` (1-based), ``seconds`` into training: the larger of
    ``(step - 1) / train.max_steps`` and ``seconds / (60 * train.max_minutes)`` (each only when set), capped at 1,
    so under a step budget the last update still moves (rate ``peak / max_steps``)."""
    fractions = [max(step - 1, 0) / cfg.max_steps] if cfg.max_steps > 0 else []
    fractions += [seconds / (60.0 * cfg.max_minutes)] if cfg.max_minutes > 0 else []
    return min(max(fractions, default=0.0), 1.0)


class LRController:
    """The learning rate at each step, plus the plateau decay driven by dev BLEU."""

    def __init__(self, cfg: TrainConfig, d_model: int) -> None:
        self.cfg = cfg
        self.peak = peak_lr(cfg, d_model)
        self.multiplier = 1.0
        self.history: list[float] = []

    def lr(self, step: int, seconds: float = 0.0) -> float:
        """The rate of update ``step``; ``seconds``: wall time trained so far (only budgeted schedules use it)."""
        name = self.cfg.schedule
        schedule = SCHEDULES[name]
        if name in BUDGETED:
            return schedule(step, self.peak, self.cfg.warmup_steps, self.multiplier,
                            used=budget_used(self.cfg, step, seconds))
        return schedule(step, self.peak, self.cfg.warmup_steps, self.multiplier)

    def apply(self, optimizer: torch.optim.Optimizer, step: int, seconds: float = 0.0) -> float:
        rate = self.lr(step, seconds)
        for group in optimizer.param_groups:
            group["lr"] = rate
        return rate

    def observe(self, bleu: float, step: int) -> bool:
        """Record the dev BLEU measured after ``step`` updates; returns True when the plateau decay fired.

        The official rule (``eval_and_decay``): with ``warmup_plateau``, once warmup is over (``step >= warmup``),
        multiply the rate by ``decay`` when the new BLEU is strictly lower than every one of the previous
        ``patience`` evaluations (``bleu[-1] < min(bleu[-4:-1])``). Ties never decay; evaluations made during
        warmup count as history but never decay.
        """
        patience = self.cfg.patience
        previous = self.history[-patience:] if patience > 0 else []
        self.history.append(bleu)
        if self.cfg.schedule != "warmup_plateau" or step < self.cfg.warmup_steps:
            return False
        if not previous or len(previous) < patience or bleu >= min(previous):
            return False
        self.multiplier *= self.cfg.decay
        return True

    def exhausted(self, step: int) -> bool:
        """True once the plateau schedule's rate is below ``train.stop_lr`` after ``step > warmup`` updates.

        The official controller tests ``step > warmup_steps and lr < stop_lr`` after each evaluation; the rate only
        changes at an evaluation once warmup is over, so testing it before every update stops at the same step.
        """
        plateau = self.cfg.schedule == "warmup_plateau"
        return plateau and step > self.cfg.warmup_steps and self.lr(step) < self.cfg.stop_lr

    def state_dict(self) -> dict[str, Any]:
        return {"multiplier": self.multiplier, "history": list(self.history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.multiplier = float(state["multiplier"])
        self.history = [float(x) for x in state["history"]]


def build_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam with the config's betas and epsilon, using the fused kernel (CPU and CUDA)."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.Adam(params, lr=0.0, betas=cfg.adam_betas, eps=cfg.adam_eps, weight_decay=cfg.weight_decay,
                            fused=True)
