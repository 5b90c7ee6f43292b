"""How the cost grows with the graph (`python -m bench scale`).

ONE graph is grown through the sizes (e.g. 1k, 10k, 100k facts) with the bulk import
(`flask import-facts`, app/cli/fact_upload.py) of synthetic facts written to a JSONL file, into the
real API served the production way (bench/load_run.py's ServedApp: gunicorn, the app's own
database, the embedded FalkorDB or with GRAPH_BACKEND=neo4j the local Neo4j, the local embedder) over
a private DATA_DIR. At each size:

- import throughput of the step (facts per second of the upload; the graph keeps growing);
- first-stage searches (RERANKER_PROVIDER=none): p50/p95;
- with `vector_index`, the app serves with GRAPH_VECTOR_INDEX=on, and each size is also searched
  with it off over the same data (the exact cosine over every fact), and the index's recall@20
  against that exact cosine is measured (bench/vector_recall.py);
- when a judge is given, a few reranked searches: the app is restarted over the same DATA_DIR with the
  LLM reranker pointed at that judge (RERANKER_* through the served app's environment, RERANKER_BUDGET_S
  unset), p50/p95 and the share of the search time spent reranking (the answer's timings_ms);
- the resident memory of the app process and of its database server (from /proc; the column is named
  for the database), and how long the app takes to start over the graph (the database loads it and
  rebuilds its indexes, the vector index too, before the app answers).

With `stand_in_embedder` every served app embeds through bench/stand_in_embedder.py, which answers
at once: what is left of the import's time is the app's and the database's (on the 2-core machine,
357-479 facts/s up to 100,000 facts with the vector index on, against 49 with the local embedder),
so the large sizes fill in a fraction of the time. The index's recall is then over vectors that carry
word overlap only (0.965 at 100,000 facts, against 0.9925 for the local embedder's).

The reranker and the vector index are process-wide settings, hence the restarts.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import json

from bench.load_run import LoadResult, ServedApp, percentile, request_json, synthetic_fact, synthetic_queries
from bench.stand_in_embedder import StandInEmbedder
from bench.vector_recall import recall_beside
from app.cli.fact_upload import Api, Upload

GRAPH_ID = "scale"
DEFAULT_SIZES = (1000, 10000, 100000)
IMPORT_TIMEOUT_S = 3600
SERVER_THREADS = 8
START_TIMEOUT_S = 900  # the app answers once the database has rebuilt a large graph's indexes


@dataclass
class ScaleOptions:
    sizes: tuple[int, ...] = DEFAULT_SIZES
    batch_size: int = 2000  # facts per request of the bulk import (the API takes at most 5000)
    # Sensors the facts cycle through: a fact then brings one text to embed (its own), not two.
    sensors: int | None = 1000
    searches: int = 20  # first-stage searches per size
    reranked_searches: int = 3  # per size, only with a judge
    limit: int = 10
    judge_base_url: str | None = None
    judge_model: str | None = None
    vector_index: bool = False  # serve with GRAPH_VECTOR_INDEX=on; also measure the exact path and recall
    recall_queries: int = 40
    stand_in_embedder: bool = False  # embed with bench/stand_in_embedder.py: the import without the model
    embedder_env: dict[str, str] = field(default_factory=dict)  # EMBEDDING_* of every served app (set by run)
    data_dir: Path | None = None  # keep the grown graph here (an empty or new folder); None: a temporary one

    @property
    def has_judge(self) -> bool:
        return bool(self.judge_base_url and self.judge_model)


@dataclass
class _Step:
    """What one size measured."""

    size: int
    import_facts: int = 0
    import_s: float = 0.0
    batches: list[dict[str, float]] = field(default_factory=list)

    def throughput(self) -> float:
        return round(self.import_facts / self.import_s, 2) if self.import_s else 0.0


def _reranker_off(options: ScaleOptions, vector_index: bool | None = None) -> dict[str, str]:
    on = options.vector_index if vector_index is None else vector_index
    # With the index, every size reads it (no GRAPH_VECTOR_INDEX_MIN_FACTS threshold): that is what is measured.
    return {"RERANKER_PROVIDER": "none", "GRAPH_VECTOR_INDEX": "on" if on else "off", "GRAPH_VECTOR_INDEX_MIN_FACTS": "0",
            **options.embedder_env}


def _reranker_on(options: ScaleOptions) -> dict[str, str]:
    return {**_reranker_off(options), "RERANKER_PROVIDER": "ollama", "RERANKER_BASE_URL": options.judge_base_url,
            "RERANKER_MODEL": options.judge_model}


def _serve(data_dir: Path, log_path: Path, env: dict[str, str]) -> tuple[ServedApp, float]:
    app = ServedApp(data_dir, log_path, SERVER_THREADS, env)
    app.env.pop("RERANKER_BUDGET_S", None)  # a budget would cut the judge short: measure the whole rerank
    began = time.monotonic()
    app.start(timeout_s=START_TIMEOUT_S)
    return app, round(time.monotonic() - began, 1)


def _grow(app: ServedApp, step: _Step, have: int, options: ScaleOptions, folder: Path,
          echo: Callable[[str], None]) -> None:
    """Import facts have..size with the bulk import; each batch's seconds are kept."""
    path = folder / f"facts-{have}-{step.size}.jsonl"
    with path.open("w", encoding="utf-8") as out:
        for index in range(have, step.size):
            out.write(json.dumps(synthetic_fact(index, options.sensors)) + "\n")
    upload = Upload(Api(f"http://127.0.0.1:{app.port}"), path, GRAPH_ID, batch_size=options.batch_size)
    progress = upload.run(echo=lambda line: echo(f"  {line}"))
    path.unlink()
    upload.state_path.unlink(missing_ok=True)
    step.import_facts, step.import_s = progress.acknowledged - progress.started_at, progress.seconds
    previous = 0.0
    for batch in progress.batches:
        step.batches.append({"facts": batch["facts"], "seconds": round(batch["acknowledged_at_s"] - previous, 2)})
        previous = batch["acknowledged_at_s"]


