"""Centre-node search: "what do we know around X". The candidates are the facts within one step of the
centre entity, ordered by Graphiti's node-distance reranking before the judge reads them.

Graphiti's own node-distance recipe reorders the hybrid search's hits by how far each fact's source lies
from the centre: a fact whose words miss the query never comes near, and the scores it returns are one per
source entity, not per fact. Here the candidates are the centre's own facts (every one that passes the
filters, the closest to the query first) together with the first stage's hits, each fact placed by the
nearer of its two ends: the centre, an entity one step from it, or farther. That is Graphiti's
node-distance measure (`node_distance_reranker`: one hop, the centre itself first), asked here by its own
query: on FalkorDB Graphiti's function zips each row, already a dict, with the header, so it finds no
neighbour and scores every entity but the centre 0. Facts with neither end within one step of the centre are left out, so every answer is about the
centre or its direct neighbours; entity hits are kept the same way. The nearness becomes the first stage's
score (the centre's facts first, then their neighbours', each tier in the order it came), which the
fusion weighs with the judge's scores as it weighs any first stage.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

from graphiti_core.driver.driver import GraphProvider
from graphiti_core.edges import EntityEdge, get_entity_edge_from_record
from graphiti_core.models.edges.edge_db_queries import get_entity_edge_return_query
from graphiti_core.search.search_config import SearchResults
from graphiti_core.search.search_filters import SearchFilters, edge_search_filter_query_constructor

from app.graph.search_hook import FALKORDB_EDGE_FIELDS

logger = logging.getLogger(__name__)

MAX_CENTRE_FACTS = 5000  # a hub's facts read at most; the closest of them to the query are judged
CENTRE, NEIGHBOUR = 1.0, 0.5  # a fact's nearness: one of its ends is the centre / one step from it
# Graphiti's node_distance_reranker query: which of these entities share a fact with the centre.
NEIGHBOURS_QUERY = ("UNWIND $uuids AS wanted MATCH (c:Entity {uuid: $centre})-[:RELATES_TO]-(n:Entity {uuid: wanted}) "
                    "RETURN DISTINCT wanted AS uuid")
TIER_SPREAD = 0.4  # the room the order within a tier takes, below the gap between tiers

# The centre's facts, either direction; {conditions} are Graphiti's filter conditions on e, n and m.
_CENTRE_FACTS = ("MATCH (c:Entity {uuid: $centre})-[e:RELATES_TO]-(:Entity) "
                 "WITH DISTINCT e WITH e, startNode(e) AS n, endNode(e) AS m "
                 "WHERE n:Entity AND m:Entity AND e.group_id = $group_id AND {conditions} "
                 "WITH e, n, m LIMIT $most RETURN ")

Closeness = Callable[[list[str]], Awaitable[dict[str, float]]]  # fact uuids -> cosine to the query


def centre_facts_query(provider: GraphProvider, conditions: list[str]) -> str:
    fields = FALKORDB_EDGE_FIELDS if provider == GraphProvider.FALKORDB else get_entity_edge_return_query(provider)
    return _CENTRE_FACTS.replace("{conditions}", " AND ".join(conditions) or "true") + fields


async def centre_facts(driver, group_id: str, centre_uuid: str, filters: SearchFilters) -> list[EntityEdge]:
    """The facts at the centre that pass `filters` (at most MAX_CENTRE_FACTS)."""
    conditions, params = edge_search_filter_query_constructor(filters, driver.provider)
    records, _, _ = await driver.execute_query(centre_facts_query(driver.provider, conditions), centre=centre_uuid,
                                               group_id=group_id, most=MAX_CENTRE_FACTS, routing_="r", **params)
    return [get_entity_edge_from_record(record, driver.provider) for record in records]


async def nearness_of_entities(driver, entity_uuids: list[str], centre_uuid: str) -> dict[str, float]:
    """CENTRE for the centre, NEIGHBOUR for an entity one step from it, 0.0 for any other."""
    others = [uuid for uuid in entity_uuids if uuid != centre_uuid]
    records, _, _ = await driver.execute_query(NEIGHBOURS_QUERY, uuids=others, centre=centre_uuid, routing_="r")
    neighbours = {record["uuid"] for record in records}
    return {uuid: CENTRE if uuid == centre_uuid else NEIGHBOUR if uuid in neighbours else 0.0
            for uuid in entity_uuids}


def _tiered_scores(nearness: list[float]) -> list[float]:
    """First-stage scores for candidates sorted by nearness: each tier's own, falling within it by place."""
    count = max(len(nearness), 1)
    return [near + TIER_SPREAD * (count - index) / count for index, near in enumerate(nearness)]


async def around_centre(driver, group_id: str, first: SearchResults, centre_uuid: str, filters: SearchFilters,
                        n_pool: int, closeness: Closeness) -> SearchResults:
    """The first stage's results remade around the centre: its hits within one step of it and the
    centre's own facts, nearest first, `n_pool` of each kind at most."""
    known = {edge.uuid for edge in first.edges}
    own = [edge for edge in await centre_facts(driver, group_id, centre_uuid, filters) if edge.uuid not in known]
    if len(own) > n_pool:  # a hub: the facts closest to the query
        close = await closeness([edge.uuid for edge in own])
        own = sorted(own, key=lambda edge: -close[edge.uuid])[:n_pool]
    edges = first.edges + own
    entities = list(dict.fromkeys([node.uuid for node in first.nodes] +
                                  [uuid for edge in edges for uuid in (edge.source_node_uuid, edge.target_node_uuid)]))
    near = await nearness_of_entities(driver, entities, centre_uuid)

    def edge_nearness(edge: EntityEdge) -> float:
        return max(near.get(edge.source_node_uuid, 0.0), near.get(edge.target_node_uuid, 0.0))

    kept_edges = sorted((edge for edge in edges if edge_nearness(edge) > 0), key=lambda edge: -edge_nearness(edge))
    kept_edges = kept_edges[:n_pool]
    kept_nodes = sorted((node for node in first.nodes if near.get(node.uuid, 0.0) > 0),
                        key=lambda node: -near[node.uuid])[:n_pool]
    logger.debug("Centre search: %d of %d facts and %d of %d entities within one step", len(kept_edges), len(edges),
                 len(kept_nodes), len(first.nodes))
    return first.model_copy(update={
        "edges": kept_edges, "edge_reranker_scores": _tiered_scores([edge_nearness(e) for e in kept_edges]),
        "nodes": kept_nodes, "node_reranker_scores": _tiered_scores([near[node.uuid] for node in kept_nodes]),
    })
