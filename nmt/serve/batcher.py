"""Dynamic batching: the sentences of requests that arrive within a few milliseconds decode as one batch.

Requests wait in a queue; the batcher takes the first, gathers those that follow it each within ``window`` seconds
of the one before (up to ``max_sentences``; ten windows at most), groups them by their decoding options and hands
each group to ``translate`` in one call, on one thread that waits for the decoding processes (the service decodes in
processes, ``--workers`` of them, never in the event loop's process: :func:`nmt.serve.app.decode_request`). While a
batch decodes, new requests queue up and form the next one, so under load batches grow toward the command line's.
A call that fails (a decoding process died) fails the requests of that group only, with :class:`DecodingFailed`;
the next batch goes on (the translator replaces its processes).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from nmt.errors import NmtError

Hypotheses = list[list[tuple[str, float]]]
GATHER_WINDOWS = 10  # a batch gathers for at most this many windows after its first request
Translate = Callable[[Sequence[str], Any], Hypotheses]


class DecodingFailed(Exception):
    """The batch holding a request could not be decoded (its one-line reason)."""


@dataclass
class Waiting:
    lines: list[str]
    key: Any
    future: asyncio.Future[Hypotheses]
    queued: float = field(default_factory=time.perf_counter)


class DynamicBatcher:
    """Runs ``translate(lines, key)`` over the gathered lines of concurrent :meth:`submit` calls."""

    def __init__(self, translate: Translate, window: float = 0.005, max_sentences: int = 256) -> None:
        self.translate, self.window, self.max_sentences = translate, window, max_sentences
        self.queue: asyncio.Queue[Waiting] = asyncio.Queue()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nmt-serve-decode")
        self.task: asyncio.Task[None] | None = None
        self.pending = 0  # sentences queued or decoding
        self.batches = 0  # batches decoded so far (a group of one gathering counts as one)
        self.decoded = 0  # sentences in them

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Finish what is queued, then stop (the service's shutdown, after its last request was answered)."""
        while self.pending:
            await asyncio.sleep(0.01)
        if self.task is not None:
            self.task.cancel()
        self.executor.shutdown(wait=True)

    async def submit(self, lines: list[str], key: Any) -> Hypotheses:
        """The n-best lists of ``lines`` decoded with the options ``key`` stands for, once their batch is done."""
        future: asyncio.Future[Hypotheses] = asyncio.get_running_loop().create_future()
        self.pending += len(lines)
        await self.queue.put(Waiting(lines, key, future))
        try:
            return await future
        finally:
            self.pending -= len(lines)

    async def _gather(self) -> list[Waiting]:
        """The first request, then every one that follows the one before within ``window`` (up to
        ``max_sentences``, and no longer than ``GATHER_WINDOWS`` windows after the first): the burst of requests that
        clients send as a batch's answers reach them joins one batch, where a fixed deadline from the first would
        cut it (measured at 64 clients: 48 sentences per batch with a deadline, 62 with gaps; docs/usage.md)."""
        loop = asyncio.get_running_loop()
        batch = [await self.queue.get()]
        size, deadline = len(batch[0].lines), loop.time() + GATHER_WINDOWS * self.window
        while size < self.max_sentences:
            try:
                item = self.queue.get_nowait() if not self.queue.empty() else await asyncio.wait_for(
                    self.queue.get(), max(min(self.window, deadline - loop.time()), 0))
            except asyncio.TimeoutError:
                break
            batch.append(item)
            size += len(item.lines)
        return batch

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._gather()
            groups: dict[Any, list[Waiting]] = {}
            for item in batch:
                groups.setdefault(item.key, []).append(item)
            for key, items in groups.items():
                lines = [line for item in items for line in item.lines]
                self.batches, self.decoded = self.batches + 1, self.decoded + len(lines)
                try:
                    results = await loop.run_in_executor(self.executor, self.translate, lines, key)
                except Exception as exc:  # noqa: BLE001 - a client gets the reason; the service goes on
                    reason = str(exc) if isinstance(exc, NmtError) else f"internal error ({type(exc).__name__})"
                    for item in items:
                        if not item.future.done():
                            item.future.set_exception(DecodingFailed(reason))
                    continue
                start = 0
                for item in items:
                    if not item.future.done():
                        item.future.set_result(results[start:start + len(item.lines)])
                    start += len(item.lines)
