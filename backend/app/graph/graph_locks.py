"""One lock per graph id, held in the database, so that the create, the import writes and the
delete of one graph happen one after another across every app process on that database.

Real deployments run several workers (`gunicorn -w 4`) or replicas on one Neo4j or FalkorDB, so an
in-process lock alone orders nothing. A graph's lock is a `MiroLock` node beside the registry with
an owner (one token per app process) and a lease that ends at `expires_at` (the database's own
clock, `timestamp()`, so no two machines' clocks are compared). Its holder renews the lease every
a sixth of the lease; a process that dies (kill -9, a lost machine) stops renewing and its locks
become free once their lease ends, so nothing waits on a dead owner for longer than the lease. A
process on the same host can see at once that the holder's pid has ended (an app killed and started
again over its embedded database) and takes such a lock over without waiting.

Inside one process an `asyncio.Lock` per id goes first: waiters of the same process queue there
instead of polling the database. Every graph operation is a coroutine on the one graph loop
(app/graph/loop.py), so these locks are only touched from that thread.

Taking the lock is one query. On Neo4j it first writes the node (which takes the node's write
lock) and only then reads its owner, so two processes cannot both read "free"; the uniqueness
constraint on `MiroLock.graph_id` keeps MERGE from making two nodes. FalkorDB runs one query at a
time per graph, so the same query is atomic there.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import Callable
from weakref import WeakValueDictionary

from app.graph.server_process import has_ended

logger = logging.getLogger(__name__)

# The lease (GRAPH_LOCK_LEASE_S, 30 s) is how long a lock outlives its holder's last renewal; the
# holder renews it six times per lease, so a slow moment of the database does not end it.
RENEWALS_PER_LEASE = 6
_POLL_S = (0.02, 0.5)  # first and longest wait between two tries while another process holds it

_CLAIM = (
    "MERGE (l:MiroLock {graph_id: $graph_id}) "
    "SET l.asked_at = timestamp() "  # a write before the read: Neo4j locks the node here
    "WITH l, timestamp() AS now "
    "WITH l, now, (l.owner IS NULL OR l.owner = $owner OR l.expires_at < now) AS free "
    "SET l.owner = CASE WHEN free THEN $owner ELSE l.owner END, "
    "l.expires_at = CASE WHEN free THEN now + $lease_ms ELSE l.expires_at END "
    "RETURN free, l.owner AS holder"
)
# Taken over from a holder known to be dead, if it still holds it.
_TAKE_OVER = (
    "MATCH (l:MiroLock {graph_id: $graph_id}) "
    "SET l.asked_at = timestamp() "
    "WITH l, l.owner = $dead AS free "
    "SET l.owner = CASE WHEN free THEN $owner ELSE l.owner END, "
    "l.expires_at = CASE WHEN free THEN timestamp() + $lease_ms ELSE l.expires_at END "
    "RETURN free, l.owner AS holder"
)
_RENEW = (
    "MATCH (l:MiroLock {graph_id: $graph_id}) WHERE l.owner = $owner "
    "SET l.expires_at = timestamp() + $lease_ms RETURN count(l) AS held"
)
_RELEASE = "MATCH (l:MiroLock {graph_id: $graph_id}) WHERE l.owner = $owner SET l.owner = null, l.expires_at = 0"
NEO4J_CONSTRAINT = "CREATE CONSTRAINT mirolock_graph_id IF NOT EXISTS FOR (l:MiroLock) REQUIRE l.graph_id IS UNIQUE"


_owner: tuple[int, str] | None = None


def process_owner() -> str:
    """This process's name in the locks it holds: host, pid, and a random part (pids are reused).
    One per process, also when its runtime is rebuilt; a forked worker gets its own."""
    global _owner
    if _owner is None or _owner[0] != os.getpid():
        _owner = (os.getpid(), f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}")
    return _owner[1]


def is_dead_here(owner: str) -> bool:
    """True for a holder on this host whose process has ended: an app killed and started again
    need not wait out its own old lease (a holder elsewhere can only be judged by its lease)."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    # A killed worker can linger as a zombie until init reaps it: it holds nothing any more.
    return host == socket.gethostname() and pid.isdigit() and has_ended(int(pid))


