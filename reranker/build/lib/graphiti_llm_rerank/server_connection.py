"""What every client of a model server of ours holds, written once: where the server is (its URL
redacted for logs), the per-request timeout, the process-wide bound on concurrent requests, the
counters, one HTTP client per event loop, and a fresh `RequestWaves` for each rank call (so a hung
server costs a call one timeout, not one per wave of requests). The LLM judge (graphiti_llm_rerank/judge.py)
and the rerank-API client (graphiti_llm_rerank/rerank_api_client.py) add what they send and how they read
the answers.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable, Callable, Generic, TypeVar
from urllib.parse import urlsplit, urlunsplit

from graphiti_llm_rerank.counters import CounterSet
from graphiti_llm_rerank.request_limit import RequestLimit
from graphiti_llm_rerank.request_waves import RequestWaves

Client = TypeVar("Client")


def redact_url(url: str) -> str:
    """The URL without any user:password part, for logs and /health."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


class LoopClients(Generic[Client]):
    """One HTTP client per event loop, made on first use.

    httpx connection pools (and so openai's client) belong to the loop that made them, but rank
    calls arrive on several loops (the graph loop thread, `asyncio.run` per request, tests).
    Clients of loops that have closed are dropped when the next one is made."""

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


class ServerConnection(Generic[Client]):
    """Base of our model-server clients. No network I/O before the first request."""

    def __init__(self, *, model: str, base_url: str, timeout_s: float, max_parallel: int, counters: CounterSet,
                 make_client: Callable[[], Client], close_client: Callable[[Client], Awaitable[Any]]) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.model = model
        self.base_url = base_url
        self.timeout_s = float(timeout_s)
        self.counters = counters
        self._limit = RequestLimit(max_parallel)
        self._lock = threading.Lock()
        self._clients = LoopClients(make_client, close_client)

    def connection_stats(self) -> dict[str, Any]:
        return {"model": self.model, "base_url": redact_url(self.base_url), "timeout_s": self.timeout_s,
                **self._limit.snapshot()}

    def request_waves(self) -> RequestWaves:
        """A fresh RequestWaves for one rank call's requests (graphiti_llm_rerank/request_waves.py)."""
        return RequestWaves(self._not_sent)

    def _not_sent(self, timed_out: int) -> Exception:
        """The error a request raises instead of being sent once a wave of `timed_out` requests all timed
        out with nothing answered; each client gives its own error type."""
        raise NotImplementedError

    def model_busy_s(self) -> float:
        """Seconds during which at least one request to the server was in flight."""
        return self._limit.busy_s()

    async def aclose(self) -> None:
        """Close the client of the running loop (optional; clients of finished loops are dropped)."""
        await self._clients.aclose()
