"""Graphiti's search hook (`driver.search_interface`) on our graphs: Graphiti's own searches, except
that on FalkorDB the keyword half of the first stage ranks its hits before it reads them.

Graphiti's edge full-text search on FalkorDB reads every matching fact's fields, all its properties
(its embedding too), and only then sorts by score and keeps `limit`. A query whose words are common
matches a large share of the graph: 19,000 of 100,000 facts for "pressure at North Reservoir", and
that search took 97 ms of a 119 ms first stage. `GraphSearch` keeps the same hits, filters and order
but sorts the bare hits first and reads the fields of the `limit` it keeps.

Graphiti's checks on a hit (both ends Entity nodes, the fact in the searched group) cost twice the
full-text search itself when they run on every hit: over 1,000,000 of `bench scale`'s facts, of which
each of its queries hits about a quarter, 878 ms p50 against 281 ms (`bench first-stage-time`). They
hold for every fact the app wrote, so the keyword half ranks the bare hits, keeps `limit`, and checks
only those. When all pass they are the best `limit` of the hits that pass: the checks can only
remove hits, never reorder them. When one fails, the search runs again with the checks on every hit,
as Graphiti does (`checked_keyword_search`).

Both read a kept fact's fields as Graphiti does, except its embedding: Graphiti returns `properties(e)`
as the fact's attributes and drops the embedding in Python, after the database has sent its 384 floats
(22 ms for 20 facts against 2 ms without, over 100,000 facts). `edges_by_uuid` reads facts that way and
finds them through the uuid index: Graphiti's fetch by uuid took 72 ms p50 for the 20 facts the vector
index keeps over 100,000 facts, this one 5 ms.

Filters (search_filters.py) must narrow the hits before the limit, never after: the judge then reads as
many candidates of the filtered set as it would of the whole graph. Graphiti's FalkorDB queries do so; its
Neo4j keyword searches ask the full-text procedure for `limit` hits of the whole shared index and filter
those, so a filter that few of them pass leaves a handful or none. On Neo4j a keyword search with filters
is ours (`neo4j_filtered_keyword_search`): the procedure streams every hit, the filters run on each, and
the limit comes after.

On FalkorDB a keyword search with filters is Graphiti's own query with the filters among the checks on every
hit and the sort and the limit ahead of reading the fields, as `checked_keyword_search` runs it: Graphiti's
reads every passing hit's fields, embedding included, before it sorts.

Every other search runs Graphiti's own code on a copy of the driver without the hook (`exact`). `VectorIndexSearch` (vector_index.py) extends this hook with the
similarity half read from a vector index.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from graphiti_core.driver.driver import GraphProvider
from graphiti_core.driver.search_interface.search_interface import SearchInterface
from graphiti_core.edges import EntityEdge, get_entity_edge_from_record
from graphiti_core.models.edges.edge_db_queries import get_entity_edge_return_query
from graphiti_core.models.nodes.node_db_queries import get_entity_node_return_query
from graphiti_core.nodes import EntityNode, get_entity_node_from_record
from graphiti_core.search import search_utils
from graphiti_core.search.search_filters import (
    SearchFilters, edge_search_filter_query_constructor, node_search_filter_query_constructor,
)

logger = logging.getLogger(__name__)

_GRAPHITI_ATTRIBUTES = "properties(e) AS attributes"
assert _GRAPHITI_ATTRIBUTES in get_entity_edge_return_query(GraphProvider.FALKORDB), "Graphiti's edge fields changed"
# Graphiti's fields of a fact on FalkorDB, the attributes without the embedding (the key is kept, as
# null, and Graphiti's record reader drops it as it drops the stored vector).
FALKORDB_EDGE_FIELDS = get_entity_edge_return_query(GraphProvider.FALKORDB).replace(
    _GRAPHITI_ATTRIBUTES, "e {.*, fact_embedding: NULL} AS attributes")
# The uuid is matched on the bare relationship (its index answers) and the endpoint labels checked after:
# with the labels in the pattern FalkorDB walks the Entity nodes' relationships instead.
FALKORDB_EDGES_BY_UUID_QUERY = (
    "MATCH ()-[e:RELATES_TO]->() WHERE e.uuid IN $uuids "
    "WITH e, startNode(e) AS n, endNode(e) AS m WHERE n:Entity AND m:Entity RETURN " + FALKORDB_EDGE_FIELDS)
_FULLTEXT_HITS = "CALL db.idx.fulltext.queryRelationships('RELATES_TO', $query) YIELD relationship AS e, score "
_ENDPOINTS = "WITH e, score, startNode(e) AS n, endNode(e) AS m "
# Graphiti's checks on a hit; {group_filter} is "AND e.group_id IN $group_ids " when the search names groups,
# and with filters, "AND " and their conditions.
_HIT_CHECKS = "n:Entity AND m:Entity {group_filter}"
# The best `limit` hits ranked bare, read with whether each passes the checks.
FALKORDB_KEYWORD_QUERY = (
    _FULLTEXT_HITS + "WITH e, score ORDER BY score DESC LIMIT $limit " + _ENDPOINTS +
    "RETURN " + FALKORDB_EDGE_FIELDS + ", (" + _HIT_CHECKS + ") AS passes ORDER BY score DESC"
)
# Graphiti's own query with the sort and the limit moved ahead of reading the facts' fields: the checks
# run on every hit, before the limit, as Graphiti runs them.
FALKORDB_CHECKED_KEYWORD_QUERY = (
    _FULLTEXT_HITS + _ENDPOINTS + "WHERE " + _HIT_CHECKS + "WITH e, score ORDER BY score DESC LIMIT $limit "
    "RETURN " + FALKORDB_EDGE_FIELDS + " ORDER BY score DESC"
)


def exact(driver):
    """The same driver (same connection) without the hook: Graphiti's own search code."""
    plain = copy.copy(driver)
    plain.search_interface = None
    return plain


