"""Search latency while a large import runs into the same graph (`python -m bench import-search`).

The API is served the production way (bench/load_run.py's ServedApp: gunicorn, one worker process, the
embedded FalkorDB, the local embedder, reranker off) over a private DATA_DIR. A base graph is imported
first and searched for a baseline; then one client sends a large import (new entities and facts)
and, from a few seconds later until the import answers, another searches the same graph every
`interval_s` (or as soon as the previous search answered, when it took longer).

A stalled search would hide as one slow sample (the client sends nothing while it waits), so the
percentiles are also given corrected for that: a search that took L seconds also counts the searches
that were due meanwhile, with the time each would have waited (L - interval, L - 2 x interval, ...).
Sending them for real instead (open loop) measures the machine's overload rather than the app: on a
busy 2-core machine searches then queue behind each other. Reported: search p50/p95/max before and
during the import (raw and corrected), how long the import took and what it answered.
"""

from __future__ import annotations

import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.load_run import LoadResult, ServedApp, request_json, synthetic_facts, synthetic_queries

GRAPH_ID = "import_search"


@dataclass
class ImportSearchOptions:
    facts: int = 3000
    base_facts: int = 300
    interval_s: float = 0.5  # a search is sent this often during the import
    limit: int = 10
    baseline_searches: int = 20
    search_delay_s: float = 3.0  # searches start this long after the import was sent


def _search_once(port: int, query: str, limit: int) -> tuple[float, str | None]:
    started = time.perf_counter()
    try:
        status, body = request_json(port, "POST", f"/api/graph/{GRAPH_ID}/search",
                                    {"query": query, "limit": limit}, timeout=600)
        error = None if status == 200 and not body.get("error") else f"HTTP {status}: {body}"
    except OSError as exc:
        error = f"{type(exc).__name__}: {exc}"
    return time.perf_counter() - started, error


def _paced_searches(port: int, queries: list[str], options: "ImportSearchOptions", done: threading.Event,
                    raw: LoadResult, corrected: LoadResult) -> None:
    turn = 0
    while not done.is_set():
        latency, error = _search_once(port, queries[turn % len(queries)], options.limit)
        turn += 1
        raw.record(latency, error)
        corrected.record(latency, error)
        missed = latency - options.interval_s
        while missed > 0:  # the searches that were due while this one waited
            corrected.record(missed, None)
            missed -= options.interval_s
        done.wait(max(0.0, options.interval_s - latency))


def _baseline(port: int, queries: list[str], options: ImportSearchOptions) -> LoadResult:
    result = LoadResult()
    started = time.monotonic()
    for query in queries[:options.baseline_searches]:
        began = time.perf_counter()
        status, body = request_json(port, "POST", f"/api/graph/{GRAPH_ID}/search", {"query": query, "limit": options.limit})
        result.record(time.perf_counter() - began, None if status == 200 else f"HTTP {status}: {body}")
    result.elapsed_s = time.monotonic() - started
    return result


def _during_import(port: int, queries: list[str], options: ImportSearchOptions) -> tuple[LoadResult, LoadResult, dict]:
    new_facts = synthetic_facts(options.base_facts + options.facts)[options.base_facts:]
    answer: dict[str, Any] = {}
    done = threading.Event()

    def run_import():
        began = time.monotonic()
        answer["status"], answer["body"] = request_json(port, "POST", f"/api/graph/{GRAPH_ID}/facts",
                                                        {"facts": new_facts}, timeout=1800)
        answer["seconds"] = round(time.monotonic() - began, 1)
        done.set()

    importer = threading.Thread(target=run_import, daemon=True)
    importer.start()
    raw, corrected = LoadResult(), LoadResult()
    if done.wait(options.search_delay_s):
        return raw, corrected, answer  # the import ended before the searches began: nothing measured
    started = time.monotonic()
    _paced_searches(port, queries, options, done, raw, corrected)
    raw.elapsed_s = corrected.elapsed_s = time.monotonic() - started
    importer.join()
    return raw, corrected, answer


def run(options: ImportSearchOptions, log_dir: Path | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="import-search-") as temp:
        data_dir = Path(temp) / "data"
        app = ServedApp(data_dir, (log_dir or Path(temp)) / "serve-import-search.log", 16,
                        {"RERANKER_PROVIDER": "none"}).start()
        try:
            port = app.port
            assert request_json(port, "POST", "/api/graph", {"graph_id": GRAPH_ID})[0] == 201
            status, body = request_json(port, "POST", f"/api/graph/{GRAPH_ID}/facts",
                                        {"facts": synthetic_facts(options.base_facts)}, timeout=1800)
            if status != 201:
                raise RuntimeError(f"the base import failed: {status} {body}")
            queries = synthetic_queries()
            baseline = _baseline(port, queries, options)
            during, corrected, answer = _during_import(port, queries, options)
        finally:
            app.stop()
    return {"baseline": baseline.summary(), "during_import": during.summary(),
            "during_import_corrected": corrected.summary(), "import": answer, "options": options.__dict__}
