"""Graph search: hybrid RRF candidates from Graphiti, then the injected reranker, fusion, typed hits.

Why not `Graphiti.search()`: it uses EDGE_HYBRID_SEARCH_RRF and never calls the cross encoder.
Why not Graphiti's *_CROSS_ENCODER recipes: they judge nodes on their name alone, map reranked
passages back by exact fact text (two edges with one fact collapse into one) and drop anything
scored below `reranker_min_score`. Here the first stage is Graphiti's RRF search (recipes copied,
never mutated) and the reranking is ours, with the same reranker instance Graphiti holds, mapped
back by position so nothing is lost or duplicated.

The final order fuses the judge's evidence with the first stage's (RERANKER_FUSION, see
graphiti_llm_rerank/fusion.py): each hit answers its fused `score`, its `first_stage_rank`/`first_stage_score`
and the judge's `rerank_score` (null when it was not judged); the answer says how many of the
candidates were judged.

Filters (`SearchFilter`, search_filters.py) narrow the first stage itself, so the judge reads as many
candidates of the filtered set as it would of the whole graph; a `centre` entity remakes the candidates
around it (centre.py). Each fact says whether it still holds (`current`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from datetime import datetime, timezone
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from graphiti_core.edges import EntityEdge
from graphiti_core.nodes import EntityNode
from graphiti_core.search.search import search as graphiti_search
from graphiti_core.search.search_config_recipes import EDGE_HYBRID_SEARCH_RRF, NODE_HYBRID_SEARCH_RRF
from graphiti_core.search.search_config import SearchResults
from graphiti_core.search.search_filters import SearchFilters

from app.config import Config
from app.graph import shared_fulltext
from app.graph.centre import around_centre
from app.graph.search_filters import SearchFilter, is_current, resolve_entity, resolved_filters
from app.graph.search_hook import admitted
from app.graph.store import cypher_rows
from app.graph.timestamps import iso
from graphiti_llm_rerank import Judgement, Placed, judge_positions, rank_candidates
from app.graph.similarity import cosines, embed_query

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
    # A fact of one of the top entities, not found by the first stage itself (`neighbourhood`);
    # its first_stage_score is the neutral middle of the first stage's scores.
    from_neighbourhood: bool = False
    # Neither invalidated nor expired at the time of the search (its invalid_at / expired_at say when).
    current: bool = True

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


@dataclass(frozen=True)
class RerankTrace:
    """One list's first-stage candidates beside their judgement (which holds the first-stage scores and
    cosines it was fused from), for benchmarks that replay fusions offline; not part of the API answer."""

    passages: list[str]
    metadata: list[dict[str, Any]]
    judgement: Judgement

    @property
    def first_scores(self) -> list[float]:
        return list(self.judgement.first_scores)

    @property
    def cosine(self) -> list[float] | None:
        """Each candidate's cosine to the query, when search used it."""
        return None if self.judgement.cosine is None else list(self.judgement.cosine)


@dataclass
class SearchOutcome:
    edges: list[EdgeHit] = field(default_factory=list)
    nodes: list[NodeHit] = field(default_factory=list)
    reranked: bool = False
    error: str | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    judged: int = 0  # candidates the model judged (cached scores included)...
    candidates: int = 0  # ...of the first-stage candidates handed to the reranker
    fusion: str | None = None  # RERANKER_FUSION, when the model ordered anything
    excluded: list[str] = field(default_factory=list)  # uuids of `exclude` that ranked among the answer's
    trace: dict[str, RerankTrace] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict:
        return {
            "edges": [hit.to_dict() for hit in self.edges],
            "nodes": [hit.to_dict() for hit in self.nodes],
            "reranked": self.reranked,
            "judged": self.judged,
            "candidates": self.candidates,
            "fusion": self.fusion,
            "error": self.error,
            "timings_ms": self.timings_ms,
        }