def _searches(app: ServedApp, queries: list[str], limit: int) -> tuple[LoadResult, list[dict[str, Any]]]:
    """Sequential searches: latency as one user sees it, and each answer's timings and judged counts."""
    result, answers = LoadResult(), []
    started = time.monotonic()
    for query in queries:
        began = time.perf_counter()
        status, body = request_json(app.port, "POST", f"/api/graph/{GRAPH_ID}/search",
                                    {"query": query, "limit": limit}, timeout=IMPORT_TIMEOUT_S)
        latency = time.perf_counter() - began
        failed = status != 200 or body.get("error") or not body.get("edges")
        result.record(latency, f"HTTP {status}: {body}"[:300] if failed else None)
        if status == 200:
            answers.append({"latency_s": latency, "timings_ms": body.get("timings_ms", {}),
                            "reranked": body.get("reranked"), "judged": body.get("judged"),
                            "candidates": body.get("candidates")})
    result.elapsed_s = time.monotonic() - started
    return result, answers


def _latency(result: LoadResult) -> dict[str, Any]:
    summary = result.summary()
    return {key: summary[key] for key in ("requests", "errors", "first_errors", "p50_ms", "p95_ms", "max_ms")}


def _reranked_figures(result: LoadResult, answers: list[dict[str, Any]]) -> dict[str, Any]:
    total_s = sum(answer["latency_s"] for answer in answers)
    rerank_s = sum(float(answer["timings_ms"].get("rerank", 0.0)) / 1000 for answer in answers)
    return {**_latency(result),
            "judge_share": round(rerank_s / total_s, 3) if total_s else None,
            "reranked": sum(1 for answer in answers if answer["reranked"]),
            "judged": sum(answer["judged"] or 0 for answer in answers),
            "candidates": sum(answer["candidates"] or 0 for answer in answers),
            "first_stage_p50_ms": round(percentile(
                sorted(float(a["timings_ms"].get("first_stage", 0.0)) for a in answers), 50), 1)}


def _measure_size(app: ServedApp, step: _Step, options: ScaleOptions) -> dict[str, Any]:
    status, stats = request_json(app.port, "GET", f"/api/graph/{GRAPH_ID}/stats")
    if status != 200:
        raise RuntimeError(f"graph stats failed: HTTP {status} {stats}")
    first, _ = _searches(app, _queries(options.searches), options.limit)
    return {"size": step.size, "edges": stats["edges"], "nodes": stats["nodes"],
            "import": {"facts": step.import_facts, "seconds": round(step.import_s, 1),
                       "facts_per_s": step.throughput(), "batches": step.batches},
            "first_stage": _latency(first), "memory": app.memory()}


def _queries(count: int) -> list[str]:
    queries = synthetic_queries()
    return [queries[i % len(queries)] for i in range(count)]


def _measure_exact(data_dir: Path, log_dir: Path, options: ScaleOptions) -> dict[str, Any]:
    """With the index on: the index's recall, and the first stage the same data gives without it."""
    env = ServedApp(data_dir, log_dir / "recall.log", SERVER_THREADS, _reranker_off(options)).env
    recall = recall_beside(env, data_dir, GRAPH_ID, synthetic_queries()[:options.recall_queries])
    app, start_s = _serve(data_dir, log_dir / "serve-scale-exact.log", _reranker_off(options, vector_index=False))
    try:
        first, _ = _searches(app, _queries(options.searches), options.limit)
        memory = app.memory()
    finally:
        app.stop()
    return {"recall": recall, "first_stage": _latency(first), "memory": memory, "app_start_s": start_s}


def _measure_reranked(data_dir: Path, log_dir: Path, options: ScaleOptions) -> dict[str, Any]:
    app, start_s = _serve(data_dir, log_dir / "serve-scale-reranked.log", _reranker_on(options))
    try:
        queries = synthetic_queries()[:options.reranked_searches]
        result, answers = _searches(app, queries, options.limit)
        memory = app.memory()
    finally:
        app.stop()
    return {**_reranked_figures(result, answers), "memory": memory, "app_start_s": start_s}


