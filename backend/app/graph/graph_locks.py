"""One lock per graph id, so that the create, the import writes and the delete of one graph happen
one after another, never interleaved.

Every graph operation is a coroutine on the one graph event loop (`app/graph/loop.py`, `run_on_loop`), so an
`asyncio.Lock` per id orders them for the whole app process, which is how the app is served (one
process, many threads). A lock lives only while some operation holds or awaits it.
"""

from __future__ import annotations

import asyncio
from weakref import WeakValueDictionary


class GraphLocks:
    def __init__(self) -> None:
        # Only touched from the loop thread, so the dictionary itself needs no lock.
        self._locks: WeakValueDictionary[str, asyncio.Lock] = WeakValueDictionary()

    def __call__(self, graph_id: str) -> asyncio.Lock:
        lock = self._locks.get(graph_id)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[graph_id] = lock
        return lock
