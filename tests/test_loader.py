"""The background batch loader hands out exactly the batches synchronous collation gives, collated ahead."""

from __future__ import annotations

import numpy as np
import torch

from nmt.data.batching import ParallelData, collate, make_batches
from nmt.training.loader import BatchLoader


def test_prefetched_batches_equal_synchronous_collation() -> None:
    rng = np.random.default_rng(0)
    rows = [rng.integers(4, 40, size=rng.integers(1, 12)) for _ in range(200)]
    data = ParallelData(rows, rows[::-1])
    batches = make_batches(*data.lengths(), max_tokens=64, seed=1, epoch=1)
    loader = BatchLoader(torch.device("cpu"))
    try:
        for start in range(0, len(batches) - 1, 2):  # update_freq 2, each call announcing the next update
            ahead = start + 2
            got = loader.get(data, (1, start), batches[start:ahead], (1, ahead), batches[ahead:ahead + 2])
            for batch, indices in zip(got, batches[start:ahead], strict=True):
                want = collate(data, indices)
                assert torch.equal(batch.src, want.src) and torch.equal(batch.tgt_out, want.tgt_out)
                assert (batch.n_src_tokens, batch.n_tgt_tokens) == (want.n_src_tokens, want.n_tgt_tokens)
        assert loader.hits == len(range(0, len(batches) - 1, 2)) - 1  # all but the first came from the thread
        other = loader.get(data, (2, 0), batches[:1])  # not the announced update: collated on the spot
        assert torch.equal(other[0].src, collate(data, batches[0]).src)
    finally:
        loader.close()