def run(options: ScaleOptions, log_dir: Path | None = None, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Grow one graph through options.sizes; a list of per-size figures (see the module docstring)."""
    steps: list[dict[str, Any]] = []
    embedder = StandInEmbedder() if options.stand_in_embedder else nullcontext()
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as temp, embedder as stand_in:
        if stand_in is not None:
            options = replace(options, embedder_env=stand_in.env)
        data_dir, logs = options.data_dir or Path(temp) / "data", log_dir or Path(temp)
        logs.mkdir(parents=True, exist_ok=True)
        app, _ = _serve(data_dir, logs / "serve-scale.log", _reranker_off(options))
        try:
            status, body = request_json(app.port, "POST", "/api/graph", {"graph_id": GRAPH_ID})
            if status != 201:
                raise RuntimeError(f"creating the graph answered {status} {body}; see {logs / 'serve-scale.log'}")
            have = 0
            for size in options.sizes:
                echo(f"Growing the graph to {size} facts...")
                step = _Step(size)
                _grow(app, step, have, options, Path(temp), echo)
                have = size
                figures = _measure_size(app, step, options)
                app.stop()  # the settings below are process-wide: serve the same data with them
                if options.vector_index:
                    echo(f"  recall@20 of the vector index and {options.searches} searches without it...")
                    figures["exact"] = _measure_exact(data_dir, logs, options)
                if options.has_judge and options.reranked_searches:
                    echo(f"  {options.reranked_searches} reranked searches with {options.judge_model}...")
                    figures["reranked"] = _measure_reranked(data_dir, logs, options)
                app, figures["app_start_s"] = _serve(data_dir, logs / "serve-scale.log", _reranker_off(options))
                steps.append(figures)
                echo(f"  {describe_step(figures)}")
        finally:
            app.stop()
    settings = {name: str(value) if isinstance(value, Path) else value
                for name, value in options.__dict__.items() if name != "embedder_env"}
    return {"steps": steps, "options": {**settings, "sizes": list(options.sizes)},
            "stand_in_embedded_texts": stand_in.texts if stand_in is not None else None,
            "reranked_skipped": None if options.has_judge else "no judge given (--base-url and --model)"}


def describe_step(figures: dict[str, Any]) -> str:
    first, reranked, exact = figures["first_stage"], figures.get("reranked"), figures.get("exact")
    line = (f"{figures['edges']} facts: import {figures['import']['facts_per_s']} facts/s, first stage p50 "
            f"{first['p50_ms']} ms p95 {first['p95_ms']} ms")
    if exact:
        line += (f" (exact cosine: p50 {exact['first_stage']['p50_ms']} ms p95 {exact['first_stage']['p95_ms']} ms; "
                 f"index recall@{exact['recall']['k']} {exact['recall']['mean']:.3f}, "
                 f"as near as exact {exact['recall']['as_near_as_exact']:.3f})")
    if reranked:
        line += f", reranked p50 {reranked['p50_ms']} ms p95 {reranked['p95_ms']} ms"
    return line


def markdown_table(report: dict[str, Any]) -> str:
    steps = report["steps"]
    database = steps[0]["memory"]["database"] if steps else "database"
    with_index = any("exact" in step for step in steps)
    index_head = (" first stage p50 / p95, exact cosine | index recall@20 (as near) |" if with_index else "")
    rows = [f"| facts | import facts/s | first stage p50 / p95 |{index_head} reranked p50 / p95 | judge share | "
            f"judged | app RSS | {database} RSS | app start |",
            "| ---: " * (9 + 2 * with_index) + "|"]
    for step in steps:
        rows.append("| " + " | ".join(_cells(step, with_index)) + " |")
    return "\n".join(rows)


def _cells(step: dict[str, Any], with_index: bool) -> list[str]:
    first, reranked, memory, exact = step["first_stage"], step.get("reranked"), step["memory"], step.get("exact")
    cells = [f"{step['edges']}", f"{step['import']['facts_per_s']}", _p50_p95(first)]
    if with_index:
        cells += [_p50_p95(exact["first_stage"]), f"{exact['recall']['mean']:.3f} ({exact['recall']['as_near_as_exact']:.3f})"]
    if reranked:
        cells += [f"{reranked['p50_ms'] / 1000:.1f} s / {reranked['p95_ms'] / 1000:.1f} s ({reranked['requests']})",
                  _share(reranked['judge_share']), f"{reranked['judged']}/{reranked['candidates']}"]
    else:
        cells += ["skipped", "", ""]
    return cells + [f"{memory['app_rss_mib']} MiB", f"{memory['database_rss_mib']} MiB", f"{step['app_start_s']} s"]


def _p50_p95(latency: dict[str, Any]) -> str:
    return f"{latency['p50_ms']:.0f} ms / {latency['p95_ms']:.0f} ms ({latency['requests']})"


def _share(value: float | None) -> str:
    return "" if value is None else f"{value:.0%}"
