"""Graph search: hybrid RRF candidates from Graphiti, then the injected reranker, then typed hits.

Why not `Graphiti.search()`: it uses EDGE_HYBRID_SEARCH_RRF and never calls the cross encoder.
Why not Graphiti's *_CROSS_ENCODER recipes: they judge nodes on their name alone, map reranked
passages back by exact fact text (two edges with one fact collapse into one) and drop anything
scored below `reranker_min_score`. Here the first stage is Graphiti's RRF search (recipes copied,
never mutated) and the reranking is ours, with the same reranker instance Graphiti holds, mapped
back by position so nothing is lost or duplicated.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from graphiti_core.cross_encoder.client import CrossEncoderClient
from graphiti_core.edges import EntityEdge
from graphiti_core.nodes import EntityNode
from graphiti_core.search.search import search as graphiti_search
from graphiti_core.search.search_config_recipes import EDGE_HYBRID_SEARCH_RRF, NODE_HYBRID_SEARCH_RRF
from graphiti_core.search.search_config import SearchResults
from graphiti_core.search.search_filters import SearchFilters

from app.graph import shared_fulltext
from app.rerank.guarded import RANK_FELL_BACK

SCOPES = ("edges", "nodes", "both")

logger = logging.getLogger(__name__)


@dataclass
class EdgeHit:
    uuid: str
    fact: str
    score: float
    rank: int
    first_stage_rank: int
    first_stage_score: float
    rerank_score: float | None
    relation: str
    source: str | None
    target: str | None
    source_uuid: str
    target_uuid: str
    valid_at: str | None
    invalid_at: str | None
    expired_at: str | None
    created_at: str | None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class NodeHit:
    uuid: str
    name: str
    summary: str
    labels: list[str]
    score: float
    rank: int
    first_stage_rank: int
    first_stage_score: float
    rerank_score: float | None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class SearchOutcome:
    edges: list[EdgeHit] = field(default_factory=list)
    nodes: list[NodeHit] = field(default_factory=list)
    reranked: bool = False
    error: str | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "edges": [hit.to_dict() for hit in self.edges],
            "nodes": [hit.to_dict() for hit in self.nodes],
            "reranked": self.reranked,
            "error": self.error,
            "timings_ms": self.timings_ms,
        }


def iso(value: Any) -> str | None:
    """Every timestamp the API returns, in one format: ISO 8601 with six fractional digits and the
    offset ("2024-05-01T10:00:00.000000+00:00").

    Paged reads get `neo4j.time.DateTime` from Neo4j (nanoseconds: nine digits) and ISO strings
    from FalkorDB (no fraction at all when it is zero); search gets Python datetimes from graphiti's
    models. Neo4j values are cut to microseconds the way graphiti reads them (`to_native`), so a
    fact's time reads the same from both paths.
    """
    if value is None:
        return None
    if hasattr(value, "to_native"):  # neo4j.time.DateTime / Date / Time
        value = value.to_native()
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value  # not a timestamp we wrote; shown as stored
    if isinstance(value, datetime):
        return value.isoformat(timespec="microseconds")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def node_passage(node: EntityNode) -> str:
    """Nodes are judged on 'name: summary'; Graphiti alone would send only the name."""
    return f"{node.name}: {node.summary}" if node.summary else node.name


async def rerank_positions(
    reranker: CrossEncoderClient, query: str, passages: list[str]
) -> list[tuple[int, float]]:
    """Rerank passages; return (candidate position, score), best first, each position once.

    The reranker answers with passage text. Texts are mapped back to positions in first-stage
    order, so duplicate texts keep both candidates. A position the reranker left out (it should
    never) is appended in first-stage order rather than lost.
    """
    if not passages:
        return []
    ranked = await reranker.rank(query, passages)
    positions: dict[str, deque[int]] = defaultdict(deque)
    for index, passage in enumerate(passages):
        positions[passage].append(index)
    ordered: list[tuple[int, float]] = []
    for passage, score in ranked:
        if positions.get(passage):
            ordered.append((positions[passage].popleft(), float(score)))
    missing = sorted(index for queue in positions.values() for index in queue)
    if missing:
        logger.warning("Reranker returned %d of %d passages; appending the rest", len(ordered), len(passages))
        floor = min((score for _, score in ordered), default=0.0)
        ordered.extend((index, floor) for index in missing)
    return ordered


def _first_stage_config(scope: str, n_candidates: int):
    """Copies of Graphiti's hybrid RRF recipes: the shared recipe objects are never mutated."""
    config = EDGE_HYBRID_SEARCH_RRF.model_copy(deep=True)
    config.edge_config = config.edge_config if scope in ("edges", "both") else None
    if scope in ("nodes", "both"):
        config.node_config = NODE_HYBRID_SEARCH_RRF.node_config.model_copy(deep=True)
    config.limit = n_candidates
    return config


