"""A vector index under the semantic half of the first stage (GRAPH_VECTOR_INDEX=on).

Graphiti's edge similarity search computes the cosine between the query and every fact of the graph
in Cypher, so the first stage grows linearly with the graph. Both databases keep an HNSW index over a
relationship property; `VectorIndexSearch`, set as the driver's `search_interface` (Graphiti's search
hook, app/graph/search_hook.py), answers the edge similarity search from it and leaves every other
search, and any similarity search with endpoints, to the hook it extends.

A search with filters (app/graph/search_filters.py) reads the index's nearest facts in growing numbers and keeps
those that pass the filters, nearest first, until `limit` pass or the index has no more: a fact the index placed
farther out is farther than every one kept, so the kept are the nearest that pass. A filter too narrow for
MAX_ASKED hits to hold `limit` of its facts takes the exact path, which filters in the scan.

- FalkorDB: each graph of ours is a FalkorDB graph with its own index, so the index's hits are the
  graph's. After the database reloads a graph from disk its index answers each fact twice (and
  deduplicates, so k hits are fewer than k facts), and the HNSW search finds more of the true nearest
  the more hits it is asked for: the index is asked for 8 times `limit`, and more while fewer come
  back and more could.
- Neo4j: one index holds every graph's facts. The nearest facts of other graphs take slots, so the
  index is asked for more than `limit` (OVERFETCH times, doubled while the graph's facts fall short
  and more could qualify, up to MAX_ASKED), then filtered by group_id. The index ranks quantized
  vectors, so the hits are scored again exactly, and the search also asks for more while a fact left
  out could still score above the cut. A graph that still falls short is answered by the exact path,
  never with facts missing.

A graph with fewer than GRAPH_VECTOR_INDEX_MIN_FACTS facts answers from the exact path: there the scan
costs no more than the index and is exact. On Neo4j the one index is created at start. On FalkorDB a
graph gets its index on the first search that finds it at GRAPH_VECTOR_INDEX_MIN_FACTS facts or more
(with the graph when that is 0), never before: FalkorDB ranks a graph's full-text hits differently once
the graph has a vector index (on the demo's sample graph, 5 of the 12 keyword hits for its first
question), so a graph too small to gain from the index keeps the keyword ranking it had. While the
database is still building an index the search takes the exact path. FalkorDB builds a stored graph's
index as part of loading it, before it answers anything: a restart over a large graph takes longer
(app/graph/embedded_falkordb.py waits for the load).

Scores are Graphiti's: the cosine mapped onto [0, 1] ((1 + cosine) / 2; FalkorDB's index answers the
cosine distance d = 1 - cosine, so (2 - d) / 2; Neo4j's answers that value itself), kept at
`min_score` or above, as the exact path keeps them.
"""

from __future__ import annotations

import logging
import time

from graphiti_core.driver.driver import GraphProvider
from graphiti_core.edges import EntityEdge
from graphiti_core.search import search_utils
from graphiti_core.search.search_filters import SearchFilters
from neo4j.exceptions import ClientError as Neo4jClientError
from pydantic import PrivateAttr

from app.graph.search_hook import GraphSearch, admitted, edges_by_uuid, exact

logger = logging.getLogger(__name__)

NEO4J_INDEX = "fact_embedding_vectors"
OVERFETCH = 4  # Neo4j: first ask for this many times `limit`
# FalkorDB: first ask for 8 times `limit`. FalkorDB 1.4.1 holds each fact twice in a relationship vector
# index it rebuilt while loading a graph from disk, and answers k hits as k/2 distinct facts; facts
# written since count once (measured: after a restart, k=20 gave 10 facts, k=40 the exact top 20).
# The other factor 4 is for the HNSW search itself, which looks at more candidates the more hits are
# asked: over 100,000 facts with real embeddings, recall@20 against the exact cosine was 0.954 asking
# 2x, 0.985 at 4x and 0.9925 at 8x, for 1.6, 2.4 and 3.9 ms per index query (docs/bench/SCALE.md).
FALKORDB_OVERFETCH = 8
MAX_ASKED = 4096  # beyond this many index hits, the exact path is cheaper anyway
RECOUNT_AFTER_S = 30.0  # a graph below min_facts is counted again after this long (it may be growing)
# Counts no further than $n: the cost of the check stays that of min_facts facts however large the graph.
COUNT_UP_TO_QUERY = ("MATCH ()-[e:RELATES_TO]->() WHERE e.group_id IN $group_ids "
                     "WITH e LIMIT $n RETURN count(e) AS facts")
