"""`python -m bench first-stage`: the first stage alone (the reranker off) from the exact cosine and from the
vector index, over the graph `bench graph` stores for the same dataset, scored on the same queries.

The exact phase searches `bench graph`'s stored graph (<output>/graph-data, imported first if missing),
as that bench's reranker-off phase does. The index phase searches a copy of those files with
GRAPH_VECTOR_INDEX=on and GRAPH_VECTOR_INDEX_MIN_FACTS=0, so that the graph reads the index whatever its
size, once the index is built and the database has started again (what a served app finds after a
restart). A copy, because FalkorDB ranks a graph's full-text hits differently once the graph has a
vector index: the stored graph stays as `bench graph` measures it.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.datasets import load_dataset
from bench.graph_bench import corpus_facts, hits_to_abstracts, prepare_graph, select_queries, stored_graph_id
from bench.metrics import percentile
from bench.summary import summarize
from bench.vector_recall import index_built
from app.config import Config
from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter, embedding_dimension, reset_graphiti

EXACT, INDEX = "exact cosine (index off)", "vector index"
INDEX_COPY = "first-stage-index-data"  # under the output folder, beside graph-data


@dataclass
class FirstStageArgs:
    dataset: Path
    output: Path  # bench graph's output folder: its graph-data holds the stored graph
    config: Config
    query_range: tuple[int, int] | None = None  # 1-based, inclusive, in the dataset's query order
    max_queries: int | None = None
    limit: int = 10
    corpus: str = "candidates"
    command: str = ""
    extra: dict = field(default_factory=dict)


def run_first_stage_bench(args: FirstStageArgs, echo: Callable[[str], None] = print) -> dict:
    dataset = load_dataset(args.dataset)
    queries = select_queries(dataset, args.query_range, args.max_queries)
    facts, _ = corpus_facts(dataset, queries, args.corpus)
    exact = replace(args.config, data_dir=(args.output / "graph-data").resolve(), reranker_provider="none",
                    graph_vector_index=False)
    indexed = replace(exact, data_dir=(args.output / INDEX_COPY).resolve(), graph_vector_index=True,
                      graph_vector_index_min_facts=0)
    graph_id = stored_graph_id(dataset, queries, args.corpus, exact)
    echo(f"Graph {graph_id}: {len(facts)} facts, {len(queries)} queries, the first stage's top {args.limit}")
    try:
        prepare_graph(exact, graph_id, facts, exact.data_dir / f"import-{graph_id}.json", echo)
        records = {EXACT: _search_all(GraphitiAdapter(exact), graph_id, queries, args.limit)}
        reset_graphiti()  # the database stops before its files are copied
        _copy_with_index(exact.data_dir, indexed, graph_id)
        adapter = GraphitiAdapter(indexed)
        driver = adapter.runtime.driver_for(graph_id)
        run_on_loop(index_built(driver, embedding_dimension(indexed)), timeout=1800)
        records[INDEX] = _search_all(adapter, graph_id, queries, args.limit)
        if not driver.search_interface.ready:
            raise RuntimeError("the index phase's searches did not read the vector index")
    finally:
        reset_graphiti()
    return _results(args, dataset, graph_id, len(facts), records)


def _copy_with_index(stored: Path, indexed: Config, graph_id: str) -> None:
    """A copy of the stored files whose graph has a built vector index, the database stopped again, so
    that the searches run on a database that loaded the graph with its index, as after a restart."""
    shutil.rmtree(indexed.data_dir, ignore_errors=True)
    shutil.copytree(stored, indexed.data_dir)
    driver = GraphitiAdapter(indexed).runtime.driver_for(graph_id)
    run_on_loop(index_built(driver, embedding_dimension(indexed)), timeout=1800)
    reset_graphiti()


def _search_all(adapter, graph_id: str, queries, limit: int) -> list[dict]:
    records = []
    for query in queries:
        started = time.perf_counter()
        outcome = adapter.graph.search(graph_id, query.text, limit=limit)
        if outcome.error:
            raise RuntimeError(f"search for query {query.qid} failed: {outcome.error}")
        records.append({"qid": query.qid, "ranking": hits_to_abstracts(outcome.edges),
                        "facts": [hit.uuid for hit in outcome.edges],
                        "latency_s": round(time.perf_counter() - started, 4),
                        "first_stage_ms": outcome.timings_ms.get("first_stage") or 0.0})
    return records


def _results(args: FirstStageArgs, dataset, graph_id: str, facts: int, records: dict[str, list[dict]]) -> dict:
    phases = {}
    for label, rows in records.items():
        aggregate, _ = summarize(rows, dataset.qrels, dataset.relevance_level)
        times = [row["first_stage_ms"] for row in rows]
        phases[label] = {"ndcg@10": aggregate["ndcg@10"], "mrr@10": aggregate["mrr@10"],
                         "first_stage_p50_ms": round(percentile(times, 0.5), 1),
                         "first_stage_p95_ms": round(percentile(times, 0.95), 1)}
    changed = sum(1 for a, b in zip(records[EXACT], records[INDEX]) if a["facts"] != b["facts"])
    return {"benchmark": "first-stage", "dataset": dataset.name, "graph_id": graph_id, "facts": facts,
            "queries": len(records[EXACT]), "query_range": args.query_range, "limit": args.limit,
            "phases": phases, "top_changed": changed, "command": args.command, **args.extra}


def markdown_table(results: dict) -> str:
    exact, index = (results["phases"][label] for label in (EXACT, INDEX))
    lines = [f"| first stage, {results['dataset']} ({results['queries']} queries) | nDCG@10 | MRR@10 | "
             "first stage p50 / p95 |", "| --- | ---: | ---: | ---: |"]
    for label, row in results["phases"].items():
        lines.append(f"| {label} | {row['ndcg@10']:.4f} | {row['mrr@10']:.4f} | "
                     f"{row['first_stage_p50_ms']:g} / {row['first_stage_p95_ms']:g} ms |")
    lines.append(f"\nnDCG@10 {index['ndcg@10'] - exact['ndcg@10']:+.4f} with the index; the top "
                 f"{results['limit']} differs on {results['top_changed']} of {results['queries']} queries.")
    return "\n".join(lines)
