"""Decoding several batches at once: ``workers`` threads, one intra-op thread each.

A beam-search step on a CPU is hundreds of small operations between a few matmuls; with the cores given to one
batch (intra-op threads) most of those operations leave all but one core idle. Decoding ``workers`` batches side by
side, each on one core, keeps more of them busy (CTranslate2's ``inter_threads``; fairseq has no counterpart).
torch's operations release the GIL but the Python between them does not, so two threads decode 1.4-1.55x as fast as
one, not 2x: on a CPU a translator loaded from checkpoints hands each batch to a decoding process instead
(:mod:`nmt.inference.processes`), and the threads here only wait for them. Each batch is decoded exactly as alone on
one thread, so the result does not depend on which worker took it or when; memory grows with the batches in flight.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

from nmt.errors import NmtError

T = TypeVar("T")
R = TypeVar("R")


def check_workers(workers: int) -> int:
    """``workers`` if it is at least 1, else a one-line error naming the flag."""
    if workers < 1:
        raise NmtError(f"--workers {workers} must be at least 1")
    return workers


@contextlib.contextmanager
def intra_op_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` inside, restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def map_ordered(fn: Callable[[T], R], items: Sequence[T], workers: int) -> Iterator[tuple[T, R]]:
    """``(item, fn(item))`` in the order of ``items``; with ``workers`` > 1, ``fn`` runs in that many threads with
    one intra-op thread each (the process's thread count is restored after). An error in any call is raised here
    and the calls not yet started are cancelled."""
    check_workers(workers)
    if workers == 1 or len(items) < 2:
        for item in items:
            yield item, fn(item)
        return
    with intra_op_threads(1):
        pool = ThreadPoolExecutor(max_workers=min(workers, len(items)), thread_name_prefix="nmt-decode")
        try:
            futures = [pool.submit(fn, item) for item in items]
            for item, future in zip(items, futures, strict=True):
                yield item, future.result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
