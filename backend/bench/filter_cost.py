"""What each search filter costs the first stage (`python -m bench filter-cost`).

The graph is `bench first-stage-time`'s (its synthetic sensor facts with stand-in vectors, written straight
into the embedded FalkorDB, or the local Neo4j with GRAPH_BACKEND=neo4j), then given what filters read:
each fact one of four relation names, a `valid_at` and `created_at` year between 2010 and 2025, and for one
fact in four an `invalid_at` (and so `expired_at`) a few years later; sensors are labelled `Sensor`, places
`Place`. The times are written as the database stores Graphiti's (a Python datetime: FalkorDB's driver
makes it an ISO string, Neo4j's a DateTime). Then each of `FILTERS` is timed as the whole first stage
(`search_graph`, reranker off) over `bench scale`'s queries, after three warm-ups, with how many facts the
emptiest answer held.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.first_stage_time import write_facts
from bench.load_run import percentile
from bench.stand_in_embedder import DIMENSION, MODEL, StandInEmbedder
from bench.vector_recall import index_built
from app.config import Config
from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter, reset_graphiti
from app.graph.search import search_graph
from app.graph.search_filters import SearchFilter, parse_filter
from app.graph.search_hook import exact

GRAPH_ID = "filter-cost"
WARM_UPS = 3
TIMEOUT_S = 7200
RELATIONS = ("INSTALLED_AT", "REPAIRED_AT", "INSPECTED_AT", "MOVED_TO")
YEARS = [datetime(2010 + n, 1, 1, tzinfo=timezone.utc) for n in range(16)]
ENDS = [datetime(2013 + n, 7, 1, tzinfo=timezone.utc) for n in range(16)]
VARY_CHUNK = 20_000
# Each filter timed: its name in the table, the request's fields, and a centre when it has one.
FILTERS: tuple[tuple[str, dict[str, Any], str | None], ...] = (
    ("none", {}, None),
    ("relation_types (1 of 4)", {"relation_types": ["repaired at"]}, None),
    ("entity_labels (Sensor, Place: all)", {"entity_labels": ["Sensor", "Place"]}, None),
    ("source (1 sensor of 1,000)", {"source": "Sensor 7"}, None),
    ("valid_at window (2 years of 16)", {"valid_at": {"from": "2014-01-01", "to": "2015-12-31"}}, None),
    ("as_of 2018-06-01", {"as_of": "2018-06-01T00:00:00Z"}, None),
    ("current_only", {"current_only": True}, None),
    ("as_of + relation_types", {"as_of": "2018-06-01T00:00:00Z", "relation_types": ["repaired at"]}, None),
    ("center (a sensor)", {}, "Sensor 7"),
)

# Chunks of facts not varied yet; id() spreads the values evenly on both databases.
_VARY_FACTS = (
    "MATCH ()-[e:RELATES_TO]->() WHERE e.group_id = $group_id AND e.varied IS NULL WITH e LIMIT $chunk "
    "SET e.varied = true, e.name = $relations[id(e) % 4], e.valid_at = $years[id(e) % 16], "
    "e.created_at = $years[toInteger(id(e) / 3) % 16], "
    "e.invalid_at = CASE WHEN id(e) % 4 = 0 THEN $ends[id(e) % 16] ELSE null END, "
    "e.expired_at = CASE WHEN id(e) % 4 = 0 THEN $ends[id(e) % 16] ELSE null END RETURN count(e) AS varied")
_LABEL_ENTITIES = ("MATCH (n:Entity) WHERE n.group_id = $group_id AND n.name STARTS WITH 'Sensor' SET n:Sensor "
                   "WITH count(n) AS sensors MATCH (p:Entity) WHERE p.group_id = $group_id "
                   "AND NOT p.name STARTS WITH 'Sensor' SET p:Place RETURN sensors, count(p) AS places")


def measure(data_dir: Path, facts: int, queries: list[str], limit: int, echo: Callable[[str], None]) -> dict[str, Any]:
    """Fill and vary the graph, build its vector index, and time each filter over `queries`."""
    with StandInEmbedder() as embedder:
        config = replace(Config.from_env(), data_dir=data_dir, falkordb_url=None, neo4j_uri=None, neo4j_local_port=0,
                         graph_vector_index=True, reranker_provider="none",
                         embedding_provider="openai", embedding_base_url=embedder.env["EMBEDDING_BASE_URL"],
                         embedding_model=MODEL, embedding_api_key=MODEL, embedding_dim=DIMENSION)
        runtime = GraphitiAdapter(config).runtime
        try:
            stored, written = run_on_loop(write_facts(runtime, GRAPH_ID, facts, echo), timeout=TIMEOUT_S)
            varied = run_on_loop(vary(exact(runtime.driver_for(GRAPH_ID))), timeout=TIMEOUT_S)
            run_on_loop(index_built(exact(runtime.driver_for(GRAPH_ID)), DIMENSION), timeout=TIMEOUT_S)
            echo(f"{stored} facts ({written} written now, {varied} given relations and times now)")
            provider = runtime.driver_for(GRAPH_ID).provider.value
            rows = [_timed_filter(runtime, name, fields, centre, queries, limit) for name, fields, centre in FILTERS]
            return {"backend": provider, "facts": stored, "queries": len(queries), "limit": limit, "filters": rows}
        finally:
            reset_graphiti()


async def vary(driver) -> int:
    """Give the facts not yet varied their relation names and times, and the entities their labels."""
    total = 0
    while True:
        records, _, _ = await driver.execute_query(_VARY_FACTS, group_id=GRAPH_ID, chunk=VARY_CHUNK,
                                                   relations=list(RELATIONS), years=YEARS, ends=ENDS)
        done = records[0]["varied"]
        total += done
        if done < VARY_CHUNK:
            break
    if total:
        await driver.execute_query(_LABEL_ENTITIES, group_id=GRAPH_ID)
    return total


def _timed_filter(runtime, name: str, fields: dict[str, Any], centre: str | None, queries: list[str],
                  limit: int) -> dict[str, Any]:
    search_filter = parse_filter(fields)
    times, answered = [], []
    for n, query in enumerate(queries[:WARM_UPS] + queries):
        first_stage_ms, facts = run_on_loop(_one(runtime, query, limit, search_filter, centre), timeout=600)
        if n >= WARM_UPS:
            times.append(first_stage_ms)
            answered.append(facts)
    times.sort()
    return {"filter": name, "p50_ms": round(percentile(times, 50), 1), "p95_ms": round(percentile(times, 95), 1),
            "fewest_facts_answered": min(answered)}


async def _one(runtime, query: str, limit: int, search_filter: SearchFilter, centre: str | None) -> tuple[float, int]:
    """The first stage's time (the filter's entities looked up and the centre's facts read included) and
    how many facts the search answered."""
    outcome = await search_graph(runtime, GRAPH_ID, query, limit=limit, filters=search_filter, centre=centre)
    if outcome.error:
        raise RuntimeError(f"search failed: {outcome.error}")
    return outcome.timings_ms["first_stage"], len(outcome.edges)
