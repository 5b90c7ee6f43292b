"""A whole graph out of the database and into another (graph_file.py says what the file holds).

Export reads the graph under its lock (graph_locks.py), so an import or a delete of it cannot land
half inside the file, in pages ordered by uuid. Import writes a checked file into a graph that is
new or empty, with the uuids the file gives (or fresh ones, `new_uuids`), its names and facts
embedded by this app's embedder the way the graph stores its texts. It writes under a
pending-import marker (import_journal.py) and counts what is stored afterwards: a failure, or a
crash part way, leaves the graph as empty as it was, and a graph the import created is removed.
"""

from __future__ import annotations

import logging
from datetime import datetime

from graphiti_core.edges import EntityEdge, EpisodicEdge
from graphiti_core.nodes import EntityNode, EpisodeType, EpisodicNode
from graphiti_core.utils.bulk_utils import add_nodes_and_edges_bulk

from app.graph import import_journal
from app.graph import store as graph_store
from app.graph.fact_import import EMBED_CHUNK, WRITE_CHUNK, GraphChangedError, ImportFailedError
from app.graph.graph_file import GraphFile, entity_record, episode_record, fact_record, with_new_uuids
from app.graph.store import cypher_rows

logger = logging.getLogger(__name__)

READ_PAGE = 1000  # records per read query: each stays short on a graph loop that searches share
# A record's properties without its vector: reading `properties(n)` whole costs ten times as much on
# FalkorDB (300 entities: 1.8 s against 0.2 s on a busy machine), nearly all of it the vector.
VECTORS = ["name_embedding", "fact_embedding"]


def _properties(var: str) -> str:
    return f"[k IN keys({var}) WHERE NOT k IN $vectors | [k, {var}[k]]] AS props"


class GraphNotEmptyError(ValueError):
    """An import goes only into a new or empty graph (409)."""

    def __init__(self, graph_id: str, counts: dict):
        super().__init__(f"graph {graph_id!r} is not empty ({counts['entities']} entities, {counts['facts']} facts, "
                         f"{counts['episodes']} episodes): import into a new graph id or an empty graph")
        self.graph_id = graph_id


class UuidConflictError(ValueError):
    """The database already holds records under uuids of the file (another graph on the same Neo4j)."""

    def __init__(self, graph_id: str, uuids: list[str]):
        super().__init__(f"{len(uuids)} uuids of the file are already used in this database (e.g. {uuids[0]!r}), "
                         "by another graph; import with new_uuids=true to store the graph under fresh ones")
        self.graph_id = graph_id


# --- export ---------------------------------------------------------------------------------------


async def export_graph(runtime, graph_id: str) -> GraphFile:
    """Every entity, fact and episode of the graph, as records (UnknownGraphError if there is none)."""
    graph_store.validate_graph_id(graph_id)
    async with runtime.graph_lock(graph_id):
        await graph_store.require_graph(runtime, graph_id)
        driver = runtime.driver_for(graph_id)
        entities = [entity_record(row["props"], row["labels"]) for row in await _pages(
            driver, graph_id, "MATCH (n:Entity) WHERE n.group_id = $graph_id AND n.uuid > $after",
            "n.uuid", f"{_properties('n')}, labels(n) AS labels")]
        facts = [fact_record(row["props"], row["source_uuid"], row["target_uuid"]) for row in await _pages(
            driver, graph_id,
            "MATCH (s:Entity)-[e:RELATES_TO]->(t:Entity) WHERE e.group_id = $graph_id AND e.uuid > $after",
            "e.uuid", f"{_properties('e')}, s.uuid AS source_uuid, t.uuid AS target_uuid")]
        mentions = await _mentions(driver, graph_id)
        episodes = [episode_record(row["props"], mentions.get(row["props"]["uuid"], ())) for row in await _pages(
            driver, graph_id, "MATCH (n:Episodic) WHERE n.group_id = $graph_id AND n.uuid > $after",
            "n.uuid", _properties("n"))]
    logger.info("Exported graph %s: %d entities, %d facts, %d episodes",
                graph_id, len(entities), len(facts), len(episodes))
    return GraphFile(graph_id=graph_id, entities=entities, facts=facts, episodes=episodes)


async def _pages(driver, graph_id: str, match: str, key: str, fields: str) -> list[dict]:
    """All rows of `match`, READ_PAGE at a time after the last key seen (no SKIP: it rereads)."""
    rows: list[dict] = []
    after = ""
    while True:
        page = await cypher_rows(driver, f"{match} RETURN {key} AS key, {fields} ORDER BY {key} LIMIT $limit",
                                 graph_id=graph_id, after=after, limit=READ_PAGE, vectors=VECTORS)
        rows.extend({**row, "props": dict(row["props"])} for row in page)
        if len(page) < READ_PAGE:
            return rows
        after = page[-1]["key"]