def edge_passage(edge: EntityEdge, time_mode: str, now: datetime) -> str:
    """The text the judge reads for a fact: the fact, led by its validity unless `time_mode` is "off"
    (RERANKER_PASSAGE_TIME). "dates": "(valid from 2016-03-01 until 2019-07-31) <fact>"; "status" adds
    whether the fact holds at `now` ("; current", "; ended", "; not yet valid"), so a question about
    the present needs no date arithmetic from the judge. The validity leads because a long fact is cut
    at RERANKER_MAX_DOCUMENT_CHARS in the prompt; it stays in the passage, after the query, so the
    prompt's shared prefix (the query) is unchanged. A fact without any date reads as it is."""
    valid, invalid = _utc(edge.valid_at), _utc(edge.invalid_at)
    if time_mode == "off" or not (valid or invalid):
        return edge.fact
    span = " ".join(part for part in (f"from {valid.date().isoformat()}" if valid else "",
                                      f"until {invalid.date().isoformat()}" if invalid else "") if part)
    if time_mode == "status":
        ended = min((moment for moment in (invalid, _utc(edge.expired_at)) if moment), default=None)
        span += "; " + ("ended" if ended and ended <= now else "not yet valid" if valid and valid > now
                        else "current")
    return f"(valid {span}) {edge.fact}"


def _utc(moment: datetime | None) -> datetime | None:
    """A stored time as an aware UTC datetime (a database may hand it back without its zone)."""
    return moment.replace(tzinfo=timezone.utc) if moment and moment.tzinfo is None else moment


def node_passage(node: EntityNode) -> str:
    """Nodes are judged on 'name: summary'; Graphiti alone would send only the name."""
    return f"{node.name}: {node.summary}" if node.summary else node.name


@dataclass(frozen=True)
class JudgedPassages:
    """The configured reranker's verdict on passages a caller gathered itself."""

    order: list[int]  # positions best first; those it did not judge follow in their own order
    # The relevance it gave each position it judged. Empty for a judge that only ranks: its values
    # are ranks, and no floor can be read off them.
    scores: dict[int, float]


async def judge_passages(runtime, query: str, passages: list[str]) -> JudgedPassages | None:
    """How the configured reranker judges `passages` against `query`. None when reranking is off or
    the call judged nothing: the caller keeps the order it has. Never raises."""
    if not runtime.reranking_enabled or not passages:
        return None
    try:
        judgement = await judge_positions(runtime.reranker, query, passages)
    except Exception as error:  # the reranker should never raise; the caller's order still stands
        logger.warning("Reranker raised %s; keeping the caller's order", type(error).__name__)
        return None
    if not judgement.reranked:
        return None
    order = judgement.judge_order()  # fusion's own rule: best evidence first, ties by position
    # Only what the model (or its cache) answered: a passage whose own request failed has a place, no score.
    scores = {position: judgement.evidence[position] for position in judgement.judged_at_s if judgement.by_score}
    return JudgedPassages(order, scores)


def _first_stage_config(scope: str, n_candidates: int):
    """Copies of Graphiti's hybrid RRF recipes: the shared recipe objects are never mutated."""
    config = EDGE_HYBRID_SEARCH_RRF.model_copy(deep=True)
    config.edge_config = config.edge_config if scope in ("edges", "both") else None
    if scope in ("nodes", "both"):
        config.node_config = NODE_HYBRID_SEARCH_RRF.node_config.model_copy(deep=True)
    config.limit = n_candidates
    return config


async def _with_neighbourhood(driver, query_vector: list[float], first: SearchResults, n_entities: int,
                             n_extra: int, filters: SearchFilters) -> tuple[SearchResults, int]:
    """The first stage's edges, then `n_extra` other facts around its top `n_entities` entities.

    A question's causes often share no word with it ("What caused the crisis?" against "floodwater
    entered Well 4 through its cracked seal") while its entities do: the facts around them reach
    the judge this way. "Around" is two steps: the top entities' own facts, and the facts of the
    `n_entities` entities those facts link to most often (the well that a wellfield and its operator
    both name), since a cause is often one entity further out than the question's words reach.
    Each of these entities offers its facts closest to the query (cosine, as the first stage's own
    vector half measures it) in turn, so a hub's many facts cannot crowd out a small entity's few.
    The first stage has no score for these; they get the middle of its scores, so the judge places
    them (fusion reads them as neither good nor bad first-stage evidence)."""
    top = [node.uuid for node in first.nodes[:n_entities]]
    own = await _facts_by_entity(driver, top)
    linked = Counter(uuid for edges in own.values() for edge in edges
                     for uuid in (edge.source_node_uuid, edge.target_node_uuid) if uuid not in own)
    around = {**own, **await _facts_by_entity(driver, [uuid for uuid, _ in linked.most_common(n_entities)])}
    seen = {edge.uuid for edge in first.edges}
    pool = {edge.uuid: edge for edges in around.values() for edge in edges if edge.uuid not in seen}
    if filters != SearchFilters():  # the neighbourhood is read whole, so filtering it cuts nothing short
        passing = await admitted(driver, filters, list(pool))
        pool = {uuid: edge for uuid, edge in pool.items() if uuid in passing}
    extra = list(pool.values())
    if len(pool) > n_extra:
        closeness = await fact_closeness(driver, query_vector, list(pool))
        queues = [sorted({edge.uuid for edge in edges if edge.uuid in pool}, key=lambda uuid: -closeness[uuid])
                  for edges in around.values()]
        extra = [pool[uuid] for uuid in _in_turn(queues, n_extra)]
    scores = _scores(first.edge_reranker_scores, len(first.edges))
    neutral = (max(scores) + min(scores)) / 2 if scores else 0.0
    return first.model_copy(update={"edges": first.edges + extra,
                                    "edge_reranker_scores": scores + [neutral] * len(extra)}), len(extra)


