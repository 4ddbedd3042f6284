"""Training batches collated one update ahead in a background thread, into pinned memory on CUDA.

Collation (padding numpy rows into tensors) is host work that would otherwise leave the GPU idle between updates;
here it overlaps the previous update's GPU work, and the host-to-device copies run asynchronously from page-locked
memory. The batches are a pure function of the indices, so prefetching changes no result: a resumed or interrupted
run sees exactly the batches of an uninterrupted one.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from nmt.data.batching import Batch, ParallelData, collate

Key = tuple[int, int]  # (epoch, first batch of the update)


class BatchLoader:
    """Hands out the batches of one update on ``device`` and starts collating the next one (of the same epoch).

    Args:
        device: where the batches go; on CUDA they are pinned before the copy.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pin = device.type == "cuda"
        # pinning from another thread must not create a context on cuda:0 for a process that trains on cuda:N
        setup = (lambda: torch.cuda.set_device(device)) if self.pin else None
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nmt-collate", initializer=setup)
        self.ahead: tuple[Key, Future[list[Batch]]] | None = None
        self.hits = 0  # updates whose batches were ready from the background thread

    def collate(self, data: ParallelData, chunk: list[np.ndarray]) -> list[Batch]:
        batches = [collate(data, indices) for indices in chunk]
        return [b.pin_memory() for b in batches] if self.pin else batches

    def get(self, data: ParallelData, key: Key, chunk: list[np.ndarray], next_key: Key | None = None,
            next_chunk: list[np.ndarray] | None = None) -> list[Batch]:
        """The batches of ``chunk`` (indices into ``data``, the epoch's pairs; collated ahead if the previous call
        announced ``key``) on the device; then collate ``next_chunk`` (also of ``data``) in the background."""
        if self.ahead is not None and self.ahead[0] == key:
            host = self.ahead[1].result()
            self.hits += 1
        else:
            if self.ahead is not None:
                self.ahead[1].cancel()
            host = self.collate(data, chunk)
        self.ahead = None
        if next_key is not None and next_chunk:
            self.ahead = (next_key, self.pool.submit(self.collate, data, next_chunk))
        return [b.to(self.device) for b in host]

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