class GraphLocks:
    """`async with locks(graph_id):` holds the graph's lock in this process and in the database;
    `await locks.try_hold(graph_id)` answers a held lock or None without waiting."""

    def __init__(self, registry_driver: Callable[[], object], *, lease_s: float = 30.0,
                 owner: str | None = None) -> None:
        self._registry_driver = registry_driver
        self.lease_s = lease_s
        self.owner = owner or process_owner()
        self._local: WeakValueDictionary[str, asyncio.Lock] = WeakValueDictionary()

    def __call__(self, graph_id: str) -> "HeldGraph":
        return HeldGraph(self, graph_id)

    def local_lock(self, graph_id: str) -> asyncio.Lock:
        lock = self._local.get(graph_id)
        if lock is None:
            lock = asyncio.Lock()
            self._local[graph_id] = lock
        return lock

    async def _query(self, query: str, graph_id: str, **params) -> list:
        result = await self._registry_driver().execute_query(
            query, graph_id=graph_id, owner=self.owner, lease_ms=int(self.lease_s * 1000), **params)
        records = result[0] if isinstance(result, tuple) else result.records
        return [dict(record) for record in records or []]

    async def claim(self, graph_id: str) -> bool:
        rows = await self._query(_CLAIM, graph_id)
        if rows and not rows[0]["free"] and is_dead_here(str(rows[0]["holder"])):
            logger.warning("Taking the lock of graph %s from %s, a process of this host that has ended",
                           graph_id, rows[0]["holder"])
            rows = await self._query(_TAKE_OVER, graph_id, dead=rows[0]["holder"])
        return bool(rows and rows[0]["free"])

    async def renew(self, graph_id: str) -> bool:
        rows = await self._query(_RENEW, graph_id)
        return bool(rows and rows[0]["held"])

    async def release(self, graph_id: str) -> None:
        await self._query(_RELEASE, graph_id)

    async def try_hold(self, graph_id: str) -> "HeldGraph | None":
        """The graph's lock if it is free now, else None (recovery skips graphs a live process holds)."""
        held = HeldGraph(self, graph_id)
        return held if await held.enter(wait=False) else None


class HeldGraph:
    """One hold of one graph's lock; renewed in the background while held."""

    def __init__(self, locks: GraphLocks, graph_id: str) -> None:
        self._locks, self.graph_id = locks, graph_id
        self._local: asyncio.Lock | None = None  # a strong reference keeps the weak entry alive
        self._renewal: asyncio.Task | None = None

    async def __aenter__(self) -> "HeldGraph":
        await self.enter(wait=True)
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.exit()

    async def enter(self, *, wait: bool) -> bool:
        self._local = self._locks.local_lock(self.graph_id)
        if not wait and self._local.locked():
            return False
        await self._local.acquire()
        try:
            pause = _POLL_S[0]
            while not await self._locks.claim(self.graph_id):
                if not wait:
                    self._local.release()
                    return False
                await asyncio.sleep(pause)
                pause = min(pause * 2, _POLL_S[1])
        except BaseException:
            self._local.release()
            raise
        self._renewal = asyncio.get_running_loop().create_task(self._renew())
        return True

    async def exit(self) -> None:
        if self._renewal is not None:
            self._renewal.cancel()
        try:
            await self._locks.release(self.graph_id)
        except Exception as error:  # the lease ends by itself: the next holder waits at most that long
            logger.warning("Could not release the lock of graph %s (%s); it frees itself within %.0f s",
                           self.graph_id, type(error).__name__, self._locks.lease_s)
        finally:
            self._local.release()

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self._locks.lease_s / RENEWALS_PER_LEASE)
            try:
                if not await self._locks.renew(self.graph_id):
                    logger.error("Lost the lock of graph %s: its lease ended before it was renewed",
                                 self.graph_id)
                    return
            except Exception as error:  # the database is away: the operation itself will fail
                logger.warning("Could not renew the lock of graph %s (%s)", self.graph_id, type(error).__name__)
