"""Prometheus metrics: every metric the app exports, defined once, and how `GET /metrics` reads them.

    observe_request(method, route, status, seconds)    # app/api/metrics.py, once per HTTP request
    observe_rank_call(outcome, seconds, judged)        # graphiti_llm_rerank/ollama_reranker.py, once per rank call
    score_cache_lookup(hit, count)                     # the judge's and the rerank_api score caches
    breaker_state(state)                               # the process-wide circuit breakers, on each change
    JOBS_FINISHED.labels(kind=..., outcome=...).inc()  # the job queue: a job ended
    register_queue_depth(lambda: {"default": 3})       # the job queue: depths read at each scrape

One server process (`make serve`): the values live in the process, and /metrics answers them with
the client library's process and Python metrics. Several processes on one server (gunicorn workers,
job workers): PROMETHEUS_MULTIPROC_DIR names a directory they all share, empty when the server
starts; each process writes its values to files there and /metrics, whichever process answers, adds
them up (prometheus_client's multiprocess mode). The library chooses its mode when it is imported, from
the environment; `check_mode` (called by `create_app`) refuses a setting it did not see.

Labels stay bounded: a route is the URL rule (`/api/graph/<graph_id>/search`), never the path; an
unknown method is "other". A leaf module beside app.config: every layer may use it, it uses none.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, multiprocess, values
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)

# HTTP answers range from a millisecond (/health) to SEARCH_TIMEOUT_S (180 s) for a reranked search.
HTTP_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# A rank call: milliseconds from the score cache, seconds to RERANKER_DEADLINE_S (120 s) from a CPU model.
RERANK_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
UNMATCHED_ROUTE = "unmatched"  # a 404 or 405 that matched no URL rule; a rule always starts with "/"
# How a rank call ended: every passage judged as asked; the budget or deadline ended it with some
# scores kept; or it fell back to the incoming order (model failure, breaker open, model not ready).
RANK_OUTCOMES = ("judged", "cut_short", "fell_back")
BREAKER_STATES = ("closed", "half_open", "open")

HTTP_REQUEST_SECONDS = Histogram(
    "mirofish_http_request_duration_seconds",
    "Seconds to answer an HTTP request, by method, route (the URL rule, not the path) and status",
    ["method", "route", "status"], buckets=HTTP_BUCKETS_S)
RERANK_SECONDS = Histogram(
    "mirofish_rerank_duration_seconds",
    "Seconds of one guarded rank call (graph search's reranking), by how it ended",
    ["outcome"], buckets=RERANK_BUCKETS_S)
PASSAGES_JUDGED = Counter(
    "mirofish_rerank_passages_judged",
    "Passages the reranker judged in rank calls (by the model or from the score cache)")
SCORE_CACHE_LOOKUPS = Counter(
    "mirofish_rerank_score_cache_lookups",
    "Score cache lookups of the reranker, by result: hit (no model request) or miss", ["result"])
# One breaker per process: across processes the highest value, so state="open" is 1 while any live
# process skips the model (live gauges of a process that ended are dropped by `mark_process_dead`).
BREAKER_STATE = Gauge(
    "mirofish_rerank_breaker_state",
    "The reranker's circuit breaker: 1 for the state it is in, 0 for the others",
    ["state"], multiprocess_mode="livemax")
JOBS_FINISHED = Counter(
    "mirofish_jobs_finished",
    "Background jobs that ended, by kind and outcome", ["kind", "outcome"])

# Series that exist from the start at 0, so a rate() over them never starts from nothing.
for _outcome in RANK_OUTCOMES:
    RERANK_SECONDS.labels(outcome=_outcome)
for _result in ("hit", "miss"):
    SCORE_CACHE_LOOKUPS.labels(result=_result)


def observe_request(method: str, route: str | None, status: int, seconds: float) -> None:
    """One answered HTTP request; `route` is its URL rule, None when it matched none."""
    HTTP_REQUEST_SECONDS.labels(method=method if method in METHODS else "other", route=route or UNMATCHED_ROUTE,
                                status=str(int(status))).observe(seconds)


def observe_rank_call(outcome: str, seconds: float, judged: int) -> None:
    """One rank call of the reranker's guard: how it ended (RANK_OUTCOMES), its time, passages judged."""
    if outcome not in RANK_OUTCOMES:
        raise ValueError(f"unknown rank outcome {outcome!r}; allowed: {RANK_OUTCOMES}")
    RERANK_SECONDS.labels(outcome=outcome).observe(seconds)
    if judged:
        PASSAGES_JUDGED.inc(judged)


