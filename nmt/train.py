"""Training: :func:`train` runs a config to its stop rule; :class:`Trainer` is one run, built from the parts in
:mod:`nmt.training` (state, checkpoints, updates, evaluation, stop rules, the loop)."""

from nmt.training.loop import Trainer, train
from nmt.training.state import Progress
from nmt.training.updates import MAX_PENDING, PendingStep

__all__ = ["MAX_PENDING", "PendingStep", "Progress", "Trainer", "train"]
