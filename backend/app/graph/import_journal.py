"""Pending-import markers: an import records what it is about to write before its first write and
removes the record once everything is stored, so an import cut short by a crash (kill -9 of the app
or of the database) is undone when the database is back, not left as stray entities.

A marker is a `MiroImport` node beside the registry, holding the uuids of the entities, edges and
episodes the import creates. Recovery removes those edges and episodes (with their mentions), and
those entities that no edge uses, and then the marker. It runs when the runtime starts, after the embedded database was restarted, and inside each
import (under the graph's lock) before it reads the graph, so no import ever builds on the leftovers
of another. An import writes while holding its graph's lock, which lives in the database and is
shared by every app process on it (app/graph/graph_locks.py); recovery undoes a graph's markers
only while it holds that lock, so it never touches an import in flight in this process or another.
A marker that is pending while its graph's lock is free belongs to an import whose process died
(its lease ended) or that failed and could not undo itself.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timezone

from app.graph.store import REGISTRY_GRAPH, cypher_rows, graph_exists

logger = logging.getLogger(__name__)


@dataclass
class PendingImport:
    import_id: str
    graph_id: str
    node_uuids: list[str]
    edge_uuids: list[str]
    episode_uuids: list[str] = field(default_factory=list)  # a whole-graph import writes episodes too


def _registry(runtime):
    return runtime.driver_for(REGISTRY_GRAPH)


async def begin(runtime, graph_id: str, node_uuids: list[str], edge_uuids: list[str], *,
                episode_uuids: list[str] | None = None) -> PendingImport:
    """Record the import before it writes (the embedded database fsyncs it before answering)."""
    pending = PendingImport(f"i_{secrets.token_hex(8)}", graph_id, node_uuids, edge_uuids, list(episode_uuids or []))
    await cypher_rows(
        _registry(runtime),
        "CREATE (:MiroImport {import_id: $import_id, graph_id: $graph_id, node_uuids: $node_uuids, "
        "edge_uuids: $edge_uuids, episode_uuids: $episode_uuids, started_at: $started_at})",
        import_id=pending.import_id, graph_id=graph_id, node_uuids=node_uuids, edge_uuids=edge_uuids,
        episode_uuids=pending.episode_uuids, started_at=datetime.now(timezone.utc).isoformat(),
    )
    return pending


async def finish(runtime, pending: PendingImport) -> None:
    """The import is complete (or undone): forget the marker."""
    await cypher_rows(_registry(runtime), "MATCH (m:MiroImport {import_id: $import_id}) DELETE m",
                      import_id=pending.import_id)


async def undo(runtime, pending: PendingImport) -> None:
    """Remove what the import wrote: its edges and episodes, then its entities that nothing uses any more."""
    driver = runtime.driver_for(pending.graph_id)
    await cypher_rows(driver, "UNWIND $uuids AS u MATCH ()-[e:RELATES_TO {uuid: u}]->() DELETE e",
                      uuids=pending.edge_uuids)
    if pending.episode_uuids:
        await cypher_rows(driver, "UNWIND $uuids AS u MATCH (n:Episodic {uuid: u}) DETACH DELETE n",
                          uuids=pending.episode_uuids)
    await cypher_rows(
        driver,
        "UNWIND $uuids AS u MATCH (n:Entity {uuid: u}) OPTIONAL MATCH (n)-[r]-() "
        "WITH n, count(r) AS degree WHERE degree = 0 DELETE n",
        uuids=pending.node_uuids,
    )


async def recover_graph(runtime, graph_id: str) -> int:
    """Undo the pending imports of one graph; the caller holds the graph's lock. Answers how many."""
    rows = await cypher_rows(
        _registry(runtime),
        "MATCH (m:MiroImport {graph_id: $graph_id}) "
        "RETURN m.import_id AS import_id, m.node_uuids AS node_uuids, m.edge_uuids AS edge_uuids, "
        "m.episode_uuids AS episode_uuids",
        graph_id=graph_id,
    )
    if not rows:
        return 0
    # A deleted graph has nothing left to undo; writing to it would bring its key back.
    alive = await graph_exists(runtime, graph_id)
    for row in rows:
        pending = PendingImport(row["import_id"], graph_id, list(row["node_uuids"] or []),
                                list(row["edge_uuids"] or []), list(row["episode_uuids"] or []))
        if alive:
            await undo(runtime, pending)
        await finish(runtime, pending)
    logger.warning("Undid %d import(s) into %s cut short by a crash", len(rows), graph_id)
    return len(rows)


async def recover(runtime) -> int:
    """Undo the pending imports of every graph whose lock is free now; answers how many.

    A graph whose lock another process holds is skipped rather than waited for: its holder is
    alive, and whatever is left pending there is undone by the next import into it."""
    rows = await cypher_rows(_registry(runtime), "MATCH (m:MiroImport) RETURN DISTINCT m.graph_id AS graph_id")
    undone = 0
    for row in rows:
        held = await runtime.graph_lock.try_hold(row["graph_id"])
        if held is None:
            logger.info("Graph %s is locked by a live process; its pending imports are left to it", row["graph_id"])
            continue
        try:
            undone += await recover_graph(runtime, row["graph_id"])
        finally:
            await held.exit()
    return undone
