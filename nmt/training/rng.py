"""Capture and restore every random number generator, as ``weights_only``-loadable tensors and plain values."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def capture() -> dict[str, Any]:
    """RNG states of python, numpy, torch and (when present) CUDA."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached": float(cached)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _host(tensor: torch.Tensor) -> torch.Tensor:
    """A plain CPU copy: generators take their state only as CPU byte tensors, and ``.numpy()`` needs host memory,
    but a checkpoint loaded with ``map_location`` (or by an older version) may hold the states on an accelerator."""
    return tensor.detach().cpu()


def restore(state: dict[str, Any]) -> None:
    """Restore what :func:`capture` returned, wherever ``torch.load`` put its tensors."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    keys = _host(n["keys"]).numpy().astype(np.uint32)
    np.random.set_state((n["kind"], keys, int(n["pos"]), int(n["has_gauss"]), float(n["cached"])))
    torch.set_rng_state(_host(state["torch"]))
    if "cuda" in state and torch.cuda.is_available():  # a run resumed on fewer GPUs restores the ones it has
        for index, cuda_state in enumerate(state["cuda"][:torch.cuda.device_count()]):
            torch.cuda.set_rng_state(_host(cuda_state), index)
