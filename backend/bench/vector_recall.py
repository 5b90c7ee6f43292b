"""How many of the exact nearest facts the vector index finds (`bench scale --vector-index`,
`bench vector-recall`).

For each query: the query's vector from the app's embedder, the `k` facts nearest it by Graphiti's
exact cosine over every fact of the graph, and the `k` the index answers (app/graph/vector_index.py,
the same call graph search makes); recall is the share of the exact ones the index also answers.
`recall_by_overfetch` repeats the index's half for several over-asks (hits asked per fact wanted) and
times it: asking, deduplicating and reading the kept facts, as a search does. On Neo4j, whose index
ranks quantized vectors, it also gives the largest gap between the index's score of a hit and its
exact score (the error app/graph/vector_index.py's search reads from each answer).
`recall_beside(app, ...)` runs it in a child process with the served app's environment, over that
app's DATA_DIR after the app has stopped, so both read the same stored vectors with the same settings.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from graphiti_core.driver.driver import GraphProvider
from graphiti_core.search import search_utils
from graphiti_core.search.search_filters import SearchFilters

from bench.load_run import percentile
from app.config import Config
from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter, embedding_dimension, reset_graphiti
from app.graph.search import fact_closeness
from app.graph.search_hook import exact
from app.graph.store import graph_exists
from app.graph.vector_index import (NEO4J_INDEX, NEO4J_NEAREST_QUERY, default_overfetch, ensure_vector_index,
                                    index_state, nearest_facts)
from app.graph.similarity import embed_query


RECALL_TIMEOUT_S = 1800
SCORE_ERROR_HITS = 400  # hits per query over which the index's scores are compared with the exact ones


def recall_beside(env: dict[str, str], data_dir: Path, graph_id: str, queries: list[str], k: int = 20) -> dict[str, Any]:
    """`index_recall` in a child process with `env` (a served app's environment, the app stopped)."""
    script = ("import json, sys; from pathlib import Path; from bench.vector_recall import index_recall; "
              "a = json.loads(sys.argv[1]); "
              "print(json.dumps(index_recall(Path(a['data_dir']), a['graph_id'], a['queries'], a['k'])))")
    arguments = json.dumps({"data_dir": str(data_dir), "graph_id": graph_id, "queries": queries, "k": k})
    done = subprocess.run([sys.executable, "-c", script, arguments], env=env, cwd=Path(__file__).parents[1],
                          capture_output=True, text=True, timeout=RECALL_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"measuring the vector index's recall failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def index_recall(data_dir: Path, graph_id: str, queries: list[str], k: int = 20) -> dict[str, Any]:
    """recall@k of the index, as search asks it, against the exact cosine over `queries` (mean and
    lowest), and the share of the index's hits at least as near as the exact k-th (near-ties swapped
    at the cut still count)."""
    figures = recall_by_overfetch(data_dir, graph_id, queries, k, [None])[0]
    return {name: figures[name] for name in ("k", "queries", "mean", "min", "as_near_as_exact")}


def recall_by_overfetch(data_dir: Path, graph_id: str, queries: list[str], k: int,
                        overfetches: list[int | None]) -> list[dict[str, Any]]:
    """`index_recall`'s figures for each over-ask (None: the one search uses), with the index search's
    p50 / p95 in ms (ask, dedupe, read the facts; after a warm-up of three queries). The exact nearest
    facts are computed once."""
    # The index alone is measured: no reranker is built, so none is warmed up against a server.
    config = replace(Config.from_env(), data_dir=data_dir, graph_vector_index=True, reranker_provider="none")
    runtime = GraphitiAdapter(config).runtime
    try:
        if not run_on_loop(graph_exists(runtime, graph_id), timeout=600):
            raise ValueError(f"graph {graph_id!r} is not stored under {data_dir} (is DATA_DIR the one that stored it?)")
        driver = runtime.driver_for(graph_id)
        # A graph stored without the index gets one now (the search would take the exact path meanwhile).
        run_on_loop(index_built(driver, embedding_dimension(config)), timeout=RECALL_TIMEOUT_S)
        vectors = [run_on_loop(embed_query(runtime.graphiti.embedder, query), timeout=600) for query in queries]
        plain = exact(driver)
        wanted = [run_on_loop(_exact_nearest(plain, vector, graph_id, k), timeout=600) for vector in vectors]
        score_error = run_on_loop(index_score_error(plain, vectors), timeout=600)
        return [{**_figures(driver, vectors, wanted, graph_id, k, overfetch), "index_score_error": score_error}
                for overfetch in overfetches]
    finally:
        reset_graphiti()


async def index_built(driver, dimension: int) -> None:
    """Make the graph's vector index unless it has one, and return once the database has built it."""
    await ensure_vector_index(driver, dimension)
    while await index_state(driver) != "ready":
        await asyncio.sleep(0.5)


async def index_score_error(driver, vectors: list[list[float]]) -> float | None:
    """Neo4j: the largest gap between the index's score of a hit and its exact score, over the first
    SCORE_ERROR_HITS hits of each vector (every graph's). None on FalkorDB, whose index scores are exact."""
    if driver.provider != GraphProvider.NEO4J:
        return None
    gaps = [0.0]
    for vector in vectors:
        records, _, _ = await driver.execute_query(NEO4J_NEAREST_QUERY, name=NEO4J_INDEX, k=SCORE_ERROR_HITS,
                                                   vector=vector)
        gaps.extend(abs(record["index_score"] - record["score"]) for record in records)
    return round(max(gaps), 5)


def _figures(driver, vectors, wanted, graph_id: str, k: int, overfetch: int | None) -> dict[str, Any]:
    for vector in vectors[:3]:  # warm-up: the first reads of a reloaded graph are slower
        run_on_loop(_by_index(driver, vector, graph_id, k, overfetch), timeout=600)
    plain, pairs, times_ms = exact(driver), [], []
    for vector, exact_hits in zip(vectors, wanted):
        started = time.perf_counter()
        found = run_on_loop(_by_index(driver, vector, graph_id, k, overfetch), timeout=600)
        times_ms.append((time.perf_counter() - started) * 1000)
        pairs.append(run_on_loop(_compare(plain, vector, exact_hits, found), timeout=600))
    recalls, as_near = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
    times_ms.sort()
    return {"overfetch": overfetch or default_overfetch(driver), "k": k, "queries": len(pairs),
            "mean": _mean(recalls), "min": round(min(recalls), 4), "as_near_as_exact": _mean(as_near),
            "index_search_ms_p50": round(percentile(times_ms, 50), 1),
            "index_search_ms_p95": round(percentile(times_ms, 95), 1)}


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 4)


async def _exact_nearest(driver, vector: list[float], graph_id: str, k: int):
    return await search_utils.edge_similarity_search(driver, vector, None, None, SearchFilters(), [graph_id], k)


async def _by_index(driver, vector: list[float], graph_id: str, k: int, overfetch: int | None):
    return await nearest_facts(driver, vector, k, search_utils.DEFAULT_MIN_SCORE, [graph_id], overfetch=overfetch)


async def _compare(driver, vector: list[float], wanted, found) -> tuple[float, float]:
    if not wanted or found is None:  # nothing to find, or (Neo4j) the index deferred to the exact path
        return 1.0, 1.0
    recall = len({edge.uuid for edge in wanted} & {edge.uuid for edge in found}) / len(wanted)
    closeness = await fact_closeness(driver, vector, [edge.uuid for edge in [*wanted, *found]])
    cut = min(closeness[edge.uuid] for edge in wanted)
    near = sum(1 for edge in found if closeness[edge.uuid] >= cut - 1e-6)
    return recall, near / len(wanted)