COUNT_ALL_UP_TO_QUERY = "MATCH ()-[e:RELATES_TO]->() WITH e LIMIT $n RETURN count(e) AS facts"

FALKORDB_STATE_QUERY = ("CALL db.indexes() YIELD label, types, entitytype, status "
                        "RETURN label, types, entitytype, status")
FALKORDB_NEAREST_QUERY = (
    "CALL db.idx.vector.queryRelationships('RELATES_TO', 'fact_embedding', $k, vecf32($vector)) "
    "YIELD relationship, score RETURN relationship.uuid AS uuid, (2 - score) / 2 AS score")
NEO4J_STATE_QUERY = "SHOW INDEXES YIELD name, state WHERE name = $name RETURN state"
# Neo4j's index answers scores computed on the quantized vectors it holds, which reorder facts whose cosines
# differ by less than about 0.001 (over 10,000 near-duplicate facts 7% of the exact top 20 fell out at the cut,
# however many hits were asked). The hits are scored again with the stored vector, by the function
# Graphiti's exact path uses, so the cut falls where the exact path puts it; the index's own score comes too.
NEO4J_NEAREST_QUERY = (
    "CALL db.index.vector.queryRelationships($name, $k, $vector) YIELD relationship AS e, score AS index_score "
    "RETURN e.uuid AS uuid, e.group_id AS group_id, index_score, "
    "vector.similarity.cosine(e.fact_embedding, $vector) AS score")
# A fact Neo4j's index left out has an index score no higher than its lowest hit's, and an exact score off its
# index score by about as much as the hits' are: the search asks for more while that lowest index score plus
# this many times the hits' largest error reaches the cut. The error depends on the vectors (up to 0.0031 over
# crowded near-duplicates of real embeddings, 0.0071 over the bench's stand-in vectors; docs/bench/SCALE.md),
# so it is read from each answer rather than fixed.
NEO4J_ERROR_FACTOR = 2.0


def create_query(provider: GraphProvider, dimension: int) -> str:
    # DDL takes no parameters; the dimension is an int from the settings.
    if provider == GraphProvider.FALKORDB:
        return ("CREATE VECTOR INDEX FOR ()-[e:RELATES_TO]-() ON (e.fact_embedding) "
                f"OPTIONS {{dimension: {int(dimension)}, similarityFunction: 'cosine'}}")
    return (f"CREATE VECTOR INDEX {NEO4J_INDEX} IF NOT EXISTS FOR ()-[e:RELATES_TO]-() ON (e.fact_embedding) "
            f"OPTIONS {{indexConfig: {{`vector.dimensions`: {int(dimension)}, "
            "`vector.similarity_function`: 'cosine'}}")


async def index_state(driver) -> str | None:
    """'ready', 'building' or None (no index) for the fact vector index the driver's searches read."""
    if driver.provider == GraphProvider.FALKORDB:
        records, _, _ = await driver.execute_query(FALKORDB_STATE_QUERY)
        for record in records:
            types = record["types"] or {}
            if (record["label"] == "RELATES_TO" and record["entitytype"] == "RELATIONSHIP"
                    and "VECTOR" in (types.get("fact_embedding") or [])):
                return "ready" if record["status"] == "OPERATIONAL" else "building"
        return None
    records, _, _ = await driver.execute_query(NEO4J_STATE_QUERY, name=NEO4J_INDEX)
    if not records:
        return None
    return "ready" if records[0]["state"] == "ONLINE" else "building"


