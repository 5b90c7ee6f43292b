"""One HTTP client per event loop, made on first use.

httpx connection pools (and so openai's client) belong to the loop that made them, but rank calls
arrive on several loops (the graph loop thread, `asyncio.run` per request, tests). Clients of
loops that have closed are dropped when the next one is made.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable, Callable, Generic, TypeVar

Client = TypeVar("Client")


class LoopClients(Generic[Client]):
    def __init__(self, make: Callable[[], Client], close: Callable[[Client], Awaitable[Any]]) -> None:
        self._make = make
        self._close = close
        self._lock = threading.Lock()
        self._clients: dict[asyncio.AbstractEventLoop, Client] = {}

    def get(self) -> Client:
        """The running loop's client."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.get(loop)
            if client is None:
                for closed in [other for other in self._clients if other.is_closed()]:
                    del self._clients[closed]
                client = self._clients[loop] = self._make()
        return client

    async def aclose(self) -> None:
        """Close the running loop's client, if it made one."""
        with self._lock:
            client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await self._close(client)