async def _mentions(driver, graph_id: str) -> dict[str, list[str]]:
    rows = await cypher_rows(
        driver,
        "MATCH (n:Episodic)-[:MENTIONS]->(m:Entity) WHERE n.group_id = $graph_id "
        "RETURN n.uuid AS episode, m.uuid AS entity",
        graph_id=graph_id,
    )
    found: dict[str, list[str]] = {}
    for row in rows:
        found.setdefault(row["episode"], []).append(row["entity"])
    return found


async def graph_counts(runtime, graph_id: str) -> dict:
    driver = runtime.driver_for(graph_id)
    counts = {}
    for key, match in (("entities", "MATCH (n:Entity) WHERE n.group_id = $graph_id"),
                       ("facts", "MATCH ()-[e:RELATES_TO]->() WHERE e.group_id = $graph_id"),
                       ("episodes", "MATCH (n:Episodic) WHERE n.group_id = $graph_id")):
        rows = await cypher_rows(driver, f"{match} RETURN count(*) AS n", graph_id=graph_id)
        counts[key] = int(rows[0]["n"]) if rows else 0
    return counts


# --- import ---------------------------------------------------------------------------------------


async def import_graph(runtime, graph_id: str, graph: GraphFile, *, name: str | None = None,
                       new_uuids: bool = False) -> dict:
    """Write `graph` into `graph_id`, created here if it does not exist; answers the counts stored.

    GraphNotEmptyError, UuidConflictError, GraphChangedError, ImportFailedError: nothing was stored."""
    graph_store.validate_graph_id(graph_id)
    if new_uuids:
        graph = with_new_uuids(graph, graph_id)
    created = await _create_if_absent(runtime, graph_id, name)
    try:
        result = await _import(runtime, graph_id, graph)
    except BaseException:
        if created:
            await _remove_created(runtime, graph_id)
        raise
    return {**result, "graph_id": graph_id, "created": created}


async def _create_if_absent(runtime, graph_id: str, name: str | None) -> bool:
    """Whether this import created the graph (another request may create it between the look and the create)."""
    if await graph_store.graph_exists(runtime, graph_id):
        return False
    try:
        await graph_store.create_graph(runtime, graph_id, name)
    except graph_store.GraphExistsError:
        return False
    return True


async def _remove_created(runtime, graph_id: str) -> None:
    try:
        await graph_store.delete_graph(runtime, graph_id)
    except Exception as error:  # the import's own error is the answer; the empty graph stays listed
        logger.warning("Could not remove graph %s after its import failed (%s)", graph_id, type(error).__name__)


async def _import(runtime, graph_id: str, graph: GraphFile) -> dict:
    incarnation = await graph_store.graph_incarnation(runtime, graph_id)
    await _require_empty(runtime, graph_id)
    if not runtime.is_falkordb:  # one database for every graph: a uuid may be another graph's
        await _refuse_used_uuids(runtime, graph_id, graph)
    async with graph_store.embedding_stored_texts_of(runtime, graph_id):
        names = await _embed(runtime.graphiti.embedder, [entity["name"] for entity in graph.entities])
        facts = await _embed(runtime.graphiti.embedder, [fact["fact"] for fact in graph.facts])
    nodes = [_entity_node(entity, graph_id, vector) for entity, vector in zip(graph.entities, names)]
    edges = [_entity_edge(fact, graph_id, vector) for fact, vector in zip(graph.facts, facts)]
    episodes = [_episode_node(episode, graph_id) for episode in graph.episodes]
    mentions = [EpisodicEdge(source_node_uuid=episode["uuid"], target_node_uuid=entity_uuid, group_id=graph_id,
                             created_at=node.created_at)
                for episode, node in zip(graph.episodes, episodes) for entity_uuid in episode["mentions"]]
    async with runtime.graph_lock(graph_id):
        if await _incarnation_now(runtime, graph_id) != incarnation:
            raise GraphChangedError(graph_id)
        await import_journal.recover_graph(runtime, graph_id)
        await _require_empty(runtime, graph_id)  # another import may have filled it meanwhile
        await graph_store.unkey_facts(runtime, graph_id)  # the file's uuids are not the ones keys give
        await _write(runtime, graph_id, nodes, edges, episodes, mentions, graph.counts())
    logger.info("Imported graph %s: %s", graph_id, graph.counts())
    return graph.counts()


async def _require_empty(runtime, graph_id: str) -> None:
    counts = await graph_counts(runtime, graph_id)
    if any(counts.values()):
        raise GraphNotEmptyError(graph_id, counts)


async def _refuse_used_uuids(runtime, graph_id: str, graph: GraphFile) -> None:
    driver = runtime.driver_for(graph_id)
    used: list[str] = []
    for query, records in (
            ("UNWIND $uuids AS u MATCH (n:Entity {uuid: u}) RETURN n.uuid AS uuid", graph.entities),
            ("UNWIND $uuids AS u MATCH (n:Episodic {uuid: u}) RETURN n.uuid AS uuid", graph.episodes),
            ("UNWIND $uuids AS u MATCH ()-[e:RELATES_TO {uuid: u}]->() RETURN e.uuid AS uuid", graph.facts)):
        if records:
            used += [row["uuid"] for row in await cypher_rows(driver, query, uuids=[r["uuid"] for r in records])]
    if used:
        raise UuidConflictError(graph_id, used)


