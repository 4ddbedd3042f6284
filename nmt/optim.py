"""Adam and the papers' learning-rate schedules.

Schedules are pure functions of the step (and, for ``warmup_plateau``, of a multiplier that only dev-BLEU
evaluations change). :class:`LRController` holds that multiplier and the evaluation history, and round-trips through
``state_dict`` so a resumed run follows the same schedule.
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


def _warmup(step: int, warmup: int) -> float:
    return min(1.0, step / warmup) if warmup > 0 else 1.0


def inverse_sqrt(step: int, peak: float, warmup: int) -> float:
    """Linear warmup to ``peak`` over ``warmup`` steps, then ``peak * sqrt(warmup / step)``."""
    if warmup > 0 and step < warmup:
        return peak * step / warmup
    return peak * math.sqrt(max(warmup, 1) / max(step, 1))


def warmup_plateau(step: int, peak: float, warmup: int, multiplier: float = 1.0) -> float:
    """Linear warmup to ``peak``, then flat; ``multiplier`` is the product of plateau decays so far."""
    return peak * _warmup(step, warmup) * multiplier


def constant(step: int, peak: float, warmup: int, multiplier: float = 1.0) -> float:
    """``peak`` at every step (``warmup`` and ``multiplier`` ignored)."""
    return peak


SCHEDULES: dict[str, Callable[..., float]] = {
    "inverse_sqrt": lambda step, peak, warmup, multiplier=1.0: inverse_sqrt(step, peak, warmup),
    "warmup_plateau": warmup_plateau,
    "constant": constant,
}


class LRController:
    """The learning rate at each step, plus the plateau decay driven by dev BLEU."""

    def __init__(self, cfg: TrainConfig, d_model: int) -> None:
        self.cfg = cfg
        self.peak = peak_lr(cfg, d_model)
        self.multiplier = 1.0
        self.history: list[float] = []

    def lr(self, step: int) -> float:
        return SCHEDULES[self.cfg.schedule](step, self.peak, self.cfg.warmup_steps, self.multiplier)

    def apply(self, optimizer: torch.optim.Optimizer, step: int) -> float:
        rate = self.lr(step)
        for group in optimizer.param_groups:
            group["lr"] = rate
        return rate

    def observe(self, bleu: float) -> bool:
        """Record a dev BLEU; for ``warmup_plateau`` decay when it did not beat the best of the last ``patience``
        evaluations. Returns True when the decay fired."""
        previous = self.history[-self.cfg.patience:] if self.cfg.patience > 0 else []
        self.history.append(bleu)
        if self.cfg.schedule != "warmup_plateau" or len(previous) < self.cfg.patience or not previous:
            return False
        if bleu <= max(previous):
            self.multiplier *= self.cfg.decay
            return True
        return False

    def exhausted(self, step: int) -> bool:
        """True once the plateau schedule has decayed the rate (after warmup) below ``train.stop_lr``."""
        plateau = self.cfg.schedule == "warmup_plateau"
        return plateau and step >= self.cfg.warmup_steps and self.lr(step) < self.cfg.stop_lr

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
