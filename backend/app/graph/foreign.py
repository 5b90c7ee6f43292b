"""Graphs in the database that this app did not create: Graphiti group_ids written by another
Graphiti application (add_episode, add_triplet, bulk writes) on the same database, and how one is
adopted, so that search, reads, export and reports work on it where it lies.

Where they are: on Neo4j every group_id of the one database that the registry does not list; on
FalkorDB, where Graphiti keeps each group_id in a graph of its own name, every such graph (a group
kept in a graph of another name, e.g. Graphiti's `default_db`, is listed but cannot be adopted: the
app reads a graph id from the graph of that name).

Adopting registers the group (store.py's `MiroGraph`) and changes none of its data. Its facts keep
Graphiti's random uuids, so it is registered as not keyed (fact imports compare by entities), and its
stored texts count as passages (what this app's embedder, like Graphiti's own use of it, embeds a
stored text as). Its vectors were made by the other application's embedder: a search compares them
with a query embedded here, so a graph whose vectors have another length than this app's embedder
makes is refused (EmbeddingMismatchError, 409), naming both lengths, unless the adoption asks to
embed its names and facts again (`reembed`), which replaces its vectors with this app's.
"""

from __future__ import annotations

import logging
import secrets
from datetime import datetime, timezone

from app.graph import store as graph_store
from app.graph.fact_import import EMBED_CHUNK
from app.graph.store import REGISTRY_GRAPH, cypher_rows
from app.graph.timestamps import iso
from app.graph.vector_index import VectorIndexSearch, ensure_vector_index

logger = logging.getLogger(__name__)

REEMBED_PAGE = 500  # texts read, embedded and written back per step


class UnknownForeignGraphError(LookupError):
    def __init__(self, group_id: str):
        super().__init__(f"no Graphiti group {group_id!r} is stored in this database")
        self.graph_id = group_id


class EmbeddingMismatchError(ValueError):
    def __init__(self, group_id: str, stored: int, ours: int):
        super().__init__(
            f"graph {group_id!r} holds {stored}-dimensional vectors, but this app's embedder makes {ours}: "
            "its search would compare vectors of different embedders. Adopt it with {\"reembed\": true} to "
            "embed its entity names and facts again with this app's embedder")
        self.graph_id, self.stored, self.ours = group_id, stored, ours


async def list_foreign(runtime) -> list[dict]:
    """Every group with entities, facts or episodes that the registry does not list, with its counts,
    whether it can be adopted, and if not, why. Reads only: nothing is written to another's graph."""
    registered = {graph["graph_id"] for graph in await graph_store.list_graphs(runtime)}
    groups: dict = {}
    for graph_name in await _graph_names(runtime):
        for group_id, counts in (await _group_counts(runtime, graph_name)).items():
            if group_id not in groups or graph_name == group_id:  # a graph of the group's own name comes first
                groups[group_id] = (graph_name, counts)
    found = []
    for group_id, (graph_name, counts) in sorted(groups.items(), key=lambda item: str(item[0])):
        if group_id in registered and (not runtime.is_falkordb or graph_name == group_id):
            continue
        found.append({"group_id": group_id, **counts, **_adoptable(runtime, group_id, graph_name)})
    return found


def _adoptable(runtime, group_id, graph_name: str | None) -> dict:
    try:
        graph_store.validate_graph_id(group_id)
    except ValueError as error:
        return {"adoptable": False, "reason": f"not a graph id this app can name: {error}"}
    if runtime.is_falkordb and graph_name != group_id:
        return {"adoptable": False, "reason": f"kept in FalkorDB graph {graph_name!r}, not one named after it"}
    return {"adoptable": True}


async def _graph_names(runtime) -> list[str | None]:
    """FalkorDB: every graph but the registry. Neo4j: [None], its one database."""
    if not runtime.is_falkordb:
        return [None]
    names = [name.decode() if isinstance(name, bytes) else str(name)
             for name in await runtime.driver.client.list_graphs()]
    return [name for name in names if name != REGISTRY_GRAPH]


async def _read(runtime, graph_name: str | None, query: str, **params) -> list[dict]:
    """A read-only query. On FalkorDB straight through the client: a Graphiti driver made for a graph
    schedules its index build there, which would write to another application's graph (or make one)."""
    if graph_name is None:
        return await cypher_rows(runtime.driver, query, **params)
    result = await runtime.driver.client.select_graph(graph_name).ro_query(query, params)
    names = [column[1] for column in result.header]
    return [dict(zip(names, row)) for row in result.result_set]


_COUNTS = (("entities", "MATCH (n:Entity) {where} RETURN n.group_id AS group_id, count(*) AS n"),
           ("facts", "MATCH ()-[n:RELATES_TO]->() {where} RETURN n.group_id AS group_id, count(*) AS n"),
           ("episodes", "MATCH (n:Episodic) {where} RETURN n.group_id AS group_id, count(*) AS n"))


async def _group_counts(runtime, graph_name: str | None, group_id: str | None = None) -> dict[str, dict]:
    """{group_id: {entities, facts, episodes}} of one FalkorDB graph (or the Neo4j database), of every
    group in it or of `group_id` only."""
    counts: dict[str, dict] = {}
    where = "WHERE n.group_id = $group_id" if group_id is not None else ""
    for key, query in _COUNTS:
        for row in await _read(runtime, graph_name, query.format(where=where), group_id=group_id):
            counts.setdefault(row["group_id"], {"entities": 0, "facts": 0, "episodes": 0})[key] = int(row["n"])
    return counts


