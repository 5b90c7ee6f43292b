"""The process-wide bound on model requests: at most `size` holders over every loop, FIFO, and the
time during which any request was in flight (what a benchmark subtracts to find its own overhead)."""

from __future__ import annotations

import asyncio
import threading
import time

from graphiti_llm_rerank.request_limit import RequestLimit


def test_busy_time_is_the_union_of_overlapping_holds_and_stops_when_idle():
    limit = RequestLimit(2)
    spans: list[float] = []

    async def hold(start_after_s: float, hold_s: float) -> None:
        await asyncio.sleep(start_after_s)
        async with limit:
            started = time.perf_counter()
            await asyncio.sleep(hold_s)
            spans.append(time.perf_counter() - started)

    async def both() -> None:
        # The second takes its slot at 0.1 s, while the first holds until 0.3 s: timers fire in order.
        await asyncio.gather(hold(0.0, 0.3), hold(0.1, 0.3))

    started = time.perf_counter()
    asyncio.run(both())
    wall = time.perf_counter() - started
    busy = limit.busy_s()
    assert 0.4 <= busy <= wall
    assert busy < sum(spans)  # the overlap is counted once
    time.sleep(0.05)
    assert limit.busy_s() == busy  # nothing in flight: the clock stands still
    assert limit.snapshot() == {"max_parallel": 2, "in_flight": 0, "peak_in_flight": 2}


def test_the_bound_holds_across_event_loops_in_threads():
    limit = RequestLimit(1)
    overlaps: list[int] = []

    async def one() -> None:
        async with limit:
            overlaps.append(limit.in_use)
            await asyncio.sleep(0.02)

    threads = [threading.Thread(target=lambda: asyncio.run(one())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == [1, 1, 1, 1] and limit.peak == 1 and limit.in_use == 0
