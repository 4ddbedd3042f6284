"""Suite-wide settings: tiny models run fastest on one thread (and leave the other core to the rest)."""

from __future__ import annotations

import os

import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)