async def adopt_graph(runtime, group_id: str, name: str | None, reembed: bool) -> dict:
    """Register a foreign group as this app's graph; GraphExistsError if it is one already,
    UnknownForeignGraphError if nothing is stored under it, EmbeddingMismatchError (see above)."""
    graph_store.validate_graph_id(group_id)
    async with runtime.graph_lock(group_id):
        if await graph_store.graph_exists(runtime, group_id):
            raise graph_store.GraphExistsError(group_id)
        graph_name = group_id if runtime.is_falkordb else None
        if runtime.is_falkordb and group_id not in await _graph_names(runtime):
            raise UnknownForeignGraphError(group_id)
        counts = (await _group_counts(runtime, graph_name, group_id)).get(group_id)
        if not counts:
            raise UnknownForeignGraphError(group_id)
        driver = runtime.driver_for(group_id)
        stored = await stored_dimension(driver, group_id)
        dimension = await embedder_dimension(runtime.graphiti.embedder)
        if stored is not None and stored != dimension and not reembed:
            raise EmbeddingMismatchError(group_id, stored, dimension)
        if reembed:
            await _reembed(runtime, driver, group_id)
        record = await _register(runtime, group_id, name)
        if runtime.is_falkordb:  # a graph of another Graphiti app may lack this app's indexes
            await driver.build_indices_and_constraints()
            hook = driver.search_interface
            if isinstance(hook, VectorIndexSearch) and hook.min_facts <= counts["facts"]:
                await ensure_vector_index(driver, hook.dimension)
    logger.info("Adopted graph %s (%s)%s", group_id, counts, ", its texts embedded again" if reembed else "")
    return {**record, **counts, "vector_dimension": dimension if reembed else stored, "reembedded": reembed}


async def stored_dimension(driver, group_id: str) -> int | None:
    """The length of the group's stored vectors (a fact's, else an entity name's); None without any."""
    for query in ("MATCH ()-[e:RELATES_TO]->() WHERE e.group_id = $group_id AND e.fact_embedding IS NOT NULL "
                  "RETURN e.fact_embedding AS vector LIMIT 1",
                  "MATCH (n:Entity) WHERE n.group_id = $group_id AND n.name_embedding IS NOT NULL "
                  "RETURN n.name_embedding AS vector LIMIT 1"):
        rows = await cypher_rows(driver, query, group_id=group_id)
        if rows and rows[0]["vector"] is not None:
            return len(rows[0]["vector"])
    return None


async def embedder_dimension(embedder) -> int:
    """The length of the vectors this app's embedder makes, asked of the embedder itself (whatever
    EMBEDDING_PROVIDER it is): one short text."""
    return len((await embedder.create_batch(["dimension"]))[0])


async def _reembed(runtime, driver, group_id: str) -> None:
    """Every entity name and fact of the group embedded again by this app's embedder, as passages."""
    embedder = runtime.graphiti.embedder
    falkor = runtime.is_falkordb
    for match, key, text, write in (
            ("MATCH (n:Entity) WHERE n.group_id = $group_id AND n.uuid > $after", "n.uuid", "n.name",
             "UNWIND $rows AS r MATCH (n:Entity {uuid: r.uuid}) " +
             ("SET n.name_embedding = vecf32(r.vector)" if falkor else
              "CALL db.create.setNodeVectorProperty(n, 'name_embedding', r.vector)")),
            ("MATCH ()-[e:RELATES_TO]->() WHERE e.group_id = $group_id AND e.uuid > $after", "e.uuid", "e.fact",
             "UNWIND $rows AS r MATCH ()-[e:RELATES_TO {uuid: r.uuid}]->() " +
             ("SET e.fact_embedding = vecf32(r.vector)" if falkor else
              "CALL db.create.setRelationshipVectorProperty(e, 'fact_embedding', r.vector)"))):
        after = ""
        while True:
            rows = await cypher_rows(driver, f"{match} RETURN {key} AS uuid, {text} AS text "
                                             f"ORDER BY {key} LIMIT $limit",
                                     group_id=group_id, after=after, limit=REEMBED_PAGE)
            texts = [(row["text"] or "").replace("\n", " ") for row in rows]
            vectors: list = []
            for start in range(0, len(texts), EMBED_CHUNK):
                vectors += await embedder.create_batch(texts[start:start + EMBED_CHUNK])
            if rows:
                await cypher_rows(driver, write, rows=[{"uuid": row["uuid"], "vector": vector}
                                                       for row, vector in zip(rows, vectors)])
            if len(rows) < REEMBED_PAGE:
                break
            after = rows[-1]["uuid"]


async def _register(runtime, group_id: str, name: str | None) -> dict:
    created_at = datetime.now(timezone.utc).isoformat()
    rows = await cypher_rows(
        runtime.driver_for(REGISTRY_GRAPH),
        "MERGE (g:MiroGraph {graph_id: $graph_id}) "
        "ON CREATE SET g.name = $name, g.created_at = $created_at, g.incarnation = $incarnation, "
        "g.keyed_facts = false, g.passage_vectors = true, g.adopted = true "
        "RETURN g.graph_id AS graph_id, g.name AS name, g.created_at AS created_at",
        graph_id=group_id, name=name or group_id, created_at=created_at, incarnation=secrets.token_hex(8),
    )
    return {"graph_id": rows[0]["graph_id"], "name": rows[0]["name"], "created_at": iso(rows[0]["created_at"])}
