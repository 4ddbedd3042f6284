"""How long the papers' configuration of a pair would train on this machine (``make train SCALE=paper`` on a CPU)."""

from __future__ import annotations

from nmt.config import load_config
from nmt.experiments.pipeline import RunSpec
from nmt.experiments.typical_run import TYPICAL_EPOCHS, WARMUP_MULTIPLE, typical_run
from nmt.machine.runtime import setup, teardown
from nmt.perf.bench import make_trainer, time_training

__all__ = ["TYPICAL_EPOCHS", "WARMUP_MULTIPLE", "estimate_paper_hours"]


def estimate_paper_hours(spec: RunSpec) -> tuple[float, str]:
    """Hours the pair's paper configuration would train on this machine, from a few timed steps.

    Times a few updates of ``spec.config_path`` (with ``spec``'s overrides) on the prepared data, then extrapolates
    to a typical run: :data:`TYPICAL_EPOCHS` epochs, but at least :data:`WARMUP_MULTIPLE` x warmup_steps updates and
    at most ``train.max_epochs`` epochs (validation time not included).

    Returns:
        the hours, and a short detail string (s/update, updates/epoch, assumed updates).
    """
    cfg = load_config(spec.config_path, [*spec.overrides, "train.progress=false", "train.tensorboard=false"])
    runtime = setup(cfg.train.device, cfg.train.precision)
    try:
        trainer = make_trainer(cfg, runtime)
        timed = time_training(trainer, steps=3, warmup=1, repeats=1)
        per_epoch = max(len(trainer.epoch_batches(1)) // cfg.train.update_freq, 1)
    finally:
        teardown(runtime)
    seconds_per_update = 1.0 / timed["steps_per_s"]["median"]
    epochs, updates = typical_run(cfg, per_epoch)
    hours = updates * seconds_per_update / 3600
    detail = (f"{seconds_per_update:.2f} s/update measured, {per_epoch} updates/epoch, assuming {epochs} epochs = "
              f"{updates} updates")
    return hours, detail