async def ensure_vector_index(driver, dimension: int) -> None:
    """Create the fact vector index unless there is one; the database builds it in the background.

    Replicas and workers that start together on a new Neo4j all read "no index" and all create it:
    Neo4j answers all but the first EquivalentSchemaRuleAlreadyExists, even with IF NOT EXISTS, and
    that process's start must not fail for it."""
    if await index_state(driver) is None:
        try:
            await driver.execute_query(create_query(driver.provider, dimension))
        except Neo4jClientError as error:  # another process created it at the same moment
            if "EquivalentSchemaRuleAlreadyExists" not in str(error):
                raise
            return
        logger.info("Vector index over the facts created (%d-d, cosine); the database builds it now", dimension)


class VectorIndexSearch(GraphSearch):
    """Graphiti's search hook: the edge similarity search from the vector index, all else as GraphSearch."""

    dimension: int
    # Graphs with fewer facts answer exactly: there the scan is as fast (80 ms against 93 ms at 1,000
    # facts, 124 against 99 at 10,000) and exact. 0: the index for every graph.
    min_facts: int = 0
    ready: bool = False  # once the index answered, it stays built (a restart makes a new runtime)
    _large: dict = PrivateAttr(default_factory=dict)  # group ids -> (True, 0) or (False, when to count again)

    async def edge_similarity_search(self, driver, search_vector, source_node_uuid, target_node_uuid,
                                     search_filter, group_ids=None, limit=search_utils.RELEVANT_SCHEMA_LIMIT,
                                     min_score=search_utils.DEFAULT_MIN_SCORE) -> list[EntityEdge]:
        plain = exact(driver)
        no_endpoints = source_node_uuid is None and target_node_uuid is None
        if no_endpoints and await self._large_enough(plain, group_ids) and await self._index_ready(plain):
            if search_filter == SearchFilters():
                found = await nearest_facts(plain, search_vector, limit, min_score, group_ids)
            else:
                found = await nearest_passing_facts(plain, search_vector, limit, min_score, group_ids, search_filter)
            if found is not None:
                return found
        return await search_utils.edge_similarity_search(plain, search_vector, source_node_uuid, target_node_uuid,
                                                         search_filter, group_ids, limit, min_score)

    async def _large_enough(self, driver, group_ids: list[str] | None) -> bool:
        """Whether the graph holds min_facts facts; a graph found smaller is counted again after a while."""
        if self.min_facts <= 0:
            return True
        key = tuple(sorted(group_ids)) if group_ids else None
        large, recount_at = self._large.get(key, (False, 0.0))
        if large or time.monotonic() < recount_at:
            return large
        if key:
            records, _, _ = await driver.execute_query(COUNT_UP_TO_QUERY, group_ids=list(key), n=self.min_facts)
        else:
            records, _, _ = await driver.execute_query(COUNT_ALL_UP_TO_QUERY, n=self.min_facts)
        large = bool(records) and records[0]["facts"] >= self.min_facts
        self._large[key] = (large, time.monotonic() + RECOUNT_AFTER_S)
        return large

    async def _index_ready(self, driver) -> bool:
        if not self.ready:
            state = await index_state(driver)
            if state is None:
                await ensure_vector_index(driver, self.dimension)
            self.ready = state == "ready"
        return self.ready


def default_overfetch(driver) -> int:
    """Hits a search first asks the index for, per fact wanted, on this driver's database."""
    return FALKORDB_OVERFETCH if driver.provider == GraphProvider.FALKORDB else OVERFETCH


async def nearest_facts(driver, vector: list[float], limit: int, min_score: float,
                        group_ids: list[str] | None = None, *, overfetch: int | None = None) -> list[EntityEdge] | None:
    """The `limit` facts nearest `vector` by the index, scored at least `min_score`, nearest first;
    None when the index cannot tell them without reading too much (Neo4j: take the exact path).
    `overfetch`: hits first asked per fact wanted (default: `default_overfetch`)."""
    uuids = await _nearest_uuids(driver, list(vector), limit, min_score, group_ids, overfetch)
    if not uuids:
        return uuids
    by_uuid = {edge.uuid: edge for edge in await edges_by_uuid(driver, uuids)}
    return [by_uuid[uuid] for uuid in uuids if uuid in by_uuid]


