"""The length of a "typical" paper-scale run, for estimates of its training time."""

from __future__ import annotations

import math

from nmt.config import Config

# A "typical" paper-scale run (the papers train until the learning rate has decayed below stop_lr on dev-BLEU
# plateaus, or max_epochs, which has no closed form): 50 epochs, but never fewer than 3 x warmup_steps updates (the
# warmup itself plus the plateau decays that follow it; gl-en's 8000 warmup steps are already ~80 of its epochs),
# and never more than train.max_epochs. Used by nmt.experiments.paper_hours,
# scripts/gpu_check and scripts/train_pair.
TYPICAL_EPOCHS = 50
WARMUP_MULTIPLE = 3


def typical_run(cfg: Config, per_epoch: int) -> tuple[int, int]:
    """``(epochs, updates)`` of a typical run of ``cfg`` with ``per_epoch`` updates per epoch: :data:`TYPICAL_EPOCHS`,
    at least :data:`WARMUP_MULTIPLE` x warmup_steps updates, at most ``train.max_epochs``."""
    epochs = min(max(TYPICAL_EPOCHS, math.ceil(WARMUP_MULTIPLE * cfg.train.warmup_steps / per_epoch)),
                 cfg.train.max_epochs)
    return epochs, epochs * per_epoch


def typical_run_of(cfg: Config) -> tuple[int, int, int]:
    """``(updates per epoch, epochs, updates)`` of a typical run of ``cfg`` on its prepared data (see
    :func:`typical_run`)."""
    from nmt.data.batching import make_batches
    from nmt.training.data import load_training_data

    src_lens, tgt_lens = load_training_data(cfg).train.lengths()
    batches = make_batches(src_lens, tgt_lens, cfg.train.max_tokens, cfg.train.seed, 1)
    per_epoch = max(len(batches) // cfg.train.update_freq, 1)
    return (per_epoch, *typical_run(cfg, per_epoch))

