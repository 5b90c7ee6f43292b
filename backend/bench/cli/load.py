"""`python -m bench load` (also `make load`): concurrent clients against POST /api/graph/<id>/search.

Each phase serves the API the production way, `flask --app app serve` (gunicorn: one worker process, a
thread pool, the one graph singleton and its event-loop thread), in a subprocess on loopback with a
private DATA_DIR holding a synthetic graph, then runs N keep-alive clients for a bounded time:

- `off`: RERANKER_PROVIDER=none (first stage only);
- `on`:  the pointwise LLM reranker against a stand-in judge (bench/latency_judge.py) that
         answers each request after 50-150 ms, with the score cache off so every search asks it.

Reported per phase: throughput, p50/p95/p99 latency, errors (must be 0), fallbacks, the peak number
of model requests in flight as the judge saw them (must never exceed RERANKER_MAX_PARALLEL: the bound
is process-wide, not per request) and the server's memory before and after. Exits 1 when a must fails.

    cd backend && ../.venv/bin/python -m bench load --clients 32 --duration 20
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import click

from bench.cli import bench_group
from bench.latency_judge import LatencyJudge
from bench.load_run import ServedApp, request_json, run_clients, synthetic_facts, synthetic_queries

GRAPH_ID = "load_graph"


def _prepare_graph(app: ServedApp, n_facts: int) -> None:
    status, body = request_json(app.port, "GET", f"/api/graph/{GRAPH_ID}/stats")
    if status == 200 and body["edges"] >= n_facts:
        return
    assert request_json(app.port, "POST", "/api/graph", {"graph_id": GRAPH_ID})[0] in (201, 409)
    status, body = request_json(app.port, "POST", f"/api/graph/{GRAPH_ID}/facts", {"facts": synthetic_facts(n_facts)})
    if status != 201:
        raise click.ClickException(f"could not import the synthetic facts: {status} {body}")


def _phase(name: str, data_dir: Path, options: dict[str, Any], judge: LatencyJudge | None) -> dict[str, Any]:
    env = {"RERANKER_PROVIDER": "none"}
    if judge is not None:
        env = {"RERANKER_PROVIDER": "ollama", "RERANKER_BASE_URL": judge.base_url, "RERANKER_MODEL": "load-judge",
               "RERANKER_API_KEY": "unused", "RERANKER_SCORE_MODE": "logprobs", "RERANKER_STRATEGY": "pointwise",
               "RERANKER_MAX_PARALLEL": str(options["max_parallel"]), "RERANKER_CACHE_SIZE": "0",
               "RERANKER_TIMEOUT_S": "30", "RERANKER_DEADLINE_S": "300", "SEARCH_TIMEOUT_S": "600"}
    app = ServedApp(data_dir, data_dir.parent / f"serve-{name}.log", options["server_threads"], env).start()
    try:
        _prepare_graph(app, options["facts"])
        queries = synthetic_queries()
        for query in queries[:3]:  # warm-up: first-request costs are not what is measured
            request_json(app.port, "POST", f"/api/graph/{GRAPH_ID}/search", {"query": query, "limit": options["limit"]})
        judge_requests_before = judge.requests if judge else 0
        memory_before = app.memory()
        result = run_clients(app.port, GRAPH_ID, queries, options["clients"], options["duration"], options["limit"])
        memory_after = app.memory()
        health = request_json(app.port, "GET", "/health")[1]
    finally:
        app.stop()
    stats = health.get("reranker", {}).get("stats", {})
    return {
        "phase": name, **result.summary(),
        "fallbacks": stats.get("fallbacks", 0), "reranker_errors": stats.get("errors", {}),
        "model_requests": (judge.requests - judge_requests_before) if judge else 0,
        "peak_model_requests_seen_by_judge": judge.peak_in_flight if judge else 0,
        "peak_in_flight_reported_by_app": stats.get("peak_in_flight", 0),
        "max_parallel": options["max_parallel"] if judge else None,
        "memory_before": memory_before, "memory_after": memory_after,
    }


def _print(report: dict[str, Any]) -> None:
    click.echo(f"\n== reranker {report['phase']}: {report['requests']} searches in {report['elapsed_s']} s")
    click.echo(f"   throughput {report['throughput_rps']} req/s; latency p50 {report['p50_ms']} ms, "
               f"p95 {report['p95_ms']} ms, p99 {report['p99_ms']} ms, max {report['max_ms']} ms")
    click.echo(f"   errors {report['errors']} {report['first_errors'] or ''}; reranker fallbacks {report['fallbacks']}")
    if report["max_parallel"] is not None:
        click.echo(f"   model requests {report['model_requests']}; peak in flight {report['peak_model_requests_seen_by_judge']}"
                   f" seen by the judge, {report['peak_in_flight_reported_by_app']} reported by the app "
                   f"(RERANKER_MAX_PARALLEL={report['max_parallel']})")
    before, after = report["memory_before"], report["memory_after"]
    click.echo(f"   RSS app {before['app_rss_mib']} -> {after['app_rss_mib']} MiB, "
               f"{after['database']} {before['database_rss_mib']} -> {after['database_rss_mib']} MiB")


def _failures(report: dict[str, Any]) -> list[str]:
    problems = []
    if report["errors"]:
        problems.append(f"{report['phase']}: {report['errors']} failed searches")
    if report["max_parallel"] is not None and report["peak_model_requests_seen_by_judge"] > report["max_parallel"]:
        problems.append(f"{report['phase']}: {report['peak_model_requests_seen_by_judge']} model requests at once "
                        f"> RERANKER_MAX_PARALLEL={report['max_parallel']}")
    return problems


@bench_group.command("load")
@click.option("--clients", default=32, show_default=True, help="concurrent clients")
@click.option("--duration", default=20.0, show_default=True, help="seconds of load per phase")
@click.option("--phases", type=click.Choice(["off", "on", "both"]), default="both", show_default=True,
              help="reranker off, on, or both")
@click.option("--limit", default=10, show_default=True, help="results per search (x2 candidates reach the judge)")
@click.option("--max-parallel", default=4, show_default=True, help="RERANKER_MAX_PARALLEL for the 'on' phase")
@click.option("--judge-ms", default="50-150", show_default=True, help="judge latency range per request, ms")
@click.option("--facts", default=300, show_default=True, help="synthetic facts in the graph")
@click.option("--server-threads", default=16, show_default=True, help="the server's threads (API_THREADS)")
@click.option("--json-out", type=click.Path(dir_okay=False), help="also write the figures as JSON")
def load_command(**options: Any) -> None:
    """Load-test graph search on the served API with the reranker off and on; fails on errors or a broken bound."""
    low, high = (float(x) for x in options["judge_ms"].split("-"))
    phases = ["off", "on"] if options["phases"] == "both" else [options["phases"]]
    reports = []
    with tempfile.TemporaryDirectory(prefix="mirofish-load-") as workdir:
        data_dir = Path(workdir) / "data"
        for phase in phases:
            click.echo(f"Phase reranker {phase}: {options['clients']} clients for {options['duration']:g} s ...")
            if phase == "on":
                with LatencyJudge(low, high) as judge:
                    reports.append(_phase(phase, data_dir, options, judge))
            else:
                reports.append(_phase(phase, data_dir, options, None))
            _print(reports[-1])
    if options["json_out"]:
        Path(options["json_out"]).write_text(json.dumps(reports, indent=2))
    problems = [problem for report in reports for problem in _failures(report)]
    if problems:
        raise click.ClickException("; ".join(problems))

