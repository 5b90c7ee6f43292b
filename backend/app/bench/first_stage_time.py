"""The first stage's time over a graph of any size, in one process (`flask --app app bench first-stage-time`).

`bench scale` grows its graph through the import, which here takes hours to reach a million facts. This
command writes `bench scale`'s synthetic facts (app/bench/load_run.py) straight into the embedded FalkorDB
instead: one Cypher CREATE per 5,000 facts, each with the stand-in embedder's vector
(app/bench/stand_in_embedder.py), no duplicate check and no journal. It is a fixture for timing searches,
not an import. Only the facts the graph lacks are written, so a stopped run goes on where it stopped.

Then, over that graph, with the stand-in embedder serving the queries and the app's own search code:
the vector index is built (unless the graph has one) and its build timed; each of `bench scale`'s
queries, after three warm-ups, is timed as
- the whole first stage, as search answers it (`search_graph`, reranker off);
- its keyword half as the search hook runs it (the kept hits checked) and with Graphiti's checks on
  every hit (`checked_keyword_search`, what the hook falls back to), each twice in turn (A B B A) and the
  faster kept, and whether both gave the same facts in the same order;
- its similarity half from the vector index.
Each half is asked for twice the facts wanted, as Graphiti's hybrid search asks it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from graphiti_core.search import search_utils
from graphiti_core.search.search_filters import SearchFilters

from app.bench.load_run import percentile, synthetic_fact
from app.bench.stand_in_embedder import DIMENSION, MODEL, StandInEmbedder, vector
from app.bench.vector_recall import index_built
from app.config import Config
from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter, reset_graphiti
from app.graph.search import search_graph
from app.graph.search_hook import checked_keyword_search, exact
from app.graph.store import create_graph, graph_exists, unkey_facts
from app.graph.vector_index import nearest_facts

GRAPH_ID = "first-stage-time"
SENSORS = 1000  # as `bench scale`: the facts cycle through 1,000 sensors and 10 places
WRITE_CHUNK = 5000
WARM_UPS = 3
TIMEOUT_S = 7200
SERIES = ("first_stage", "keyword_kept_checked", "keyword_every_hit_checked", "index_half")

COUNT_QUERY = "MATCH ()-[e:RELATES_TO]->() RETURN count(e) AS facts"
WRITE_ENTITIES_QUERY = (
    "UNWIND $rows AS row MERGE (n:Entity {uuid: row.uuid}) "
    "ON CREATE SET n.name = row.name, n.group_id = $group_id, n.summary = '', n.labels = [], "
    "n.created_at = $now, n.name_embedding = vecf32(row.vector)")
WRITE_FACTS_QUERY = (
    "UNWIND $rows AS row MATCH (s:Entity {uuid: row.source}) MATCH (t:Entity {uuid: row.target}) "
    "CREATE (s)-[e:RELATES_TO {uuid: row.uuid, group_id: $group_id, name: 'INSTALLED_AT', fact: row.fact, "
    "episodes: [], created_at: $now, valid_at: $now}]->(t) SET e.fact_embedding = vecf32(row.vector)")


def measure(data_dir: Path, graph_id: str, facts: int, queries: list[str], limit: int,
            echo: Callable[[str], None]) -> dict[str, Any]:
    """Fill the graph to `facts`, build its vector index, and time `queries`; the figures as a dict."""
    with StandInEmbedder() as embedder:
        config = replace(Config.from_env(), data_dir=data_dir, graph_vector_index=True, reranker_provider="none",
                         embedding_provider="openai", embedding_base_url=embedder.env["EMBEDDING_BASE_URL"],
                         embedding_model=MODEL, embedding_api_key=MODEL, embedding_dim=DIMENSION)
        started = time.perf_counter()
        runtime = GraphitiAdapter(config).runtime
        try:
            start_s = time.perf_counter() - started
            stored, written = run_on_loop(write_facts(runtime, graph_id, facts, echo), timeout=TIMEOUT_S)
            started = time.perf_counter()
            run_on_loop(index_built(exact(runtime.driver_for(graph_id)), DIMENSION), timeout=TIMEOUT_S)
            index_s = time.perf_counter() - started
            echo(f"{stored} facts ({written} written now); vector index ready in {index_s:.0f} s")
            return {"graph_id": graph_id, "facts": stored, "written": written, "limit": limit,
                    "database_start_s": round(start_s, 1), "index_build_s": round(index_s, 1),
                    **_timings(runtime, graph_id, queries, limit)}
        finally:
            reset_graphiti()


async def write_facts(runtime, graph_id: str, facts: int, echo: Callable[[str], None]) -> tuple[int, int]:
    """Write those of the first `facts` synthetic facts the graph does not hold yet: (facts the graph
    holds now, facts written)."""
    if not await graph_exists(runtime, graph_id):
        await create_graph(runtime, graph_id, graph_id)
        await unkey_facts(runtime, graph_id)  # these facts are not stored under their keys' uuids
    driver = exact(runtime.driver_for(graph_id))
    records, _, _ = await driver.execute_query(COUNT_QUERY)
    stored = records[0]["facts"]
    if stored >= facts:
        return stored, 0
    now = datetime.now(timezone.utc).isoformat()
    names = sorted({name for i in range(SENSORS) for name in _ends(i)})
    await driver.execute_query(WRITE_ENTITIES_QUERY, group_id=graph_id, now=now, rows=[
        {"uuid": _uuid(graph_id, name), "name": name, "vector": vector(name)} for name in names])
    for first in range(stored, facts, WRITE_CHUNK):
        rows = [_fact_row(graph_id, i) for i in range(first, min(facts, first + WRITE_CHUNK))]
        await driver.execute_query(WRITE_FACTS_QUERY, rows=rows, group_id=graph_id, now=now)
        done = first + len(rows)
        if done % 100_000 < WRITE_CHUNK or done == facts:
            echo(f"{done} facts written")
    records, _, _ = await driver.execute_query(COUNT_QUERY)
    return records[0]["facts"], records[0]["facts"] - stored


def _ends(i: int) -> tuple[str, str]:
    fact = synthetic_fact(i, SENSORS)
    return fact["source"], fact["target"]


def _uuid(graph_id: str, name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{graph_id}/{name}"))


def _fact_row(graph_id: str, i: int) -> dict[str, Any]:
    fact = synthetic_fact(i, SENSORS)
    return {"uuid": _uuid(graph_id, f"fact {i}"), "source": _uuid(graph_id, fact["source"]),
            "target": _uuid(graph_id, fact["target"]), "fact": fact["fact"], "vector": vector(fact["fact"])}


def _timings(runtime, graph_id: str, queries: list[str], limit: int) -> dict[str, Any]:
    series: dict[str, list[float]] = {name: [] for name in SERIES}
    same, answered, keyword_hits = 0, [], []
    for n, query in enumerate(queries[:WARM_UPS] + queries):
        times, kept, checked, facts = run_on_loop(_one_query(runtime, graph_id, query, limit), timeout=600)
        if n >= WARM_UPS:
            for name, ms in zip(SERIES, times):
                series[name].append(ms)
            same += kept == checked
            answered.append(facts)
            keyword_hits.append(len(kept))
    figures = {name: {"p50_ms": round(percentile(sorted(values), 50), 1),
                      "p95_ms": round(percentile(sorted(values), 95), 1)} for name, values in series.items()}
    return {"queries": len(queries), "keyword_halves_agree": same, "fewest_facts_answered": min(answered),
            "fewest_keyword_hits": min(keyword_hits), "ms": figures}


async def _one_query(runtime, graph_id: str, query: str, limit: int):
    driver = runtime.driver_for(graph_id)
    hits = 2 * limit  # what Graphiti's hybrid search asks of each half
    outcome = await search_graph(runtime, graph_id, query, limit=limit)
    if outcome.error:
        raise RuntimeError(f"search failed: {outcome.error}")
    first_stage = outcome.timings_ms["first_stage"]
    kept_ms, kept = await _timed(search_utils.edge_fulltext_search(driver, query, SearchFilters(), [graph_id], hits))
    checked_ms, checked = await _timed(checked_keyword_search(exact(driver), query, [graph_id], hits))
    # Each again, in the other order (the first read after the search is the slower), the faster kept.
    checked_again_ms, _ = await _timed(checked_keyword_search(exact(driver), query, [graph_id], hits))
    kept_again_ms, _ = await _timed(search_utils.edge_fulltext_search(driver, query, SearchFilters(), [graph_id],
                                                                      hits))
    kept_ms, checked_ms = min(kept_ms, kept_again_ms), min(checked_ms, checked_again_ms)
    query_vector = await runtime.graphiti.embedder.create(input_data=[query])
    index_ms, _ = await _timed(nearest_facts(exact(driver), query_vector, hits, search_utils.DEFAULT_MIN_SCORE,
                                             [graph_id]))
    return ((first_stage, kept_ms, checked_ms, index_ms),
            [edge.uuid for edge in kept], [edge.uuid for edge in checked], len(outcome.edges))


async def _timed(awaitable) -> tuple[float, Any]:
    started = time.perf_counter()
    result = await awaitable
    return (time.perf_counter() - started) * 1000, result