async def _facts_by_entity(driver, entity_uuids: list[str]) -> dict[str, list[EntityEdge]]:
    """Every fact at either end of each of these entities, read concurrently."""
    per_entity = await asyncio.gather(*(EntityEdge.get_by_node_uuid(driver, uuid) for uuid in entity_uuids))
    return dict(zip(entity_uuids, per_entity))


# Unlabelled endpoints: the edge index answers each uuid (see fact_import.STORED_EDGES_QUERY).
FACT_VECTORS_QUERY = ("UNWIND $uuids AS u MATCH ()-[e:RELATES_TO {uuid: u}]->() "
                      "RETURN e.uuid AS uuid, e.fact_embedding AS vector")


async def fact_closeness(driver, query_vector: list[float], edge_uuids: list[str]) -> dict[str, float]:
    """Cosine of each fact to the query, from the vectors stored with the facts: a hub's hundreds
    of facts cost one read, not one embedding each. A fact stored without a vector counts as far."""
    rows = await cypher_rows(driver, FACT_VECTORS_QUERY, uuids=edge_uuids)
    vectors = {row["uuid"]: row["vector"] for row in rows if row["vector"]}
    closeness = dict(zip(vectors, cosines(query_vector, list(vectors.values()))))
    return {uuid: closeness.get(uuid, -1.0) for uuid in edge_uuids}


def _in_turn(queues: list[list[str]], n: int) -> list[str]:
    """Up to `n` distinct items, taking the next of each queue in turn."""
    taken: dict[str, None] = {}
    for turn in range(max(map(len, queues), default=0)):
        for queue in queues:
            if turn < len(queue) and len(taken) < n:
                taken.setdefault(queue[turn])
    return list(taken)


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


async def _order(reranker, enabled: bool, config: Config, query: str, passages: list[str],
                 metadata: list[dict[str, Any]], first_scores: list[float], cut: int,
                 cosine: list[float] | None = None) -> RerankTrace:
    """One candidate list judged and fused (its order in `judgement.order`), with what it was made
    from. With RERANKER_JUDGE_DEPTH the judge reads only some candidates of the cheap order (first
    stage and cosine; RERANKER_JUDGE_FOCUS says which, `cut` is how many the answer returns)."""
    judgement = await rank_candidates(
        reranker if enabled else None, query, passages, first_scores, method=config.reranker_fusion,
        weight=config.reranker_fusion_weight, cosine=cosine, cosine_weight=config.reranker_cosine_weight,
        depth=config.reranker_judge_depth, focus=config.reranker_judge_focus, cut=cut)
    return RerankTrace(passages, metadata, judgement)


@dataclass(frozen=True)
class _Candidates:
    """What the first stage hands the judge: Graphiti's results cut to the pool, the neighbourhood's
    facts after the first stage's own, and each edge's cosine to the query when the fusion or the
    cascade reads it."""

    results: SearchResults
    from_neighbourhood: int  # the last this many edges came from the neighbourhood
    edge_cosine: list[float] | None


