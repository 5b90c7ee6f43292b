"""The health checks. GET /health: is the app up, what is it wired to, and what has the reranker been
doing. GET /health/live: the process answers (nothing else is asked). GET /health/ready: whether this
process can serve now, for docker-compose and a load balancer (see `ready`).

Once the graph runtime runs, every health check asks its database (a PING, or Neo4j's connectivity
check, within HEALTH_PROBE_S) and restarts a dead embedded FalkorDB as any request would; a database
that cannot be used answers 503 `graph_unavailable` with Retry-After, beside the usual fields. After
a failed start it tries the start again once the failure is older than RETRY_AFTER_S, so a health
check that gates traffic does not wait forever for a graph request to retry it. Before the first
graph request nothing is started: "graph_runtime": "not started".
"""

from __future__ import annotations

from flask import Blueprint

from app.api.errors import graph_unavailable, not_ready
from app.api.validation import adapter, app_config
from app.graph.runtime import check_database, current_runtime, last_start_error
from app.graph.unavailable import RETRY_AFTER_S, GraphUnavailableError
from graphiti_llm_rerank import provider_for

bp = Blueprint("health", __name__)


@bp.get("/health")
def health():
    config = app_config()
    provider = provider_for(config)
    body = {
        "status": "ok",
        "graph_backend": config.graph_backend,
        "graph_embedded": config.graph_backend == "falkordb" and not config.falkordb_url,
        "embedder": config.embedding_provider,
        "reranker": {
            "provider": config.reranker_provider,
            "model": config.reranker_model if provider.judges else None,
            # RERANKER_STRATEGY steers the LLM judge only; a rerank_api model scores each passage itself.
            "strategy": config.reranker_strategy if provider.runs_strategy else None,
        },
        "graph_runtime": "not started",
    }
    try:
        runtime = current_runtime()
        if runtime is None and last_start_error() is not None:  # set only while no runtime runs
            runtime = adapter().runtime  # the failed start again, from memory while it is recent
        if runtime is not None:
            check_database(runtime)
    except GraphUnavailableError as error:
        body.update(status="unavailable", graph_runtime="unavailable", graph_error=str(error))
        return graph_unavailable(error, **body)
    if runtime is not None:
        body["graph_runtime"] = "ready"
        stats = getattr(runtime.reranker, "stats", None)
        if callable(stats):
            body["reranker"]["stats"] = stats()
    return body


@bp.get("/health/live")
def live():
    """Liveness: the process answers requests. No database or model server is asked, so a database
    outage never gets a healthy process restarted."""
    return {"status": "alive"}


@bp.get("/health/ready")
def ready():
    """Readiness: 200 only when the graph database answers now (asked as /health asks it, within
    HEALTH_PROBE_S), so does the task broker, and the reranker can judge: its model's warm-up has answered and its circuit
    breaker is not skipping the model. Otherwise 503 naming why, with Retry-After: `graph_unavailable`
    for the database, `reranker_not_ready` for the model (loading, its warm-up failed, the breaker
    open). The start step (`flask serve`, app.wsgi) has built the runtime; if none runs, this starts
    it, as any graph request would."""
    body = {"status": "ready", "database": "ready", "reranker": "ready"}
    try:
        runtime = adapter().runtime
        check_database(runtime)
    except GraphUnavailableError as error:
        body.update(status="not_ready", database=str(error), reranker="unknown")
        return graph_unavailable(error, **body)
    queue_down = runtime.tasks.queue.unavailable()
    if queue_down is not None:  # a broker apart from the database (QUEUE_URL) can fail on its own
        body.update(status="not_ready", queue=queue_down, reranker="unknown")
        return not_ready("queue_unavailable", queue_down, RETRY_AFTER_S, **body)
    body["queue"] = "ready"
    if not runtime.reranking_enabled:
        body["reranker"] = "none"  # RERANKER_PROVIDER=none: no model to wait for
        return body
    why = getattr(runtime.reranker, "not_ready", lambda: None)()
    if why is not None:
        body.update(status="not_ready", reranker=why)
        return not_ready("reranker_not_ready", why, RETRY_AFTER_S, **body)
    return body
