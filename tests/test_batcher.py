"""The service's dynamic batcher (:mod:`nmt.serve.batcher`): requests that follow each other within the window join
one batch however long the burst (up to its cap), a pause starts the next batch, decoding options never mix, and
the counters that ``/health`` reports add up."""

from __future__ import annotations

import asyncio
import time
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


def test_lanes_decode_side_by_side_and_a_split_request_is_answered_in_order() -> None:
    """Two lanes: a burst is split by length between them; the clients of the short batch are answered, and their
    next request decodes, while the long batch still runs; a request split between lanes gets its lines in order."""
    finished: list[str] = []

    def translate(lines: Sequence[str], key: Any) -> Hypotheses:
        time.sleep(0.6 if any(line.startswith("long") for line in lines) else 0.05)
        return [[(line.upper(), float(len(line)))] for line in lines]

    async def client(batcher: DynamicBatcher, lines: list[str]) -> Hypotheses:
        answer = await batcher.submit(lines, 0)
        finished.extend(lines)
        return answer

    async def main() -> tuple[Hypotheses, Hypotheses]:
        batcher = DynamicBatcher(translate, window=0.01, max_sentences=100, lanes=2)
        batcher.start()
        split = asyncio.create_task(client(batcher, ["long a b c d", "s1"]))
        longer = asyncio.create_task(client(batcher, ["long e f g h"]))
        await client(batcher, ["s2"])  # decoded with s1, beside the long ones
        again = await client(batcher, ["s3"])  # the short lane is free again: s3 does not wait for the long batch
        answers = await asyncio.gather(split, longer)
        await batcher.stop()
        assert (batcher.batches, batcher.decoded, batcher.pending, batcher.free) == (3, 5, 0, 2)
        return answers[0], again

    split, again = asyncio.run(main())
    assert split == [[("LONG A B C D", 12.0)], [("S1", 2.0)]] and again == [[("S3", 2.0)]]
    assert finished.index("s3") < finished.index("long e f g h")


def _lane_batches(lines: list[str], hold: float) -> list[list[str]]:
    """Two lanes: "blocker" decodes (slowly) on one, then ``lines`` arrive as one burst of one-line requests; the
    batches ``translate`` saw, in order."""
    seen: list[list[str]] = []

    def translate(batch: Sequence[str], key: Any) -> Hypotheses:
        seen.append(list(batch))
        time.sleep(0.8 if "blocker" in batch else 0.05)
        return [[(line, 0.0)] for line in batch]

    async def main() -> None:
        batcher = DynamicBatcher(translate, window=0.02, max_sentences=100, lanes=2, hold=hold)
        batcher.start()
        blocker = asyncio.create_task(batcher.submit(["blocker"], 0))
        await asyncio.sleep(0.2)  # the blocker's lane is busy: the burst finds one lane free
        answers = await asyncio.gather(*(batcher.submit([line], 0) for line in lines))
        assert [answer[0][0][0] for answer in answers] == lines and await blocker == [[("blocker", 0.0)]]
        await batcher.stop()
        assert (batcher.pending, batcher.free, batcher.waiting) == (0, 2, [])

    asyncio.run(main())
    return seen


def test_a_free_lane_beside_a_busy_one_takes_a_share_of_similar_lengths() -> None:
    """20 waiting sentences, 10 of one word and 10 of twelve in turn: the free lane takes half of them, the ten short
    ones, and the long ones wait for the next batch (a batch of all 20 would run as long as its longest)."""
    short, long = [f"s{i}" for i in range(10)], [" ".join(f"l{i}w{j}" for j in range(12)) for i in range(10)]
    burst = [line for pair in zip(short, long, strict=True) for line in pair]
    seen = _lane_batches(burst, hold=60.0)
    assert seen[0] == ["blocker"]
    assert sorted(seen[1]) == sorted(short) and sorted(seen[2]) == sorted(long) and len(seen) == 3


def test_a_sentence_that_waited_its_hold_is_in_the_next_share() -> None:
    """The longest-waiting sentence (one long sentence, then 19 short ones) is left for later by a share of similar
    lengths, unless it has waited ``hold``: then the share is the run of similar lengths that holds it."""
    burst = [" ".join(f"w{j}" for j in range(15))] + [f"s{i}" for i in range(19)]
    patient, held = _lane_batches(burst, hold=60.0), _lane_batches(burst, hold=1e-6)
    assert burst[0] not in patient[1] and len(patient[1]) == 10
    assert burst[0] in held[1] and len(held[1]) == 10


def test_a_hold_of_zero_holds_nothing() -> None:
    """``hold`` 0 (``nmt serve --hold-ms 0``): the free lane takes every waiting sentence, whatever their lengths."""
    burst = [" ".join(f"w{j}" for j in range(15))] + [f"s{i}" for i in range(19)]
    seen = _lane_batches(burst, hold=0.0)
    assert seen[0] == ["blocker"] and sorted(seen[1]) == sorted(burst) and len(seen) == 2