async def search_graph(runtime, graph_id: str, query: str, limit: int = 10, scope: str = "edges",
                       neighbourhood: int = 0, exclude: frozenset[str] = frozenset(),
                       candidates: int | None = None, filters: SearchFilter | None = None,
                       centre: str | None = None) -> SearchOutcome:
    """Hybrid RRF search scoped to one graph, reranked unless RERANKER_PROVIDER=none.

    `neighbourhood` > 0 (with a reranker): the facts of the first stage's top entities join the
    candidates, as many again as the first stage gives (see `_with_neighbourhood`).
    `exclude`: uuids of facts the caller holds already. They are judged like any candidate (the pool
    and its order do not change) but left out of the answer, so it holds up to `limit` others; each
    fact keeps its rank in the whole order.
    `candidates` (with a reranker): how many first-stage candidates the judge reads, instead of
    RERANKER_CANDIDATES per hit wanted. A deep pool is for a question whose answers share few words
    with it (a report section's own question): the first stage ranks them far down, the judge may
    not; the neighbourhood still adds its usual number.
    `filters`: what the first stage is narrowed to (search_filters.py); `centre`: an entity's name or
    uuid whose surroundings the answer is about (centre.py). Either naming an entity the graph does
    not hold raises UnknownEntityError."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}")
    enabled = runtime.reranking_enabled
    config = runtime.config
    n_usual = limit * (config.reranker_candidates if enabled else 1)
    n_pool = max(candidates, limit) if enabled and candidates else n_usual
    # Held facts leave the answer, so the pool holds `limit` besides them however many the caller holds.
    n_pool = max(n_pool, limit + len(exclude))
    driver = runtime.driver_for(graph_id)
    started = time.perf_counter()
    now = datetime.now(timezone.utc)
    narrowing = await _narrowing(driver, graph_id, filters or SearchFilter(), centre, now)
    around = neighbourhood if neighbourhood > 0 and enabled and scope != "nodes" else 0
    pool = await _first_stage(runtime, graph_id, query, scope, n_pool, neighbourhood=around, n_extra=n_usual,
                              narrowing=narrowing)
    first_stage_ms = (time.perf_counter() - started) * 1000

    first = pool.results
    edge_scores = _scores(first.edge_reranker_scores, len(first.edges))
    node_scores = _scores(first.node_reranker_scores, len(first.nodes))
    now = datetime.now(timezone.utc)
    edge_cut = limit + sum(1 for edge in first.edges if edge.uuid in exclude)  # held facts leave the answer
    edge_trace, node_trace, names = await asyncio.gather(
        _order(runtime.reranker, enabled, config, query,
               [edge_passage(edge, config.reranker_passage_time, now) for edge in first.edges],
               [_edge_metadata(edge) for edge in first.edges], edge_scores, edge_cut, pool.edge_cosine),
        _order(runtime.reranker, enabled, config, query, [node_passage(node) for node in first.nodes],
               [{} for _ in first.nodes], node_scores, limit),
        _entity_names(driver, {u for e in first.edges for u in (e.source_node_uuid, e.target_node_uuid)}),
    )
    rerank_ms = (time.perf_counter() - started) * 1000 - first_stage_ms
    judgements = [trace.judgement for trace in (edge_trace, node_trace) if trace.judgement.candidates]
    # "reranked" means the model ordered (some of) every list that had candidates.
    reranked = enabled and all(judgement.reranked for judgement in judgements)

    wanted, excluded = _answer_places(edge_trace.judgement.order, [edge.uuid for edge in first.edges], limit,
                                      exclude)
    first_stage_edges = len(first.edges) - pool.from_neighbourhood
    edges = [_edge_hit(first.edges[hit.position], hit, rank, names,
                       from_neighbourhood=hit.position >= first_stage_edges, now=now) for rank, hit in wanted]
    nodes = [_node_hit(first.nodes[hit.position], hit, rank)
             for rank, hit in enumerate(node_trace.judgement.order[:limit], start=1)]
    return SearchOutcome(
        edges=edges,
        nodes=nodes,
        reranked=reranked,
        timings_ms={"first_stage": round(first_stage_ms, 1), "rerank": round(rerank_ms, 1)},
        judged=sum(judgement.judged for judgement in judgements if judgement.reranked),
        candidates=len(first.edges) + len(first.nodes),
        fusion=config.reranker_fusion if reranked and judgements else None,
        excluded=excluded,
        trace={"edges": edge_trace, "nodes": node_trace},
    )


@dataclass(frozen=True)
class Narrowing:
    """A search's filters as Graphiti applies them, and the centre's uuid when it has one."""

    filters: SearchFilters = field(default_factory=SearchFilters)
    centre_uuid: str | None = None


async def _narrowing(driver, graph_id: str, search_filter: SearchFilter, centre: str | None,
                     now: datetime) -> Narrowing:
    filters = await resolved_filters(driver, graph_id, search_filter, now)
    centre_uuid = (await resolve_entity(driver, graph_id, "center", centre))[0] if centre is not None else None
    return Narrowing(filters, centre_uuid)


async def _first_stage(runtime, graph_id: str, query: str, scope: str, n_pool: int, *, neighbourhood: int,
                       n_extra: int, narrowing: Narrowing = Narrowing()) -> _Candidates:
    """Graphiti's hybrid RRF candidates for `query`, `n_pool` of each kind in `scope`; with
    `neighbourhood` > 0, `n_extra` facts around its top entities after them. With a reranker on,
    also each edge's cosine to the query when the fusion or the cascade reads it."""
    config = runtime.config
    driver = runtime.driver_for(graph_id)
    asked = n_pool
    if not runtime.is_falkordb:  # other graphs' keyword hits can take slots of the shared index
        asked *= await shared_fulltext.first_stage_factor_for(driver, graph_id)
    # The cheap signals order what the judge reads (the cascade) and join the fusion (the cosine).
    fuses_cosine = config.reranker_cosine_weight > 0 and config.reranker_fusion != "none"
    with_cosine = (runtime.reranking_enabled and scope != "nodes"
                   and (fuses_cosine or config.reranker_judge_depth > 0))
    # Embedded once, as a query (Graphiti would embed it as a stored text): the first stage's vector
    # half, the neighbourhood's closeness and the cosine use it.
    query_vector = await embed_query(runtime.graphiti.embedder, query.replace("\n", " "))
    first = await graphiti_search(
        runtime.graphiti.clients,
        query,
        [graph_id],
        _first_stage_config("both" if neighbourhood else scope, asked),
        narrowing.filters,
        query_vector=query_vector,
        driver=driver,
    )
    first = _best_of(first, n_pool)
    if narrowing.centre_uuid is not None:
        async def closeness(uuids: list[str]) -> dict[str, float]:
            return await fact_closeness(driver, query_vector, uuids)
        first = await around_centre(driver, graph_id, first, narrowing.centre_uuid, narrowing.filters, n_pool,
                                    closeness)
        if scope == "nodes":
            first = first.model_copy(update={"edges": [], "edge_reranker_scores": []})
    from_neighbourhood = 0
    if neighbourhood:
        first, from_neighbourhood = await _with_neighbourhood(driver, query_vector, first, neighbourhood, n_extra,
                                                              narrowing.filters)
        if scope == "edges":
            first = first.model_copy(update={"nodes": [], "node_reranker_scores": []})
    edge_cosine = None
    if with_cosine and first.edges:
        closeness = await fact_closeness(driver, query_vector, [edge.uuid for edge in first.edges])
        edge_cosine = [closeness[edge.uuid] for edge in first.edges]
    return _Candidates(first, from_neighbourhood, edge_cosine)


