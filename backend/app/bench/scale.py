"""How the cost grows with the graph (`flask --app app bench scale`).

ONE graph is grown through the sizes (e.g. 1k, 10k, 100k facts) by importing synthetic facts in
batches through the real API, served the production way (app/bench/load_run.py's ServedApp: waitress,
the app's own database, the embedded FalkorDB or with GRAPH_BACKEND=neo4j the local Neo4j, the local
embedder) over a private DATA_DIR. At each size:

- import throughput of the step (facts per second of import requests; the graph keeps growing);
- first-stage searches (RERANKER_PROVIDER=none): p50/p95;
- when a judge is given, a few reranked searches: the app is restarted over the same DATA_DIR with the
  LLM reranker pointed at that judge (RERANKER_* through the served app's environment, RERANKER_BUDGET_S
  unset), p50/p95 and the share of the search time spent reranking (the answer's timings_ms);
- the resident memory of the app process and of its database server (from /proc; the column is named
  for the database).

The reranker is a process-wide setting, hence the restart; the restart also tells how long the app
takes to come up over a graph of that size.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.bench.load_run import LoadResult, ServedApp, percentile, request_json, synthetic_facts, synthetic_queries

GRAPH_ID = "scale"
DEFAULT_SIZES = (1000, 10000, 100000)
IMPORT_TIMEOUT_S = 3600
SERVER_THREADS = 8


@dataclass
class ScaleOptions:
    sizes: tuple[int, ...] = DEFAULT_SIZES
    batch_size: int = 1000  # facts per POST .../facts (the API takes at most 5000)
    # Sensors the facts cycle through: a fact then brings one text to embed (its own), not two.
    sensors: int | None = 1000
    searches: int = 20  # first-stage searches per size
    reranked_searches: int = 3  # per size, only with a judge
    limit: int = 10
    judge_base_url: str | None = None
    judge_model: str | None = None

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


def _reranker_off() -> dict[str, str]:
    return {"RERANKER_PROVIDER": "none"}


def _reranker_on(options: ScaleOptions) -> dict[str, str]:
    return {"RERANKER_PROVIDER": "ollama", "RERANKER_BASE_URL": options.judge_base_url,
            "RERANKER_MODEL": options.judge_model}


def _serve(data_dir: Path, log_path: Path, env: dict[str, str]) -> tuple[ServedApp, float]:
    app = ServedApp(data_dir, log_path, SERVER_THREADS, env)
    app.env.pop("RERANKER_BUDGET_S", None)  # a budget would cut the judge short: measure the whole rerank
    began = time.monotonic()
    app.start()
    return app, round(time.monotonic() - began, 1)


def _grow(app: ServedApp, step: _Step, have: int, options: ScaleOptions, echo: Callable[[str], None]) -> None:
    """Import facts have..size in batches; each batch's seconds are kept (the cost as the graph grows)."""
    facts = synthetic_facts(step.size, options.sensors)
    for start in range(have, step.size, options.batch_size):
        batch = facts[start:start + options.batch_size]
        began = time.monotonic()
        status, body = request_json(app.port, "POST", f"/api/graph/{GRAPH_ID}/facts", {"facts": batch},
                                    timeout=IMPORT_TIMEOUT_S)
        seconds = time.monotonic() - began
        if status != 201 or body.get("imported") != len(batch):
            raise RuntimeError(f"importing facts {start}..{start + len(batch)} failed: HTTP {status} {body}")
        step.import_facts += len(batch)
        step.import_s += seconds
        step.batches.append({"facts": len(batch), "seconds": round(seconds, 2), "graph_after": start + len(batch)})
        echo(f"  imported {start + len(batch)}/{step.size} facts ({len(batch) / seconds:.1f} facts/s for this batch)")


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
    queries = synthetic_queries()
    first, _ = _searches(app, [queries[i % len(queries)] for i in range(options.searches)], options.limit)
    return {"size": step.size, "edges": stats["edges"], "nodes": stats["nodes"],
            "import": {"facts": step.import_facts, "seconds": round(step.import_s, 1),
                       "facts_per_s": step.throughput(), "batches": step.batches},
            "first_stage": _latency(first), "memory": app.memory()}


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
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as temp:
        data_dir, logs = Path(temp) / "data", log_dir or Path(temp)
        logs.mkdir(parents=True, exist_ok=True)
        app, _ = _serve(data_dir, logs / "serve-scale.log", _reranker_off())
        try:
            assert request_json(app.port, "POST", "/api/graph", {"graph_id": GRAPH_ID})[0] == 201
            have = 0
            for size in options.sizes:
                echo(f"Growing the graph to {size} facts...")
                step = _Step(size)
                _grow(app, step, have, options, echo)
                have = size
                figures = _measure_size(app, step, options)
                if options.has_judge and options.reranked_searches:
                    app.stop()  # the reranker is process-wide: serve the same data with it on
                    echo(f"  {options.reranked_searches} reranked searches with {options.judge_model}...")
                    figures["reranked"] = _measure_reranked(data_dir, logs, options)
                    app, figures["app_start_s"] = _serve(data_dir, logs / "serve-scale.log", _reranker_off())
                steps.append(figures)
                echo(f"  {describe_step(figures)}")
        finally:
            app.stop()
    return {"steps": steps, "options": {**options.__dict__, "sizes": list(options.sizes)},
            "reranked_skipped": None if options.has_judge else "no judge given (--base-url and --model)"}


def describe_step(figures: dict[str, Any]) -> str:
    first, reranked = figures["first_stage"], figures.get("reranked")
    line = (f"{figures['edges']} facts: import {figures['import']['facts_per_s']} facts/s, first stage p50 "
            f"{first['p50_ms']} ms p95 {first['p95_ms']} ms")
    if reranked:
        line += f", reranked p50 {reranked['p50_ms']} ms p95 {reranked['p95_ms']} ms"
    return line


def markdown_table(report: dict[str, Any]) -> str:
    database = report["steps"][0]["memory"]["database"] if report["steps"] else "database"
    rows = ["| facts | import facts/s | first stage p50 / p95 | reranked p50 / p95 | judge share | judged | "
            f"app RSS | {database} RSS |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for step in report["steps"]:
        first, reranked, memory = step["first_stage"], step.get("reranked"), step["memory"]
        if reranked:
            rerank_cells = (f"{reranked['p50_ms'] / 1000:.1f} s / {reranked['p95_ms'] / 1000:.1f} s "
                            f"({reranked['requests']})", _share(reranked['judge_share']),
                            f"{reranked['judged']}/{reranked['candidates']}")
        else:
            rerank_cells = ("skipped", "", "")
        rows.append(f"| {step['edges']} | {step['import']['facts_per_s']} | {first['p50_ms']:.0f} ms / "
                    f"{first['p95_ms']:.0f} ms ({first['requests']}) | {' | '.join(rerank_cells)} | "
                    f"{memory['app_rss_mib']} MiB | {memory['database_rss_mib']} MiB |")
    return "\n".join(rows)


def _share(value: float | None) -> str:
    return "" if value is None else f"{value:.0%}"
