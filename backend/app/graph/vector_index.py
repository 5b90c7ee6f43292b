"""A vector index under the semantic half of the first stage (FalkorDB, GRAPH_VECTOR_INDEX=on).

Graphiti's edge similarity search computes the cosine between the query and every fact of the graph
in Cypher, so the first stage grows linearly with the graph. FalkorDB keeps an HNSW index over a
relationship property (`CREATE VECTOR INDEX FOR ()-[e:RELATES_TO]-() ON (e.fact_embedding)`), and each
graph of ours is a FalkorDB graph of its own, so an index answers one graph's nearest facts without
reading other graphs' and without over-fetching.

The index is created beside Graphiti's own indexes (`ensure_vector_index`, at a graph's creation and
for every existing graph when a search first meets it) and is read through Graphiti's search hook:
`VectorIndexSearch` is set as the per-graph driver's `search_interface`. It answers the edge
similarity search from the index and hands every other search, and any similarity search with
filters or endpoints, to Graphiti's own code on a copy of the driver without the hook. While FalkorDB
is still building the index (after its creation, or after a restart) the query is refused; the search
then takes the exact path, so a graph never answers with facts missing.

The index answers cosine distance d = 1 - cosine; Graphiti's exact path scores a fact (2 - d) / 2, the
cosine mapped onto [0, 1], and keeps those at `min_score` or above. The index's hits are scored and
kept the same way.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from graphiti_core.driver.search_interface.search_interface import SearchInterface
from graphiti_core.edges import EntityEdge
from graphiti_core.search import search_utils
from graphiti_core.search.search_filters import SearchFilters

logger = logging.getLogger(__name__)

OPERATIONAL = "OPERATIONAL"
INDEXES_QUERY = "CALL db.indexes() YIELD label, types, entitytype, status RETURN label, types, entitytype, status"
NEAREST_QUERY = ("CALL db.idx.vector.queryRelationships('RELATES_TO', 'fact_embedding', $k, vecf32($vector)) "
                 "YIELD relationship, score RETURN relationship.uuid AS uuid, score")


def create_query(dimension: int) -> str:
    # DDL takes no parameters; the dimension is an int from the settings.
    return ("CREATE VECTOR INDEX FOR ()-[e:RELATES_TO]-() ON (e.fact_embedding) "
            f"OPTIONS {{dimension: {int(dimension)}, similarityFunction: 'cosine'}}")


async def index_state(driver) -> str | None:
    """The fact vector index's status ('OPERATIONAL', or '[Indexing] n/m: UNDER CONSTRUCTION'); None
    when the graph has none."""
    records, _, _ = await driver.execute_query(INDEXES_QUERY)
    for record in records:
        types = record["types"] or {}
        if (record["label"] == "RELATES_TO" and record["entitytype"] == "RELATIONSHIP"
                and "VECTOR" in (types.get("fact_embedding") or [])):
            return record["status"]
    return None


async def ensure_vector_index(driver, dimension: int) -> None:
    """Create the graph's fact vector index unless it has one; FalkorDB builds it in the background."""
    if await index_state(driver) is None:
        await driver.execute_query(create_query(dimension))
        logger.info("Vector index over a graph's facts created (%d-d, cosine); FalkorDB builds it now", dimension)


def exact(driver):
    """The same driver (same connection) without the hook: Graphiti's own search code."""
    plain = copy.copy(driver)
    plain.search_interface = None
    return plain


class VectorIndexSearch(SearchInterface):
    """Graphiti's search hook: the edge similarity search from the vector index, all else Graphiti's."""

    dimension: int
    ready: bool = False  # once the index answered, it stays built (a restart makes a new runtime)

    async def edge_similarity_search(self, driver, search_vector, source_node_uuid, target_node_uuid,
                                     search_filter, group_ids=None, limit=search_utils.RELEVANT_SCHEMA_LIMIT,
                                     min_score=search_utils.DEFAULT_MIN_SCORE) -> list[EntityEdge]:
        plain = exact(driver)
        unfiltered = source_node_uuid is None and target_node_uuid is None and search_filter == SearchFilters()
        if unfiltered and await self._index_ready(plain):
            return await nearest_facts(plain, search_vector, limit, min_score)
        return await search_utils.edge_similarity_search(plain, search_vector, source_node_uuid, target_node_uuid,
                                                         search_filter, group_ids, limit, min_score)

    async def _index_ready(self, driver) -> bool:
        if not self.ready:
            state = await index_state(driver)
            if state is None:
                await ensure_vector_index(driver, self.dimension)
            self.ready = state == OPERATIONAL
        return self.ready

    async def edge_fulltext_search(self, driver, *args: Any, **kwargs: Any):
        return await search_utils.edge_fulltext_search(exact(driver), *args, **kwargs)

    async def node_fulltext_search(self, driver, *args: Any, **kwargs: Any):
        return await search_utils.node_fulltext_search(exact(driver), *args, **kwargs)

    async def node_similarity_search(self, driver, *args: Any, **kwargs: Any):
        return await search_utils.node_similarity_search(exact(driver), *args, **kwargs)

    async def episode_fulltext_search(self, driver, *args: Any, **kwargs: Any):
        return await search_utils.episode_fulltext_search(exact(driver), *args, **kwargs)


async def nearest_facts(driver, vector: list[float], limit: int, min_score: float) -> list[EntityEdge]:
    """The graph's `limit` facts nearest `vector` by the index, at least `min_score` cosine, nearest first."""
    records, _, _ = await driver.execute_query(NEAREST_QUERY, k=limit, vector=list(vector))
    kept = [record["uuid"] for record in records if (2.0 - float(record["score"])) / 2.0 >= min_score]
    if not kept:
        return []
    by_uuid = {edge.uuid: edge for edge in await EntityEdge.get_by_uuids(driver, kept)}
    return [by_uuid[uuid] for uuid in kept if uuid in by_uuid]