def _answer_places(order: tuple[Placed, ...], uuids: list[str], limit: int,
                   exclude: frozenset[str]) -> tuple[list[tuple[int, Placed]], list[str]]:
    """The answer's first `limit` (rank, hit) of the fused order, leaving out the held facts, and the
    uuids of the held facts that ranked among them."""
    wanted, excluded = [], []
    for rank, hit in enumerate(order, start=1):
        if len(wanted) == limit:
            break
        if uuids[hit.position] in exclude:
            excluded.append(uuids[hit.position])
        else:
            wanted.append((rank, hit))
    return wanted, excluded


def _scores(scores: list[float], count: int) -> list[float]:
    """The first stage's score of each of `count` candidates (0.0 where Graphiti gave none)."""
    return [float(scores[index]) if index < len(scores) else 0.0 for index in range(count)]


def _edge_hit(edge: EntityEdge, hit: Placed, rank: int, names, *, from_neighbourhood: bool = False,
              now: datetime | None = None) -> EdgeHit:
    return EdgeHit(
        uuid=edge.uuid,
        fact=edge.fact,
        score=hit.score,
        rank=rank,
        first_stage_rank=hit.position + 1,
        first_stage_score=hit.first_stage_score,
        from_neighbourhood=from_neighbourhood,
        rerank_score=hit.judge_score,
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
        current=is_current(edge.invalid_at, edge.expired_at, now or datetime.now(timezone.utc)),
    )


def _node_hit(node: EntityNode, hit: Placed, rank: int) -> NodeHit:
    return NodeHit(
        uuid=node.uuid,
        name=node.name,
        summary=node.summary,
        labels=[label for label in node.labels if label != "Entity"],
        score=hit.score,
        rank=rank,
        first_stage_rank=hit.position + 1,
        first_stage_score=hit.first_stage_score,
        rerank_score=hit.judge_score,
    )