async def edges_by_uuid(driver, uuids: list[str]) -> list[EntityEdge]:
    """The facts with these uuids, in no particular order (Graphiti's `EntityEdge.get_by_uuids`)."""
    if driver.provider != GraphProvider.FALKORDB or not uuids:
        return await EntityEdge.get_by_uuids(driver, uuids)
    records, _, _ = await driver.execute_query(FALKORDB_EDGES_BY_UUID_QUERY, uuids=uuids, routing_="r")
    return [get_entity_edge_from_record(record, driver.provider) for record in records]


async def checked_keyword_search(driver, query: str, group_ids: list[str] | None, limit: int,
                                 search_filter: SearchFilters | None = None) -> list[EntityEdge]:
    """The keyword half with Graphiti's checks, and the filters, on every hit, as Graphiti runs them
    (FalkorDB): what `GraphSearch` falls back to, and how it runs a search with filters."""
    words = search_utils.fulltext_query(query, group_ids, driver)
    if not words:
        return []
    records = await _keyword_records(driver, FALKORDB_CHECKED_KEYWORD_QUERY, words, group_ids, limit,
                                     search_filter or SearchFilters())
    return [get_entity_edge_from_record(record, driver.provider) for record in records]


async def _keyword_records(driver, cypher: str, words: str, group_ids: list[str] | None, limit: int,
                           search_filter: SearchFilters = SearchFilters()) -> list:
    conditions, params = edge_search_filter_query_constructor(search_filter, driver.provider)
    if group_ids is not None:
        conditions.append("e.group_id IN $group_ids")
    checks = "".join(f"AND {condition} " for condition in conditions)
    records, _, _ = await driver.execute_query(cypher.replace("{group_filter}", checks),
                                               query=words, limit=limit, group_ids=group_ids, routing_="r", **params)
    return records


# Neo4j: the full-text procedures without Graphiti's `{limit: $limit}`, so that every hit meets the filters.
NEO4J_FILTERED_EDGE_KEYWORD_QUERY = (
    'CALL db.index.fulltext.queryRelationships("edge_name_and_fact", $query) YIELD relationship AS e, score '
    "WITH e, score, startNode(e) AS n, endNode(e) AS m WHERE n:Entity AND m:Entity AND {conditions} "
    "WITH e, score, n, m ORDER BY score DESC LIMIT $limit RETURN " + get_entity_edge_return_query(GraphProvider.NEO4J)
    + " ORDER BY score DESC")
NEO4J_FILTERED_NODE_KEYWORD_QUERY = (
    'CALL db.index.fulltext.queryNodes("node_name_and_summary", $query) YIELD node AS n, score '
    "WITH n, score WHERE {conditions} WITH n, score ORDER BY score DESC LIMIT $limit "
    "RETURN " + get_entity_node_return_query(GraphProvider.NEO4J) + " ORDER BY score DESC")


async def neo4j_filtered_keyword_search(driver, query: str, search_filter: SearchFilters,
                                        group_ids: list[str] | None, limit: int) -> list[EntityEdge]:
    """The best `limit` facts of the keyword search that pass `search_filter`, however far down the
    shared index's order they lie (Neo4j)."""
    conditions, params = edge_search_filter_query_constructor(search_filter, driver.provider)
    records = await _neo4j_filtered_records(driver, NEO4J_FILTERED_EDGE_KEYWORD_QUERY, "e", conditions, params,
                                            query, group_ids, limit)
    return [get_entity_edge_from_record(record, driver.provider) for record in records]


