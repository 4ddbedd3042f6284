"""The service's dynamic batcher (:mod:`nmt.serve.batcher`): requests that follow each other within the window join
one batch however long the burst (up to its cap), a pause starts the next batch, decoding options never mix, and
the counters that ``/health`` reports add up."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from nmt.serve.batcher import GATHER_WINDOWS, DynamicBatcher, Hypotheses


def _run(arrivals: list[tuple[float, str, Any]], window: float) -> tuple[list[list[str]], DynamicBatcher]:
    """Submit each ``(delay before it, line, key)`` in turn; the batches ``translate`` saw."""
    seen: list[list[str]] = []

    def translate(lines: Sequence[str], key: Any) -> Hypotheses:
        seen.append(list(lines))
        return [[(f"{line}/{key}", 0.0)] for line in lines]

    async def main() -> DynamicBatcher:
        batcher = DynamicBatcher(translate, window=window, max_sentences=100)
        batcher.start()
        tasks = []
        for delay, line, key in arrivals:
            await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(batcher.submit([line], key)))
        answers = await asyncio.gather(*tasks)
        assert [a[0][0][0] for a in answers] == [f"{line}/{key}" for _, line, key in arrivals]  # each its own
        await batcher.stop()
        return batcher

    return seen, asyncio.run(main())


def test_a_burst_longer_than_the_window_is_one_batch_and_a_pause_starts_the_next() -> None:
    window = 0.2
    burst = [(0.04, f"a{i}", 0) for i in range(12)]  # 12 arrivals 40 ms apart: 0.44 s > window, gaps < window
    later = [(1.0, "b0", 0), (0.0, "b1", 0)]
    seen, batcher = _run(burst + later, window)
    assert seen == [[f"a{i}" for i in range(12)], ["b0", "b1"]]
    assert (batcher.batches, batcher.decoded, batcher.pending) == (2, 14, 0)


def test_a_stream_without_pauses_is_cut_after_the_gathering_cap() -> None:
    window = 0.05
    stream = [(0.01, f"s{i}", 0) for i in range(int(3 * GATHER_WINDOWS * window / 0.01))]  # 1.5 s of arrivals
    seen, _ = _run(stream, window)
    assert len(seen) >= 2 and sum(len(batch) for batch in seen) == len(stream)  # cut, nothing lost
    assert all(len(batch) <= GATHER_WINDOWS * window / 0.01 + 2 for batch in seen)


def test_requests_with_other_options_decode_apart() -> None:
    seen, _ = _run([(0.0, "x", 0), (0.0, "y", 1), (0.0, "z", 0)], 0.1)
    assert sorted(seen) == [["x", "z"], ["y"]]
