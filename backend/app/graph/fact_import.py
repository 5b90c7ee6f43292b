"""Import facts given as data: entities and edges written with embeddings and no LLM call.

`add_triplet` is not LLM-free (it may call the LLM for timestamps and dedupe), so the import
builds EntityNode/EntityEdge objects itself and bulk-writes them. All input is validated
before anything is written; if the write fails part way, what this import wrote is deleted
again, so a failed import leaves the graph as it was. A pending-import marker, written before
the first write, lets a crash part way be undone too (import_journal.py).

An import is idempotent per (source, relation, target, fact): a fact already stored, or given
twice, is stored once and counted in `skipped_duplicates`. Each fact is stored under a uuid that
its key and the graph's creation give (`fact_uuid`), so in a graph whose facts all are
(store.facts_keyed) the stored ones are found through the edge index, at a cost that does not
grow with the facts between two entities. A graph that also holds facts of text ingestion, or
was made before keyed facts, compares each fact with those between its two entities (a pair with
666 facts took 2.4 ms per fact on FalkorDB, and an import's rate fell with it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from datetime import datetime, timezone

from graphiti_core.edges import EntityEdge
from graphiti_core.nodes import EntityNode
from graphiti_core.utils.bulk_utils import add_nodes_and_edges_bulk

from app.graph import import_journal
from app.graph.fact_parsing import FactInput
from app.graph.store import (
    UnknownGraphError, cypher_rows, embedding_stored_texts_of, facts_keyed, graph_incarnation, validate_graph_id,
)

logger = logging.getLogger(__name__)

# Texts per embedder call. The in-process embedder runs one thread per text of a call, and on two
# cores its throughput falls as calls grow (about 60 texts/s at 16, 54 at 64, 48 at 256: the call's
# activations outgrow the cache); 64 stays above its interactive lane's 32, so searches never wait
# behind an import's chunk.
EMBED_CHUNK = 64
# Edges per write: the driver builds each query's parameters on the graph loop, which searches share,
# and FalkorDB holds the graph's write lock for the whole query; small writes keep both short.
WRITE_CHUNK = 250
# Which of these edges are stored: how an import finds a keyed graph's stored facts and checks that
# its own were written. The endpoints stay unlabelled: with `(:Entity)` on them FalkorDB scans every
# entity for each uuid instead of using the edge index (1,000 edges in a 20,000-edge graph: 229 s
# against 2 ms), and an import's time grew with the square of the graph.
STORED_EDGES_QUERY = "UNWIND $uuids AS u MATCH ()-[e:RELATES_TO {uuid: u}]->() RETURN e.uuid AS uuid"
# Fixed for good: a fact's uuid must stay what earlier imports stored it under.
FACT_UUID_NAMESPACE = uuid.UUID("5d0f3c64-8f1e-4b0a-9a53-2f6c1e7d9b41")


class ImportFailedError(RuntimeError):
    """The database failed during the import; nothing of it stays stored (503 import_failed)."""


class GraphChangedError(RuntimeError):
    """The graph was deleted (and maybe re-created) while the import was embedding (409)."""

    def __init__(self, graph_id: str):
        super().__init__(f"graph {graph_id!r} was deleted while the import ran; nothing was stored")
        self.graph_id = graph_id


def relation_name(relation: str) -> str:
    """Graphiti names edges in UPPER_SNAKE_CASE ('works for' -> 'WORKS_FOR')."""
    return re.sub(r"[^A-Za-z0-9]+", "_", relation).strip("_").upper() or "RELATES_TO"


async def _existing_entities(driver, graph_id: str, names: list[str]) -> dict[str, str]:
    # UNWIND + equality, not `n.name IN $names`: FalkorDB 1.4.1 crashes (SIGSEGV) on an indexed
    # IN-filter whose list holds a full-text stopword, i.e. an entity called "The" or "it".
    rows = await cypher_rows(
        driver,
        "UNWIND $names AS wanted MATCH (n:Entity {name: wanted}) WHERE n.group_id = $graph_id "
        "RETURN n.name AS name, n.uuid AS uuid",
        graph_id=graph_id, names=names,
    )
    return {row["name"]: row["uuid"] for row in rows}


def _new_entities(facts: list[FactInput], graph_id: str, existing: dict[str, str], now) -> dict[str, EntityNode]:
    created: dict[str, EntityNode] = {}
    for fact in facts:
        for name, summary, labels in (
            (fact.source, fact.source_summary, fact.source_labels),
            (fact.target, fact.target_summary, fact.target_labels),
        ):
            if name in existing:
                continue  # existing entities are never rewritten, so a failed import cannot damage them
            node = created.get(name)
            if node is None:
                created[name] = EntityNode(name=name, group_id=graph_id, summary=summary,
                                           labels=list(labels), created_at=now)
            else:
                node.summary = node.summary or summary
                node.labels = list(dict.fromkeys(node.labels + labels))
    return created


async def _stored_fact_keys(runtime, driver, graph_id: str, facts: list[FactInput], existing: dict[str, str],
                            fact_uuids: dict[tuple, str]) -> set[tuple]:
    """Keys of the given facts already stored: only a fact between two existing entities can be.
    In a keyed graph they are read by their uuids (`fact_uuids`), in any other by their entities."""
    facts = [f for f in facts if f.source in existing and f.target in existing]
    if not facts:
        return set()
    if await facts_keyed(runtime, graph_id):
        key_of = {fact_uuids[_fact_key(f)]: _fact_key(f) for f in facts}
        rows = await cypher_rows(driver, STORED_EDGES_QUERY, uuids=list(key_of))
        return {key_of[row["uuid"]] for row in rows}
    keys = [{"source": f.source, "target": f.target, "relation": relation_name(f.relation), "fact": f.fact}
            for f in facts]
    rows = await cypher_rows(
        driver,
        "UNWIND $keys AS k MATCH (s:Entity {name: k.source})-[e:RELATES_TO]->(t:Entity {name: k.target}) "
        "WHERE s.group_id = $graph_id AND e.name = k.relation AND e.fact = k.fact "
        "RETURN DISTINCT k.source AS source, k.relation AS relation, k.target AS target, k.fact AS fact",
        graph_id=graph_id, keys=keys,
    )
    return {(row["source"], row["relation"], row["target"], row["fact"]) for row in rows}


def _fact_key(fact: FactInput) -> tuple[str, str, str, str]:
    """What makes two facts the same fact: an import stores each key once per graph."""
    return fact.source, relation_name(fact.relation), fact.target, fact.fact


def fact_uuid(graph_id: str, incarnation: str, key: tuple[str, str, str, str]) -> str:
    """The uuid an import stores a fact under: the same key in the same creation of a graph, the same uuid."""
    return str(uuid.uuid5(FACT_UUID_NAMESPACE, json.dumps([graph_id, incarnation, *key])))


def _distinct(facts: list[FactInput]) -> list[FactInput]:
    """The first fact of each key, in input order."""
    return list({_fact_key(fact): fact for fact in reversed(facts)}.values())[::-1]


async def _embed_missing(embedder, texts: list[str], vectors: dict[str, list[float]]) -> None:
    """Embed the texts `vectors` lacks, in chunks, so that one large import is many short calls."""
    missing = list(dict.fromkeys(text for text in texts if text not in vectors))
    for start in range(0, len(missing), EMBED_CHUNK):
        chunk = missing[start:start + EMBED_CHUNK]
        vectors.update(zip(chunk, await embedder.create_batch([text.replace("\n", " ") for text in chunk])))


def _edges(facts: list[FactInput], graph_id: str, uuid_of: dict[str, str], fact_uuids: dict[tuple, str],
           now) -> list[EntityEdge]:
    return [
        EntityEdge(
            uuid=fact_uuids[_fact_key(fact)],
            group_id=graph_id,
            source_node_uuid=uuid_of[fact.source],
            target_node_uuid=uuid_of[fact.target],
            name=relation_name(fact.relation),
            fact=fact.fact,
            episodes=[],
            created_at=now,
            valid_at=fact.valid_at,
            invalid_at=fact.invalid_at,
            expired_at=now if fact.invalid_at and fact.invalid_at <= now else None,
            attributes=fact.metadata,
        )
        for fact in facts
    ]


async def import_facts(runtime, graph_id: str, facts: list[FactInput]) -> dict:
    """Write facts to one graph; answer {'imported', 'skipped_duplicates', 'entities', 'entities_created'}.

    The slow part, embedding, runs first and outside the graph's lock; reading what is stored and
    writing run under it, so concurrent imports share entities and facts, and a delete of the graph
    either waits for the writes or makes this import fail with GraphChangedError, storing nothing.
    Any failure of the database answers ImportFailedError, with nothing left stored."""
    validate_graph_id(graph_id)
    try:
        async with embedding_stored_texts_of(runtime, graph_id):
            return await _import(runtime, graph_id, facts)
    except (UnknownGraphError, GraphChangedError, ImportFailedError, asyncio.CancelledError):
        raise
    except Exception as error:  # the database is down or failed before the first write
        logger.error("Import into %s failed before writing (%s)", graph_id, type(error).__name__)
        raise ImportFailedError(f"import failed, nothing was stored: {type(error).__name__}") from error


async def _import(runtime, graph_id: str, facts: list[FactInput]) -> dict:
    incarnation = await graph_incarnation(runtime, graph_id)
    driver = runtime.driver_for(graph_id)
    embedder = runtime.graphiti.embedder
    distinct = _distinct(facts)
    fact_uuids = {_fact_key(f): fact_uuid(graph_id, incarnation, _fact_key(f)) for f in distinct}
    names = list(dict.fromkeys(name for fact in distinct for name in (fact.source, fact.target)))
    # Outside the lock, a guess of what is stored saves embedding it; it is read again below.
    guess = await _existing_entities(driver, graph_id, names)
    known = await _stored_fact_keys(runtime, driver, graph_id, distinct, guess, fact_uuids)
    vectors: dict[str, list[float]] = {}
    await _embed_missing(embedder, [n for n in names if n not in guess], vectors)
    await _embed_missing(embedder, [f.fact for f in distinct if _fact_key(f) not in known], vectors)

    async with runtime.graph_lock(graph_id):
        if await _incarnation_now(runtime, graph_id) != incarnation:
            raise GraphChangedError(graph_id)
        await import_journal.recover_graph(runtime, graph_id)  # leftovers of a crashed import first
        driver = runtime.driver_for(graph_id)
        now = datetime.now(timezone.utc)
        existing = await _existing_entities(driver, graph_id, names)
        stored = await _stored_fact_keys(runtime, driver, graph_id, distinct, existing, fact_uuids)
        new_facts = [fact for fact in distinct if _fact_key(fact) not in stored]
        created = _new_entities(new_facts, graph_id, existing, now)
        uuid_of = {**existing, **{name: node.uuid for name, node in created.items()}}
        edges = _edges(new_facts, graph_id, uuid_of, fact_uuids, now)
        nodes = list(created.values())
        await _embed_missing(embedder, [n.name for n in nodes] + [e.fact for e in edges], vectors)
        for node in nodes:
            node.name_embedding = vectors[node.name]
        for edge in edges:
            edge.fact_embedding = vectors[edge.fact]
        await _write(runtime, graph_id, nodes, edges)
    return {"imported": len(edges), "skipped_duplicates": len(facts) - len(edges),
            "entities": len(names), "entities_created": len(nodes)}


async def _incarnation_now(runtime, graph_id: str) -> str | None:
    try:
        return await graph_incarnation(runtime, graph_id)
    except UnknownGraphError:
        return None


async def _write(runtime, graph_id: str, nodes: list[EntityNode], edges: list[EntityEdge]) -> None:
    """Write under a pending-import marker; verify; on any failure undo, or leave the marker for
    recovery when the database cannot be reached to undo."""
    if not edges:
        return
    pending = await import_journal.begin(runtime, graph_id, [n.uuid for n in nodes], [e.uuid for e in edges])
    try:
        driver = runtime.driver_for(graph_id)
        for start in range(0, len(edges), WRITE_CHUNK):  # entities with the first chunk (one query each)
            await add_nodes_and_edges_bulk(driver, [], [], nodes if start == 0 else [],
                                           edges[start:start + WRITE_CHUNK], runtime.graphiti.embedder)
        await _verify_stored(driver, edges)
        await import_journal.finish(runtime, pending)
    except BaseException as error:  # also a cancelled import (its deadline passed): nothing half-written stays
        undone = await _roll_back(runtime, pending, error)
        if not isinstance(error, Exception):
            raise
        reason = str(error) if isinstance(error, ImportFailedError) else type(error).__name__
        if undone:
            raise ImportFailedError(f"import failed and was rolled back: {reason}") from error
        raise ImportFailedError(f"import failed ({reason}); what it wrote is removed as soon as the "
                                "database answers again") from error


async def _verify_stored(driver, edges: list[EntityEdge]) -> None:
    """'imported: N' is said only for N edges the database holds (an edge is only written between
    its two entities, so it cannot exist without them)."""
    rows = await cypher_rows(driver, STORED_EDGES_QUERY, uuids=[edge.uuid for edge in edges])
    stored = len(rows)
    if stored != len(edges):
        raise ImportFailedError(f"only {stored} of {len(edges)} facts were stored")


async def _roll_back(runtime, pending, error: BaseException) -> bool:
    """Undo the import now if the database lets us; answers whether it did."""
    try:
        await import_journal.undo(runtime, pending)
        await import_journal.finish(runtime, pending)
    except Exception as undo_error:  # the database is gone: recovery undoes it when it is back
        runtime.recovery_due = True
        logger.error("Import into %s failed (%s) and could not be undone now (%s); it will be undone "
                     "when the database answers again", pending.graph_id, type(error).__name__,
                     type(undo_error).__name__)
        return False
    logger.error("Import into %s failed (%s); nothing was kept", pending.graph_id, type(error).__name__)
    return True