async def neo4j_filtered_node_keyword_search(driver, query: str, search_filter: SearchFilters,
                                             group_ids: list[str] | None, limit: int) -> list[EntityNode]:
    """The entities' keyword search with the labels filter before the limit (Neo4j)."""
    conditions, params = node_search_filter_query_constructor(search_filter, driver.provider)
    records = await _neo4j_filtered_records(driver, NEO4J_FILTERED_NODE_KEYWORD_QUERY, "n", conditions, params,
                                            query, group_ids, limit)
    return [get_entity_node_from_record(record, driver.provider) for record in records]


async def _neo4j_filtered_records(driver, cypher: str, alias: str, conditions: list[str], params: dict,
                                  query: str, group_ids: list[str] | None, limit: int) -> list:
    """One of the queries above with Graphiti's filter conditions on `alias` (and the graph ids) in place."""
    words = search_utils.fulltext_query(query, group_ids, driver)
    if not words:
        return []
    if group_ids is not None:
        conditions.append(f"{alias}.group_id IN $group_ids")
    cypher = cypher.replace("{conditions}", " AND ".join(conditions) or "true")
    records, _, _ = await driver.execute_query(cypher, query=words, limit=limit, group_ids=group_ids,
                                               routing_="r", **params)
    return records


# Candidates found some other way (a neighbourhood, a centre) checked against the filter, read by uuid
# through the edge index; {conditions} are Graphiti's own, on e and its ends n and m.
ADMITTED_QUERY = ("UNWIND $uuids AS wanted MATCH ()-[e:RELATES_TO {uuid: wanted}]->() "
                  "WITH e, startNode(e) AS n, endNode(e) AS m WHERE {conditions} RETURN e.uuid AS uuid")


async def admitted(driver, filters: SearchFilters, uuids: list[str]) -> set[str]:
    """Which of these facts pass `filters`, by Graphiti's own conditions."""
    conditions, params = edge_search_filter_query_constructor(filters, driver.provider)
    if not conditions or not uuids:
        return set(uuids)
    records, _, _ = await driver.execute_query(ADMITTED_QUERY.replace("{conditions}", " AND ".join(conditions)),
                                               uuids=uuids, routing_="r", **params)
    return {record["uuid"] for record in records}


def _graphiti_own(name: str):
    """The hook's method `name`: Graphiti's search of that name on the driver without the hook."""
    async def search(self, driver, *args: Any, **kwargs: Any):
        return await getattr(search_utils, name)(exact(driver), *args, **kwargs)

    search.__name__ = name
    return search


class GraphSearch(SearchInterface):
    """Graphiti's searches; on FalkorDB the unfiltered edge keyword search ranks before it reads, on
    Neo4j the filtered keyword searches filter before the limit."""

    async def edge_fulltext_search(self, driver, query: str, search_filter, group_ids: list[str] | None = None,
                                   limit: int = search_utils.RELEVANT_SCHEMA_LIMIT) -> list[EntityEdge]:
        if driver.provider != GraphProvider.FALKORDB:
            if search_filter != SearchFilters():
                return await neo4j_filtered_keyword_search(driver, query, search_filter, group_ids, limit)
            return await search_utils.edge_fulltext_search(exact(driver), query, search_filter, group_ids, limit)
        if search_filter != SearchFilters():
            return await checked_keyword_search(driver, query, group_ids, limit, search_filter)
        words = search_utils.fulltext_query(query, group_ids, driver)
        if not words:
            return []
        records = await _keyword_records(driver, FALKORDB_KEYWORD_QUERY, words, group_ids, limit)
        if not all(record["passes"] for record in records):
            logger.debug("Keyword search: a hit among the best %d failed Graphiti's checks; checking every hit", limit)
            return await checked_keyword_search(driver, query, group_ids, limit)
        return [get_entity_edge_from_record(record, driver.provider) for record in records]

    async def node_fulltext_search(self, driver, query: str, search_filter, group_ids: list[str] | None = None,
                                   limit: int = search_utils.RELEVANT_SCHEMA_LIMIT) -> list[EntityNode]:
        if driver.provider == GraphProvider.NEO4J and search_filter.node_labels is not None:
            return await neo4j_filtered_node_keyword_search(driver, query, search_filter, group_ids, limit)
        return await search_utils.node_fulltext_search(exact(driver), query, search_filter, group_ids, limit)

    edge_similarity_search = _graphiti_own("edge_similarity_search")
    node_similarity_search = _graphiti_own("node_similarity_search")
    episode_fulltext_search = _graphiti_own("episode_fulltext_search")
    edge_bfs_search = _graphiti_own("edge_bfs_search")
    node_bfs_search = _graphiti_own("node_bfs_search")
    community_fulltext_search = _graphiti_own("community_fulltext_search")
    community_similarity_search = _graphiti_own("community_similarity_search")
    get_embeddings_for_communities = _graphiti_own("get_embeddings_for_communities")
    node_distance_reranker = _graphiti_own("node_distance_reranker")
    episode_mentions_reranker = _graphiti_own("episode_mentions_reranker")
