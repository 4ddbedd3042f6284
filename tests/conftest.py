"""Suite-wide settings: tiny models run fastest on one thread (and leave the other core to the rest); a cache
directory of the run's own."""

from __future__ import annotations

import os
import tempfile

import pytest
import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)
# the fp32 GEMM probe's per-machine cache (nmt/machine/fp32_gemm.py): one for the whole run, its subprocesses included,
# so every process of the suite takes the same route, and none in the user's home
os.environ["NMT_CACHE_DIR"] = tempfile.mkdtemp(prefix="nmt-test-cache-")


@pytest.fixture(autouse=True)
def _no_real_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests download only from the loopback servers they start: no default host, no $NMT_MIRROR."""
    from nmt.data import catalog

    monkeypatch.setattr(catalog, "DEFAULT_URLS", {})
    monkeypatch.delenv(catalog.MIRROR_ENV, raising=False)
