"""Graphiti's search hook (`driver.search_interface`) on our graphs: Graphiti's own searches, except
that on FalkorDB the keyword half of the first stage ranks its hits before it reads them.

Graphiti's edge full-text search on FalkorDB reads every matching fact's fields, all its properties
(its embedding too), and only then sorts by score and keeps `limit`. A query whose words are common
matches a large share of the graph: 19,000 of 100,000 facts for "pressure at North Reservoir", and
that search took 97 ms of a 119 ms first stage. `GraphSearch` keeps the same hits, filters and order
but sorts the bare hits first and reads the fields of the `limit` it keeps.

Every other search, and a keyword search with filters, runs Graphiti's own code on a copy of the
driver without the hook (`exact`). `VectorIndexSearch` (vector_index.py) extends this hook with the
similarity half read from a vector index.
"""

from __future__ import annotations

import copy
from typing import Any

from graphiti_core.driver.driver import GraphProvider
from graphiti_core.driver.search_interface.search_interface import SearchInterface
from graphiti_core.edges import EntityEdge, get_entity_edge_from_record
from graphiti_core.models.edges.edge_db_queries import get_entity_edge_return_query
from graphiti_core.search import search_utils
from graphiti_core.search.search_filters import SearchFilters

# Graphiti's own query, with the sort and the limit moved ahead of reading the facts' fields. The
# endpoint labels and the group are checked before the limit, as Graphiti checks them.
FALKORDB_KEYWORD_QUERY = (
    "CALL db.idx.fulltext.queryRelationships('RELATES_TO', $query) YIELD relationship AS rel, score "
    "WITH rel AS e, score, startNode(rel) AS n, endNode(rel) AS m "
    "WHERE n:Entity AND m:Entity {group_filter}"
    "WITH e, score ORDER BY score DESC LIMIT $limit "
    "RETURN " + get_entity_edge_return_query(GraphProvider.FALKORDB) + " ORDER BY score DESC"
)


def exact(driver):
    """The same driver (same connection) without the hook: Graphiti's own search code."""
    plain = copy.copy(driver)
    plain.search_interface = None
    return plain


def _graphiti_own(name: str):
    """The hook's method `name`: Graphiti's search of that name on the driver without the hook."""
    async def search(self, driver, *args: Any, **kwargs: Any):
        return await getattr(search_utils, name)(exact(driver), *args, **kwargs)

    search.__name__ = name
    return search


class GraphSearch(SearchInterface):
    """Graphiti's searches; on FalkorDB the unfiltered edge keyword search ranks before it reads."""

    async def edge_fulltext_search(self, driver, query: str, search_filter, group_ids: list[str] | None = None,
                                   limit: int = search_utils.RELEVANT_SCHEMA_LIMIT) -> list[EntityEdge]:
        if driver.provider != GraphProvider.FALKORDB or search_filter != SearchFilters():
            return await search_utils.edge_fulltext_search(exact(driver), query, search_filter, group_ids, limit)
        words = search_utils.fulltext_query(query, group_ids, driver)
        if not words:
            return []
        group_filter = "AND e.group_id IN $group_ids " if group_ids is not None else ""
        records, _, _ = await driver.execute_query(FALKORDB_KEYWORD_QUERY.format(group_filter=group_filter),
                                                   query=words, limit=limit, group_ids=group_ids, routing_="r")
        return [get_entity_edge_from_record(record, driver.provider) for record in records]

    edge_similarity_search = _graphiti_own("edge_similarity_search")
    node_fulltext_search = _graphiti_own("node_fulltext_search")
    node_similarity_search = _graphiti_own("node_similarity_search")
    episode_fulltext_search = _graphiti_own("episode_fulltext_search")
    edge_bfs_search = _graphiti_own("edge_bfs_search")
    node_bfs_search = _graphiti_own("node_bfs_search")
    community_fulltext_search = _graphiti_own("community_fulltext_search")
    community_similarity_search = _graphiti_own("community_similarity_search")
    get_embeddings_for_communities = _graphiti_own("get_embeddings_for_communities")
    node_distance_reranker = _graphiti_own("node_distance_reranker")
    episode_mentions_reranker = _graphiti_own("episode_mentions_reranker")
