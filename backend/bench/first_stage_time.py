"""The first stage's time over a graph of any size, in one process (`python -m bench first-stage-time`).

`bench scale` grows its graph through the import, which here takes hours to reach a million facts. This
command writes `bench scale`'s synthetic facts (bench/load_run.py) straight into the database instead
(the embedded FalkorDB; with GRAPH_BACKEND=neo4j the local Neo4j; never a server FALKORDB_URL or NEO4J_URI
names): one Cypher CREATE per 5,000 facts, each with the stand-in embedder's vector
(bench/stand_in_embedder.py), no duplicate check and no journal. It is a fixture for timing searches,
not an import. Only the facts the graph lacks are written, so a stopped run goes on where it stopped.

Then, over that graph, with the stand-in embedder serving the queries and the app's own search code:
the vector index is built (unless the graph has one) and its build timed; each of `bench scale`'s
queries, after three warm-ups, is timed as
- the whole first stage, as search answers it (`search_graph`, reranker off);
- its keyword half as the search hook runs it (the kept hits checked) and, on FalkorDB, with Graphiti's
  checks on every hit (`checked_keyword_search`, what the hook falls back to), each twice in turn
  (A B B A) and the faster kept, and whether both gave the same facts in the same order (on Neo4j the
  hook runs Graphiti's own keyword search: one keyword half, timed twice, the faster kept);
- its similarity half from the vector index.
Each half is asked for twice the facts wanted, as Graphiti's hybrid search asks it. Last, the database
server's resident memory, now and at its peak (which, when this run filled the graph, includes the writes
and the index build).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from graphiti_core.driver.driver import GraphProvider
from graphiti_core.search import search_utils
from graphiti_core.search.search_filters import SearchFilters

from bench.load_run import database_pid, percentile, rss_mib, synthetic_fact
from bench.stand_in_embedder import DIMENSION, MODEL, StandInEmbedder, vector
from bench.vector_recall import index_built
from app.config import Config
from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter, reset_graphiti
from app.graph.search import search_graph
from app.graph.search_hook import checked_keyword_search, exact
from app.graph.store import create_graph, graph_exists, unkey_facts
from app.graph.vector_index import nearest_facts
from app.graph.similarity import embed_query

GRAPH_ID = "first-stage-time"
SENSORS = 1000  # as `bench scale`: the facts cycle through 1,000 sensors and 10 places
WRITE_CHUNK = 5000
WARM_UPS = 3
TIMEOUT_S = 7200
SERIES = ("first_stage", "keyword_kept_checked", "keyword_every_hit_checked", "index_half")
# On Neo4j the hook's keyword half is Graphiti's own query: Lucene keeps the best hits, Cypher checks those.
NEO4J_SERIES = ("first_stage", "keyword_kept_checked", "index_half")

# The graph's own facts: on Neo4j every graph's facts share the database.
COUNT_QUERY = "MATCH ()-[e:RELATES_TO]->() WHERE e.group_id = $group_id RETURN count(e) AS facts"
_MERGE_ENTITIES = (
    "UNWIND $rows AS row MERGE (n:Entity {uuid: row.uuid}) "
    "ON CREATE SET n.name = row.name, n.group_id = $group_id, n.summary = '', n.labels = [], n.created_at = $now ")
_CREATE_FACTS = (
    "UNWIND $rows AS row MATCH (s:Entity {uuid: row.source}) MATCH (t:Entity {uuid: row.target}) "
    "CREATE (s)-[e:RELATES_TO {uuid: row.uuid, group_id: $group_id, name: 'INSTALLED_AT', fact: row.fact, "
    "episodes: [], created_at: $now, valid_at: $now}]->(t) ")
# Each database's vector type, as Graphiti stores embeddings there: FalkorDB's vecf32, Neo4j's float array.
WRITE_QUERIES = {
    GraphProvider.FALKORDB: (_MERGE_ENTITIES + "SET n.name_embedding = vecf32(row.vector)",
                             _CREATE_FACTS + "SET e.fact_embedding = vecf32(row.vector)"),
    GraphProvider.NEO4J: (
        _MERGE_ENTITIES + "WITH n, row CALL db.create.setNodeVectorProperty(n, 'name_embedding', row.vector)",
        _CREATE_FACTS + "WITH e, row CALL db.create.setRelationshipVectorProperty(e, 'fact_embedding', row.vector)"),
}


def measure(data_dir: Path, graph_id: str, facts: int, queries: list[str], limit: int,
            echo: Callable[[str], None]) -> dict[str, Any]:
    """Fill the graph to `facts`, build its vector index, and time `queries`; the figures as a dict."""
    with StandInEmbedder() as embedder:
        # The database the app starts itself under data_dir, on a free port: a configured server is never written to.
        config = replace(Config.from_env(), data_dir=data_dir, falkordb_url=None, neo4j_uri=None, neo4j_local_port=0,
                         graph_vector_index=True, reranker_provider="none",
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
            timings = _timings(runtime, graph_id, queries, limit)
            pid = database_pid(data_dir, timings["backend"])
            return {"graph_id": graph_id, "facts": stored, "written": written, "limit": limit,
                    "database_start_s": round(start_s, 1), "index_build_s": round(index_s, 1),
                    "database_rss_mib": rss_mib(pid) if pid else None,
                    "database_peak_rss_mib": rss_mib(pid, "VmHWM") if pid else None, **timings}
        finally:
            reset_graphiti()


async def write_facts(runtime, graph_id: str, facts: int, echo: Callable[[str], None]) -> tuple[int, int]:
    """Write those of the first `facts` synthetic facts the graph does not hold yet: (facts the graph
    holds now, facts written)."""
    if not await graph_exists(runtime, graph_id):
        await create_graph(runtime, graph_id, graph_id)
        await unkey_facts(runtime, graph_id)  # these facts are not stored under their keys' uuids
    driver = exact(runtime.driver_for(graph_id))
    stored = await _count(driver, graph_id)
    if stored >= facts:
        return stored, 0
    write_entities, write_facts_query = WRITE_QUERIES[driver.provider]
    now = datetime.now(timezone.utc).isoformat()
    names = sorted({name for i in range(SENSORS) for name in _ends(i)})
    await driver.execute_query(write_entities, group_id=graph_id, now=now, rows=[
        {"uuid": _uuid(graph_id, name), "name": name, "vector": vector(name)} for name in names])
    for first in range(stored, facts, WRITE_CHUNK):
        rows = [_fact_row(graph_id, i) for i in range(first, min(facts, first + WRITE_CHUNK))]
        await driver.execute_query(write_facts_query, rows=rows, group_id=graph_id, now=now)
        done = first + len(rows)
        if done % 100_000 < WRITE_CHUNK or done == facts:
            echo(f"{done} facts written")
    now_stored = await _count(driver, graph_id)
    return now_stored, now_stored - stored


async def _count(driver, graph_id: str) -> int:
    records, _, _ = await driver.execute_query(COUNT_QUERY, group_id=graph_id)
    return records[0]["facts"]


def _ends(i: int) -> tuple[str, str]:
    fact = synthetic_fact(i, SENSORS)
    return fact["source"], fact["target"]


def _uuid(graph_id: str, name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{graph_id}/{name}"))


def _fact_row(graph_id: str, i: int) -> dict[str, Any]:
    fact = synthetic_fact(i, SENSORS)
    return {"uuid": _uuid(graph_id, f"fact {i}"), "source": _uuid(graph_id, fact["source"]),
            "target": _uuid(graph_id, fact["target"]), "fact": fact["fact"], "vector": vector(fact["fact"])}


def series_of(provider: GraphProvider) -> tuple[str, ...]:
    """The timings taken on this database (on Neo4j the hook's keyword half is Graphiti's own)."""
    return SERIES if provider == GraphProvider.FALKORDB else NEO4J_SERIES


def _timings(runtime, graph_id: str, queries: list[str], limit: int) -> dict[str, Any]:
    provider = runtime.driver_for(graph_id).provider
    series: dict[str, list[float]] = {name: [] for name in series_of(provider)}
    same, answered, keyword_hits = 0, [], []
    warm_ups = queries[:WARM_UPS]
    for n, query in enumerate(warm_ups + queries):
        times, kept, checked, facts = run_on_loop(_one_query(runtime, graph_id, query, limit), timeout=600)
        if n >= len(warm_ups):
            for name, values in series.items():
                values.append(times[name])
            same += kept == checked
            answered.append(facts)
            keyword_hits.append(len(kept))
    figures = {name: {"p50_ms": round(percentile(sorted(values), 50), 1),
                      "p95_ms": round(percentile(sorted(values), 95), 1)} for name, values in series.items()}
    return {"backend": provider.value, "queries": len(queries),
            # None on Neo4j: there is one keyword half, nothing to compare it with.
            "keyword_halves_agree": same if provider == GraphProvider.FALKORDB else None,
            "fewest_facts_answered": min(answered), "fewest_keyword_hits": min(keyword_hits), "ms": figures}


async def _one_query(runtime, graph_id: str, query: str, limit: int):
    """The query's times by series name, the keyword hits as the hook keeps them and (FalkorDB; else None)
    with every hit checked, and how many facts the search answered."""
    driver = runtime.driver_for(graph_id)
    hits = 2 * limit  # what Graphiti's hybrid search asks of each half
    outcome = await search_graph(runtime, graph_id, query, limit=limit)
    if outcome.error:
        raise RuntimeError(f"search failed: {outcome.error}")
    times = {"first_stage": outcome.timings_ms["first_stage"]}

    def hook_keyword_half():
        return search_utils.edge_fulltext_search(driver, query, SearchFilters(), [graph_id], hits)

    kept_ms, kept = await _timed(hook_keyword_half())
    checked = None
    if driver.provider == GraphProvider.FALKORDB:  # in turn, A B B A: the first read after the search is slower
        checked_ms, checked = await _timed(checked_keyword_search(exact(driver), query, [graph_id], hits))
        checked_again_ms, _ = await _timed(checked_keyword_search(exact(driver), query, [graph_id], hits))
        times["keyword_every_hit_checked"] = min(checked_ms, checked_again_ms)
        checked = [edge.uuid for edge in checked]
    kept_again_ms, _ = await _timed(hook_keyword_half())
    times["keyword_kept_checked"] = min(kept_ms, kept_again_ms)
    query_vector = await embed_query(runtime.graphiti.embedder, query)
    times["index_half"], _ = await _timed(nearest_facts(exact(driver), query_vector, hits,
                                                        search_utils.DEFAULT_MIN_SCORE, [graph_id]))
    return times, [edge.uuid for edge in kept], checked, len(outcome.edges)


async def _timed(awaitable) -> tuple[float, Any]:
    started = time.perf_counter()
    result = await awaitable
    return (time.perf_counter() - started) * 1000, result