async def nearest_passing_facts(driver, vector: list[float], limit: int, min_score: float, group_ids: list[str] | None,
                                search_filter: SearchFilters) -> list[EntityEdge] | None:
    """The `limit` facts nearest `vector` by the index among those that pass `search_filter`, nearest first;
    None when the share that passes says MAX_ASKED of the index's facts would hold fewer, and for a filter on
    a fact's ends or uuids, whose few facts the exact path reaches through them (take the exact path)."""
    if any(ends is not None for ends in (search_filter.edge_source_node_uuids, search_filter.edge_target_node_uuids,
                                         search_filter.edge_uuids)):
        return None
    asked = limit * default_overfetch(driver)
    while True:
        uuids = await _nearest_uuids(driver, list(vector), asked, min_score, group_ids, overfetch=1)
        if uuids is None:
            return None
        passing = await admitted(driver, search_filter, uuids)
        kept = [uuid for uuid in uuids if uuid in passing][:limit]
        if len(kept) == limit or len(uuids) < asked:  # enough, or every fact the index holds above min_score seen
            by_uuid = {edge.uuid: edge for edge in await edges_by_uuid(driver, kept)}
            return [by_uuid[uuid] for uuid in kept if uuid in by_uuid]
        needed = asked * limit // max(len(kept), 1)  # as the share that passed says (none: at least this many)
        if needed > MAX_ASKED or asked >= MAX_ASKED:
            logger.debug("Vector index: %d facts pass the filters in %d nearest; exact path", len(kept), asked)
            return None
        asked = min(MAX_ASKED, max(2 * asked, needed))


async def _nearest_uuids(driver, vector, limit, min_score, group_ids, overfetch) -> list[str] | None:
    """Asks the index for more than `limit` and doubles while the cut is not settled: on FalkorDB while
    a reloaded graph's facts, each taking two of the index's hits, fall short; on Neo4j while other
    graphs' facts take the slots, or a fact left out could still belong above the cut. None: the index
    cannot tell without reading too much."""
    falkordb = driver.provider == GraphProvider.FALKORDB
    asked, answered_before = limit * (overfetch or default_overfetch(driver)), -1
    while True:
        if falkordb:  # one index per graph: its hits are the graph's
            records, _, _ = await driver.execute_query(FALKORDB_NEAREST_QUERY, k=asked, vector=vector)
        else:
            records, _, _ = await driver.execute_query(NEO4J_NEAREST_QUERY, name=NEO4J_INDEX, k=asked, vector=vector)
        records = sorted(records, key=lambda record: -record["score"])
        own = {}  # uuid -> score, nearest first, deduplicated
        for record in records:
            if record["score"] >= min_score and (falkordb or group_ids is None or record["group_id"] in group_ids):
                own.setdefault(record["uuid"], record["score"])
        kept = list(own)
        # The index has no more (Neo4j answers fewer than asked; FalkorDB, whose answer is deduplicated,
        # no more than before), or nothing it left out could still reach the cut.
        exhausted = len(records) == answered_before or (not falkordb and len(records) < asked)
        if exhausted or _cut_settled(records, list(own.values()), limit, min_score, falkordb):
            return kept[:limit]
        if asked >= MAX_ASKED:
            logger.debug("Vector index: %d of the graph's facts in %d hits asked; exact path", len(kept), asked)
            return None
        asked, answered_before = min(asked * 2, MAX_ASKED), len(records)


def _cut_settled(records, own_scores: list[float], limit: int, min_score: float, falkordb: bool) -> bool:
    """Whether no fact the index left out can score above the cut: the limit-th of the graph's facts
    held, or `min_score` while fewer are held. FalkorDB's index scores are exact (its misses are the
    HNSW search's, which asking more only makes rarer); Neo4j's rank quantized vectors (NEO4J_ERROR_FACTOR)."""
    if not records or (falkordb and len(own_scores) >= limit):
        return True
    cut = own_scores[limit - 1] if len(own_scores) >= limit else min_score
    if falkordb:
        return records[-1]["score"] < cut
    error = max(abs(record["index_score"] - record["score"]) for record in records)
    return min(record["index_score"] for record in records) + NEO4J_ERROR_FACTOR * error < cut
