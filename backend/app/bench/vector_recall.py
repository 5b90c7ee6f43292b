"""How many of the exact nearest facts the vector index finds (`bench scale --vector-index`).

For each query: the query's vector from the app's embedder, the `k` facts nearest it by Graphiti's
exact cosine over every fact of the graph, and the `k` the index answers (app/graph/vector_index.py,
the same call graph search makes); recall is the share of the exact ones the index also answers.
`recall_beside(app, ...)` runs it in a child process with the served app's environment, over that
app's DATA_DIR after the app has stopped, so both read the same stored vectors with the same settings.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from graphiti_core.search import search_utils
from graphiti_core.search.search_filters import SearchFilters

from app.config import Config
from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter, reset_graphiti
from app.graph.search import fact_closeness
from app.graph.search_hook import exact
from app.graph.vector_index import nearest_facts


RECALL_TIMEOUT_S = 1800


def recall_beside(env: dict[str, str], data_dir: Path, graph_id: str, queries: list[str], k: int = 20) -> dict[str, Any]:
    """`index_recall` in a child process with `env` (a served app's environment, the app stopped)."""
    script = ("import json, sys; from pathlib import Path; from app.bench.vector_recall import index_recall; "
              "a = json.loads(sys.argv[1]); "
              "print(json.dumps(index_recall(Path(a['data_dir']), a['graph_id'], a['queries'], a['k'])))")
    arguments = json.dumps({"data_dir": str(data_dir), "graph_id": graph_id, "queries": queries, "k": k})
    done = subprocess.run([sys.executable, "-c", script, arguments], env=env, cwd=Path(__file__).parents[2],
                          capture_output=True, text=True, timeout=RECALL_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"measuring the vector index's recall failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def index_recall(data_dir: Path, graph_id: str, queries: list[str], k: int = 20) -> dict[str, Any]:
    """recall@k of the index against the exact cosine over `queries` (mean and lowest), and the share
    of the index's hits at least as near as the exact k-th (near-ties swapped at the cut still count)."""
    config = replace(Config.from_env(), data_dir=data_dir, graph_vector_index=True)
    runtime = GraphitiAdapter(config).runtime
    try:
        pairs = [run_on_loop(_compare(runtime, graph_id, query, k), timeout=600) for query in queries]
    finally:
        reset_graphiti()
    recalls, as_near = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
    return {"k": k, "queries": len(pairs), "mean": _mean(recalls), "min": round(min(recalls), 4),
            "as_near_as_exact": _mean(as_near)}


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 4)


async def _compare(runtime, graph_id: str, query: str, k: int) -> tuple[float, float]:
    driver = exact(runtime.driver_for(graph_id))
    vector = await runtime.graphiti.embedder.create(query)
    wanted = await search_utils.edge_similarity_search(driver, vector, None, None, SearchFilters(), [graph_id], k)
    found = await nearest_facts(driver, vector, k, search_utils.DEFAULT_MIN_SCORE, [graph_id])
    if not wanted or found is None:  # nothing to find, or (Neo4j) the index deferred to the exact path
        return 1.0, 1.0
    recall = len({edge.uuid for edge in wanted} & {edge.uuid for edge in found}) / len(wanted)
    closeness = await fact_closeness(driver, vector, [edge.uuid for edge in [*wanted, *found]])
    cut = min(closeness[edge.uuid] for edge in wanted)
    near = sum(1 for edge in found if closeness[edge.uuid] >= cut - 1e-6)
    return recall, near / len(wanted)