def _best_of(results: SearchResults, n: int) -> SearchResults:
    """The first `n` fused candidates of each kind (a first stage asked for more is cut back)."""
    return results.model_copy(update={
        "edges": results.edges[:n], "edge_reranker_scores": results.edge_reranker_scores[:n],
        "nodes": results.nodes[:n], "node_reranker_scores": results.node_reranker_scores[:n],
    })


async def _entity_names(driver, uuids: set[str]) -> dict[str, str]:
    if not uuids:
        return {}
    nodes = await EntityNode.get_by_uuids(driver, list(uuids))
    return {node.uuid: node.name for node in nodes}


def _edge_metadata(edge: EntityEdge) -> dict[str, Any]:
    attributes = edge.attributes or {}
    return {key: value for key, value in attributes.items() if not key.endswith("_embedding")}


async def _order(reranker, enabled: bool, query: str, passages: list[str], first_scores: list[float]):
    """(positions with scores best first, whether the model made this order)."""
    first_stage = [(index, float(score)) for index, score in enumerate(first_scores)]
    if not enabled:
        return first_stage, False
    fell_back = RANK_FELL_BACK.set(False)
    try:
        ordered = await rerank_positions(reranker, query, passages)
        if RANK_FELL_BACK.get():  # the reranker already logged why; answer exactly as with it off
            return first_stage, False
        return ordered, bool(passages)
    except Exception as error:  # the reranker should never raise; a search must still answer
        logger.warning("Reranker raised %s; keeping the first-stage order", type(error).__name__)
        return first_stage, False
    finally:
        RANK_FELL_BACK.reset(fell_back)


async def search_graph(runtime, graph_id: str, query: str, limit: int = 10, scope: str = "edges") -> SearchOutcome:
    """Hybrid RRF search scoped to one graph, reranked unless RERANKER_PROVIDER=none."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}")
    enabled = runtime.reranking_enabled
    n_candidates = limit * (runtime.config.reranker_candidates if enabled else 1)
    driver = runtime.driver_for(graph_id)
    started = time.perf_counter()
    first_stage_size = n_candidates
    if not runtime.is_falkordb:  # other graphs' keyword hits can take slots of the shared index
        first_stage_size *= await shared_fulltext.first_stage_factor_for(driver, graph_id)
    first = await graphiti_search(
        runtime.graphiti.clients,
        query,
        [graph_id],
        _first_stage_config(scope, first_stage_size),
        SearchFilters(),
        driver=driver,
    )
    first = _best_of(first, n_candidates)
    first_stage_ms = (time.perf_counter() - started) * 1000

    edge_passages = [edge.fact for edge in first.edges]
    node_passages = [node_passage(node) for node in first.nodes]
    (edge_order, edges_reranked), (node_order, nodes_reranked), names = await asyncio.gather(
        _order(runtime.reranker, enabled, query, edge_passages, first.edge_reranker_scores),
        _order(runtime.reranker, enabled, query, node_passages, first.node_reranker_scores),
        _entity_names(driver, {u for e in first.edges for u in (e.source_node_uuid, e.target_node_uuid)}),
    )
    rerank_ms = (time.perf_counter() - started) * 1000 - first_stage_ms
    # "reranked" means the model made the order of every list that had candidates.
    reranked = enabled and (edges_reranked or not edge_passages) and (nodes_reranked or not node_passages)

    edges = [
        _edge_hit(first.edges[index], score, rank, index, first.edge_reranker_scores, names, edges_reranked)
        for rank, (index, score) in enumerate(edge_order[:limit], start=1)
    ]
    nodes = [
        NodeHit(
            uuid=first.nodes[index].uuid,
            name=first.nodes[index].name,
            summary=first.nodes[index].summary,
            labels=[label for label in first.nodes[index].labels if label != "Entity"],
            score=score,
            rank=rank,
            first_stage_rank=index + 1,
            first_stage_score=_at(first.node_reranker_scores, index),
            rerank_score=score if nodes_reranked else None,
        )
        for rank, (index, score) in enumerate(node_order[:limit], start=1)
    ]
    return SearchOutcome(
        edges=edges,
        nodes=nodes,
        reranked=reranked,
        timings_ms={"first_stage": round(first_stage_ms, 1), "rerank": round(rerank_ms, 1)},
    )


def _at(scores: list[float], index: int) -> float:
    return float(scores[index]) if index < len(scores) else 0.0


def _edge_hit(edge: EntityEdge, score, rank, index, first_scores, names, reranked) -> EdgeHit:
    return EdgeHit(
        uuid=edge.uuid,
        fact=edge.fact,
        score=score,
        rank=rank,
        first_stage_rank=index + 1,
        first_stage_score=_at(first_scores, index),
        rerank_score=score if reranked else None,
        relation=edge.name,
        source=names.get(edge.source_node_uuid),
        target=names.get(edge.target_node_uuid),
        source_uuid=edge.source_node_uuid,
        target_uuid=edge.target_node_uuid,
        valid_at=iso(edge.valid_at),
        invalid_at=iso(edge.invalid_at),
        expired_at=iso(edge.expired_at),
        created_at=iso(edge.created_at),
        metadata=_edge_metadata(edge),
    )
