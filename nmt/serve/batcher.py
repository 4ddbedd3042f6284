"""Dynamic batching: the sentences of requests that arrive within a few milliseconds decode as one batch.

Requests wait in a queue; when a decoding lane is free the batcher takes the first, gathers those that follow it
each within ``window`` seconds of the one before (up to ``max_sentences``; ten windows at most), groups them by their
decoding options and hands each group to ``translate`` in one call, on a thread that waits for a decoding process
(the service decodes in processes, ``--workers`` of them, never in the event loop's process:
:func:`nmt.serve.app.decode_request`). While a batch decodes, new requests queue up and form the next one, so under
load batches grow toward the command line's.

With ``lanes`` > 1 (one per decoding process) batches decode side by side and independently: a gathered burst is
split by sentence length between the lanes that are free, and a lane takes the next burst as soon as its batch is
done, while the others still decode. Each batch runs until its longest sentence ends, its last steps on a few rows;
with one batch at a time every client would wait for that tail, with lanes the clients of a short batch are answered
and their next requests decode on its lane meanwhile (measured in ``docs/usage.md``).

While another lane decodes and at least :data:`MIN_POOL` sentences wait, a free lane does not take them all: it takes
a share (``1/lanes`` of them) of similar lengths, the contiguous run in length order with the smallest ratio of
longest to shortest, and the rest wait for the next free lane with what arrives meanwhile. A batch runs until its
longest sentence ends, so a batch of one length range takes fewer steps for the same sentences (on one thread,
batches of 32 random sentences cost 1.44x as much as length-sorted ones, and sorted batches of 16 less than random
ones of 32: ``bench/serve-lanes-2026-12-07/batch_surface.out``; 1.16x the sentences/s at 64 clients:
``docs/usage.md``). A sentence that has waited ``hold`` seconds is in the next share taken, so none waits for ever.
With every lane free, or few sentences waiting, all of them decode at once (a light load is answered without
holding anything), and with ``hold`` 0 always (``nmt serve --hold-ms 0``: the shortest tail, fewer sentences/s).

A call that fails (a decoding process died) fails the requests of that group only, with :class:`DecodingFailed`;
the next batch goes on (the decoding process is replaced).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from nmt.errors import NmtError

Hypotheses = list[list[tuple[str, float]]]
GATHER_WINDOWS = 10  # a batch gathers for at most this many windows after its first request
Translate = Callable[[Sequence[str], Any], Hypotheses]
MIN_POOL = 16  # fewer waiting sentences all decode at once, whatever their lengths
HOLD = 2.0  # seconds a sentence may be left for a batch of others' lengths


class DecodingFailed(Exception):
    """The batch holding a request could not be decoded (its one-line reason)."""


@dataclass
class Waiting:
    lines: list[str]
    key: Any
    future: asyncio.Future[Hypotheses]
    queued: float = field(default_factory=time.perf_counter)
    results: Hypotheses = field(default_factory=list)  # filled as its sentences' batches end
    left: int = 0  # sentences not decoded yet

    def __post_init__(self) -> None:
        self.results, self.left = [[] for _ in self.lines], len(self.lines)

    def answer(self, index: int, nbest: list[tuple[str, float]]) -> None:
        """Sentence ``index`` is decoded; the last one answers the request."""
        self.results[index] = nbest
        self.left -= 1
        if not self.left and not self.future.done():
            self.future.set_result(self.results)

    def fail(self, reason: str) -> None:
        if not self.future.done():
            self.future.set_exception(DecodingFailed(reason))


Sentence = tuple[Waiting, int]  # a request and the index of one of its lines


def words(sentence: Sentence) -> int:
    return len(sentence[0].lines[sentence[1]].split())


def sentences_of(items: Sequence[Waiting]) -> list[Sentence]:
    return [(item, i) for item in items for i in range(len(item.lines))]


def similar_run(ordered: Sequence[Sentence], size: int, now: float, hold: float) -> int:
    """The start of the ``size`` consecutive sentences of ``ordered`` (sorted by word count) whose longest is the
    fewest times their shortest (the first such run), among the runs holding the longest-waiting sentence when it has
    waited ``hold`` seconds."""
    starts = range(len(ordered) - size + 1)
    oldest = min(range(len(ordered)), key=lambda j: ordered[j][0].queued)
    if now - ordered[oldest][0].queued >= hold:
        starts = range(max(oldest - size + 1, 0), min(oldest, len(ordered) - size) + 1)
    lengths = [math.log(words(sentence) + 1) for sentence in ordered]
    return min(starts, key=lambda start: lengths[start + size - 1] - lengths[start])


class DynamicBatcher:
    """Runs ``translate(lines, key)`` over the gathered lines of concurrent :meth:`submit` calls, ``lanes`` calls
    at a time."""

    def __init__(self, translate: Translate, window: float = 0.005, max_sentences: int = 256,
                 lanes: int = 1, hold: float = HOLD) -> None:
        self.translate, self.window, self.max_sentences = translate, window, max_sentences
        self.lanes, self.hold = lanes, hold
        self.waiting: list[Sentence] = []  # gathered, not in a batch yet (left for one of their lengths)
        self.queue: asyncio.Queue[Waiting] = asyncio.Queue()
        self.executor = ThreadPoolExecutor(max_workers=lanes, thread_name_prefix="nmt-serve-decode")
        self.task: asyncio.Task[None] | None = None
        self.free = lanes  # lanes not decoding
        self.freed = asyncio.Event()
        self.decoding: set[asyncio.Task[None]] = set()
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
        if not lines:
            return []
        future: asyncio.Future[Hypotheses] = asyncio.get_running_loop().create_future()
        self.pending += len(lines)
        await self.queue.put(Waiting(lines, key, future))
        try:
            return await future
        finally:
            self.pending -= len(lines)

    async def _gather(self, block: bool = True) -> list[Waiting]:
        """The first request, then every one that follows the one before within ``window`` (up to
        ``max_sentences``, and no longer than ``GATHER_WINDOWS`` windows after the first): the burst of requests that
        clients send as a batch's answers reach them joins one batch, where a fixed deadline from the first would
        cut it (measured at 64 clients: 48 sentences per batch with a deadline, 62 with gaps; docs/usage.md)."""
        loop = asyncio.get_running_loop()
        if block:
            batch = [await self.queue.get()]
        else:  # sentences wait already: only what arrives within a window joins them
            try:
                batch = [await asyncio.wait_for(self.queue.get(), self.window)]
            except asyncio.TimeoutError:
                return []
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
        while True:
            while not self.free:
                self.freed.clear()
                await self.freed.wait()
            self.waiting += sentences_of(await self._gather(block=not self.waiting))
            for part in self._choose():
                self.free -= 1
                task = asyncio.get_running_loop().create_task(self._decode(part))
                self.decoding.add(task)  # held until done: the loop keeps only weak references to tasks
                task.add_done_callback(self.decoding.discard)

    def _choose(self) -> list[list[Sentence]]:
        """The batches for the free lanes from the waiting sentences: all of them, cut by length between the lanes,
        when every lane is free, fewer than :data:`MIN_POOL` wait or ``hold`` is 0; else for each free lane a share of
        similar lengths (:func:`similar_run`). What is not chosen waits (module doc)."""
        ordered = sorted(self.waiting, key=words)
        parts: list[list[Sentence]] = []
        if self.free == self.lanes or len(ordered) < MIN_POOL or self.hold <= 0:
            size = min(-(-len(ordered) // self.free), self.max_sentences)
            parts = [ordered[start:start + size] for start in range(0, len(ordered), size)][:self.free]
            del ordered[:sum(len(part) for part in parts)]
        else:
            size, now = min(-(-len(ordered) // self.lanes), self.max_sentences), time.perf_counter()
            while ordered and len(parts) < self.free:
                start = similar_run(ordered, min(size, len(ordered)), now, self.hold)
                parts.append(ordered[start:start + size])
                del ordered[start:start + size]
        self.waiting = ordered  # what no lane took
        return parts

    async def _decode(self, part: list[Sentence]) -> None:
        """Decode one lane's batch, group by group, and answer the requests whose last sentence it holds; the lane
        is free again after."""
        loop = asyncio.get_running_loop()
        groups: dict[Any, list[Sentence]] = {}
        for sentence in part:
            groups.setdefault(sentence[0].key, []).append(sentence)
        try:
            for key, sentences in groups.items():
                lines = [item.lines[i] for item, i in sentences]
                self.batches, self.decoded = self.batches + 1, self.decoded + len(lines)
                try:
                    results = await loop.run_in_executor(self.executor, self.translate, lines, key)
                except Exception as exc:  # noqa: BLE001 - a client gets the reason; the service goes on
                    reason = str(exc) if isinstance(exc, NmtError) else f"internal error ({type(exc).__name__})"
                    for item, _ in sentences:
                        item.fail(reason)
                    continue
                for (item, i), nbest in zip(sentences, results, strict=True):
                    item.answer(i, nbest)
        finally:
            self.free += 1
            self.freed.set()
