"""Suite-wide settings: tiny models run fastest on one thread (and leave the other core to the rest)."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _no_real_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests download only from the loopback servers they start: no default host, no $NMT_MIRROR."""
    from nmt.data import catalog

    monkeypatch.setattr(catalog, "DEFAULT_URLS", {})
    monkeypatch.delenv(catalog.MIRROR_ENV, raising=False)