async def _embed(embedder, texts: list[str]) -> list[list[float]]:
    """Each text's vector, EMBED_CHUNK texts per call so a large import is many short calls."""
    vectors: list[list[float]] = []
    for start in range(0, len(texts), EMBED_CHUNK):
        chunk = [text.replace("\n", " ") for text in texts[start:start + EMBED_CHUNK]]
        vectors += await embedder.create_batch(chunk)
    return vectors


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


def _entity_node(entity: dict, graph_id: str, vector: list[float]) -> EntityNode:
    return EntityNode(uuid=entity["uuid"], name=entity["name"], group_id=graph_id, labels=list(entity["labels"]),
                      summary=entity["summary"], created_at=_time(entity["created_at"]), name_embedding=vector,
                      attributes=dict(entity["attributes"]))


def _entity_edge(fact: dict, graph_id: str, vector: list[float]) -> EntityEdge:
    return EntityEdge(uuid=fact["uuid"], group_id=graph_id, source_node_uuid=fact["source_uuid"],
                      target_node_uuid=fact["target_uuid"], name=fact["relation"], fact=fact["fact"],
                      episodes=list(fact["episodes"]), created_at=_time(fact["created_at"]),
                      valid_at=_time(fact["valid_at"]), invalid_at=_time(fact["invalid_at"]),
                      expired_at=_time(fact["expired_at"]), reference_time=_time(fact["reference_time"]),
                      fact_embedding=vector, attributes=dict(fact["attributes"]))


def _episode_node(episode: dict, graph_id: str) -> EpisodicNode:
    return EpisodicNode(uuid=episode["uuid"], name=episode["name"], group_id=graph_id,
                        source=EpisodeType(episode["source"]), source_description=episode["source_description"],
                        content=episode["content"], valid_at=_time(episode["valid_at"]),
                        created_at=_time(episode["created_at"]), entity_edges=list(episode["entity_edges"]))


async def _incarnation_now(runtime, graph_id: str) -> str | None:
    try:
        return await graph_store.graph_incarnation(runtime, graph_id)
    except graph_store.UnknownGraphError:
        return None


async def _write(runtime, graph_id: str, nodes: list[EntityNode], edges: list[EntityEdge],
                 episodes: list[EpisodicNode], mentions: list[EpisodicEdge], expected: dict) -> None:
    """Entities, then episodes, then facts and mentions (an edge needs both its ends), in short
    writes under a pending-import marker; counted afterwards; undone on any failure."""
    pending = await import_journal.begin(runtime, graph_id, [n.uuid for n in nodes], [e.uuid for e in edges],
                                         episode_uuids=[e.uuid for e in episodes])
    try:
        driver = runtime.driver_for(graph_id)
        embedder = runtime.graphiti.embedder
        for start in range(0, max(len(nodes), len(episodes)), WRITE_CHUNK):
            await add_nodes_and_edges_bulk(driver, episodes[start:start + WRITE_CHUNK], [],
                                           nodes[start:start + WRITE_CHUNK], [], embedder)
        for start in range(0, max(len(edges), len(mentions)), WRITE_CHUNK):
            await add_nodes_and_edges_bulk(driver, [], mentions[start:start + WRITE_CHUNK], [],
                                           edges[start:start + WRITE_CHUNK], embedder)
        stored = await graph_counts(runtime, graph_id)
        if stored != expected:
            raise ImportFailedError(f"the database holds {stored} after the import, not {expected}")
        await import_journal.finish(runtime, pending)
    except BaseException as error:  # also a cancelled import (its deadline passed)
        undone = await _roll_back(runtime, pending, error)
        if not isinstance(error, Exception):
            raise
        reason = str(error) if isinstance(error, ImportFailedError) else type(error).__name__
        if undone:
            raise ImportFailedError(f"graph import failed and was rolled back: {reason}") from error
        raise ImportFailedError(f"graph import failed ({reason}); what it wrote is removed as soon as the "
                                "database answers again") from error


async def _roll_back(runtime, pending, error: BaseException) -> bool:
    try:
        await _undo(runtime, pending)
    except Exception as undo_error:  # the database is gone: recovery undoes it when it is back
        runtime.recovery_due = True
        logger.error("Graph import into %s failed (%s) and could not be undone now (%s)",
                     pending.graph_id, type(error).__name__, type(undo_error).__name__)
        return False
    logger.error("Graph import into %s failed (%s); nothing was kept", pending.graph_id, type(error).__name__)
    return True


async def _undo(runtime, pending) -> None:
    await import_journal.undo(runtime, pending)
    await import_journal.finish(runtime, pending)
