"""The stop rules of a run, decided on rank 0's view and broadcast, so every rank stops at the same update."""

from __future__ import annotations

import time

from nmt.machine.runtime import broadcast_floats
from nmt.training.state import RunState


def stop_reason(run: RunState, stop_signal: int, started: float, start_seconds: float) -> str:
    """Why the run stops before its next update ("" to go on): a signal, ``train.max_steps``, ``max_epochs``,
    ``max_minutes`` (``start_seconds`` trained before this process began at ``started``), early stopping, or the
    learning rate below ``train.stop_lr``."""
    p, t = run.progress, run.cfg.train
    reasons = [
        (stop_signal != 0, "interrupted"),
        (t.max_steps > 0 and p.step >= t.max_steps, f"reached train.max_steps={t.max_steps}"),
        (p.epoch > t.max_epochs, f"reached train.max_epochs={t.max_epochs}"),
        (t.max_minutes > 0 and start_seconds + time.time() - started >= 60 * t.max_minutes,
         f"reached train.max_minutes={t.max_minutes}"),
        (t.early_stop > 0 and p.evals_since_best >= t.early_stop,
         f"no dev BLEU improvement in {t.early_stop} evaluations"),
        (run.lr.exhausted(p.step), f"learning rate fell below train.stop_lr={t.stop_lr}"),
    ]
    codes = broadcast_floats(run.rt, [float(flag) for flag, _ in reasons])
    return next((text for code, (_, text) in zip(codes, reasons, strict=True) if code), "")
