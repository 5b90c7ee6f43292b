"""GET /health: is the app up, what is it wired to, and what has the reranker been doing."""

from __future__ import annotations

from flask import Blueprint

from app.api.validation import app_config
from app.graph.runtime import current_runtime, last_start_error
bp = Blueprint("health", __name__)


@bp.get("/health")
def health():
    config = app_config()
    body = {
        "status": "ok",
        "graph_backend": config.graph_backend,
        "graph_embedded": config.graph_backend == "falkordb" and not config.falkordb_url,
        "embedder": config.embedding_provider,
        "reranker": {
            "provider": config.reranker_provider,
            "model": config.reranker_model if config.reranker_provider != "none" else None,
            # RERANKER_STRATEGY steers the LLM judge only; a rerank_api model scores each passage itself.
            "strategy": config.reranker_strategy if config.reranker_provider == "ollama" else None,
        },
        "graph_runtime": "not started",
    }
    runtime = current_runtime()
    start_error = last_start_error()  # set only while no runtime runs
    if start_error is not None:
        body["graph_runtime"] = "unavailable"
        body["graph_error"] = start_error
    if runtime is not None:
        body["graph_runtime"] = "ready"
        stats = getattr(runtime.reranker, "stats", None)
        if callable(stats):
            body["reranker"]["stats"] = stats()
    return body