def score_cache_lookup(hit: bool, count: int = 1) -> None:
    """`count` lookups of a score cache that found a score (hit) or sent the passage to the model (miss)."""
    if count:
        SCORE_CACHE_LOOKUPS.labels(result="hit" if hit else "miss").inc(count)


def breaker_state(state: str) -> None:
    """The reranker's circuit breaker is now in `state` (BREAKER_STATES)."""
    if state not in BREAKER_STATES:
        raise ValueError(f"unknown breaker state {state!r}; allowed: {BREAKER_STATES}")
    for name in BREAKER_STATES:
        BREAKER_STATE.labels(state=name).set(1 if name == state else 0)


def job_finished(kind: str, outcome: str) -> None:
    """A background job of `kind` ended with `outcome` (e.g. done, failed)."""
    JOBS_FINISHED.labels(kind=kind, outcome=outcome).inc()


QueueDepths = Callable[[], Mapping[str, int]]


class QueueDepthCollector(Collector):
    """`mirofish_queue_depth{queue}`: read from the registered callables when /metrics is scraped, so
    any process that answers /metrics reports the same depths (a queue's length lives in its broker,
    not in one process). A callable that fails is logged and left out; the rest still answer."""

    NAME = "mirofish_queue_depth"
    HELP = "Jobs waiting in each queue, read when /metrics is scraped"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources: list[QueueDepths] = []

    def add(self, depths: QueueDepths) -> Callable[[], None]:
        with self._lock:
            self._sources.append(depths)

        def remove() -> None:
            with self._lock:
                if depths in self._sources:
                    self._sources.remove(depths)

        return remove

    def describe(self) -> list[Metric]:
        return [GaugeMetricFamily(self.NAME, self.HELP, labels=["queue"])]

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            sources = list(self._sources)
        depths: dict[str, float] = {}
        for source in sources:
            try:
                depths.update({str(queue): float(depth) for queue, depth in source().items()})
            except Exception as error:  # a broker that is down must not take /metrics with it
                logger.warning("Queue depth for /metrics not read: %s: %s", type(error).__name__, error)
        family = GaugeMetricFamily(self.NAME, self.HELP, labels=["queue"])
        for queue, depth in sorted(depths.items()):
            family.add_metric([queue], depth)
        yield family


QUEUE_DEPTHS = QueueDepthCollector()
REGISTRY.register(QUEUE_DEPTHS)


def register_queue_depth(depths: QueueDepths) -> Callable[[], None]:
    """Report queue depths on /metrics: `depths()` answers {queue name: jobs waiting}, called at each
    scrape in the process that answers it (so register it where the API runs). Returns a function that
    removes it again."""
    return QUEUE_DEPTHS.add(depths)


def library_multiprocess() -> bool:
    """Whether prometheus_client chose multiprocess mode (PROMETHEUS_MULTIPROC_DIR set when it was imported)."""
    return values.ValueClass is not values.MutexValue


def check_mode(multiproc_dir: Path | None) -> None:
    """Refuse a PROMETHEUS_MULTIPROC_DIR the library did not see when it was imported (or the reverse):
    every process would then count on its own and /metrics would show one worker's share."""
    if bool(multiproc_dir) != library_multiprocess():
        raise RuntimeError(
            "PROMETHEUS_MULTIPROC_DIR must be set (or unset) in the environment the process starts with: "
            f"the settings say {str(multiproc_dir) if multiproc_dir else 'unset'!r}, but prometheus_client was "
            f"imported in {'multiprocess' if library_multiprocess() else 'single-process'} mode")


def exposition(multiproc_dir: Path | None, accept: str | None = None) -> tuple[bytes, str]:
    """(body, content type) of a scrape: this process's registry, or with `multiproc_dir` the sum over
    every process's files there. `accept`: the scraper's Accept header (text format or OpenMetrics)."""
    if multiproc_dir:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(multiproc_dir))
        registry.register(QUEUE_DEPTHS)
    else:
        registry = REGISTRY
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


def clear_multiprocess_files(multiproc_dir: Path | None) -> None:
    """Remove the files of an earlier server's processes (multiprocess mode): a fresh start sums only its
    own processes' values."""
    for path in multiproc_dir.glob("*.db") if multiproc_dir else ():
        path.unlink(missing_ok=True)


def mark_process_dead(pid: int) -> None:
    """Drop the live gauges of an ended process (gunicorn's `child_exit` hook); multiprocess mode only."""
    if library_multiprocess():
        multiprocess.mark_process_dead(pid)  # the library's own PROMETHEUS_MULTIPROC_DIR
