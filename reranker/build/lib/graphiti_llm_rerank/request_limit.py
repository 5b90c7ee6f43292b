"""A bound on concurrent model requests that holds for the whole process, across event loops.

asyncio.Semaphore binds itself to the first loop that waits on it, but rank calls may arrive on
several loops (a long-lived loop thread, `asyncio.run` per request, tests). The bound must hold for
the process, so this one keeps its count under a threading lock and wakes waiters on their own loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass


@dataclass(eq=False)
class _Waiter:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    granted: bool = False  # set under the lock when a released slot is handed over


class RequestLimit:
    """`async with limit:` admits at most `size` holders at once, over all loops and threads.

    FIFO: a released slot is handed straight to the oldest waiter (so `in_use` never dips and lets
    a newcomer jump the queue); `peak` records the most holders ever seen at once.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"max_parallel must be >= 1, got {size}")
        self.size = size
        self.in_use = 0
        self.peak = 0
        self._lock = threading.Lock()
        self._waiters: deque[_Waiter] = deque()
        self._busy_s = 0.0  # finished spans with at least one holder
        self._busy_since: float | None = None

    def snapshot(self) -> dict[str, int]:
        return {"max_parallel": self.size, "in_flight": self.in_use, "peak_in_flight": self.peak}

    def busy_s(self) -> float:
        """Seconds during which at least one slot was held: the union of the holders' spans."""
        with self._lock:
            running = time.perf_counter() - self._busy_since if self._busy_since is not None else 0.0
            return self._busy_s + running

    async def __aenter__(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self.in_use < self.size and not self._waiters:
                if self.in_use == 0:
                    self._busy_since = time.perf_counter()
                self.in_use += 1
                self.peak = max(self.peak, self.in_use)
                return
            waiter = _Waiter(loop, loop.create_future())
            self._waiters.append(waiter)
        try:
            await waiter.future
        except asyncio.CancelledError:
            with self._lock:
                granted = waiter.granted
                if not granted and waiter in self._waiters:
                    self._waiters.remove(waiter)
            if granted:  # the slot reached us just as we were cancelled: pass it on
                self.release()
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()

    def release(self) -> None:
        with self._lock:
            while self._waiters:
                waiter = self._waiters.popleft()
                try:
                    waiter.loop.call_soon_threadsafe(_wake, waiter.future)
                except RuntimeError:  # its loop is closed; nobody is left to take the slot
                    continue
                waiter.granted = True
                return  # the slot moves to the waiter: in_use is unchanged
            self.in_use -= 1
            if self.in_use == 0 and self._busy_since is not None:
                self._busy_s += time.perf_counter() - self._busy_since
                self._busy_since = None


def _wake(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
