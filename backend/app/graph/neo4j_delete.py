"""Deleting one graph's data on Neo4j: graphiti's labels only, in bounded batches.

On Neo4j every graph shares one database, told apart by `group_id`. One
`MATCH (n {group_id: $id}) DETACH DELETE n` would scan every node of every graph (no label, so no
index), run as one transaction that a large graph takes past the server's timeout (nothing is
deleted then), and remove foreign nodes that happen to carry the same property. Here each step
names one graphiti label or relationship type (all indexed on group_id) and deletes at most
`batch_size` of them per transaction, so a large graph goes away in many short transactions and a
failure part way leaves a smaller graph that a second delete finishes.
"""

from __future__ import annotations

import asyncio

DELETE_BATCH_SIZE = 1000  # items per transaction: small enough for any server timeout
BATCH_TIMEOUT_S = 120.0  # one batch; the whole delete has no deadline (it reports progress instead)

# Relationships first, so that no node batch drags an unbounded number of them into its transaction.
# HAS_MEMBER has no group_id index; DETACH removes it with its Community.
RELATIONSHIP_TYPES = ("RELATES_TO", "MENTIONS", "HAS_EPISODE", "NEXT_EPISODE")
NODE_LABELS = ("Episodic", "Entity", "Community", "Saga")


def relationship_batch_query(rel_type: str) -> str:
    return (
        f"MATCH ()-[e:{rel_type}]->() WHERE e.group_id = $graph_id "
        "WITH e LIMIT $batch DELETE e RETURN count(*) AS deleted"
    )


def node_batch_query(label: str) -> str:
    return (
        f"MATCH (n:{label}) WHERE n.group_id = $graph_id "
        "WITH n LIMIT $batch DETACH DELETE n RETURN count(*) AS deleted"
    )


STEPS = tuple((name, relationship_batch_query(name)) for name in RELATIONSHIP_TYPES) + tuple(
    (name, node_batch_query(name)) for name in NODE_LABELS
)


def start_progress(progress: dict) -> None:
    """Every key is set once, up front: readers of a running task copy it while it changes."""
    progress.update({"current": None, "batches": 0, "deleted": {name: 0 for name, _ in STEPS}})


async def delete_group(driver, graph_id: str, progress: dict, batch_size: int | None = None) -> dict:
    """Delete the graph's graphiti relationships and nodes; answer how many of each went."""
    batch_size = batch_size or DELETE_BATCH_SIZE
    start_progress(progress)
    for name, query in STEPS:
        progress["current"] = name
        while True:
            deleted = await asyncio.wait_for(_run_batch(driver, query, graph_id, batch_size), BATCH_TIMEOUT_S)
            progress["deleted"][name] += deleted
            progress["batches"] += 1
            if deleted < batch_size:  # the last batch of this step
                break
    progress["current"] = None
    return dict(progress["deleted"])


async def _run_batch(driver, query: str, graph_id: str, batch_size: int) -> int:
    records = (await driver.execute_query(query, graph_id=graph_id, batch=batch_size))[0]
    return int(records[0]["deleted"]) if records else 0
