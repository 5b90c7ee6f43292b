"""The process-wide judge and embedder that reranking uses, so there is one of each per process.

The judge owns the bound on concurrent model requests, the score cache and the counters; two judges
on the same model server would each allow RERANKER_MAX_PARALLEL requests. So the graph reranker and
the /api/rerank endpoint share one: `shared_judge(config)` builds it on first use, and the reranker
factory hands over the pointwise OllamaReranker's own judge with `adopt_judge`. A judge is reused
only for the same RERANKER_* settings (tests switch settings; production builds it once).
"""

from __future__ import annotations

import threading
from typing import Any

from app.config import Config
from app.rerank.judge import LLMJudge

_lock = threading.Lock()
_judge: tuple[tuple, LLMJudge] | None = None
_embedder: tuple[tuple, Any] | None = None


def judge_settings(config: Config) -> tuple:
    return (
        config.reranker_model, config.reranker_base_url, config.reranker_api_key, config.reranker_score_mode,
        config.reranker_max_parallel, config.reranker_timeout_s, config.reranker_cache_size,
        config.reranker_max_tokens, config.reranker_instructions,
    )


def build_judge(config: Config) -> LLMJudge:
    """A judge on the RERANKER_* settings (no network I/O)."""
    return LLMJudge(
        model=config.reranker_model,
        base_url=config.reranker_base_url,
        api_key=config.reranker_api_key,
        score_mode=config.reranker_score_mode,
        max_parallel=config.reranker_max_parallel,
        timeout_s=config.reranker_timeout_s,
        cache_size=config.reranker_cache_size,
        max_tokens=config.reranker_max_tokens,
        instructions=config.reranker_instructions,
    )


def shared_judge(config: Config) -> LLMJudge:
    global _judge
    key = judge_settings(config)
    with _lock:
        if _judge is None or _judge[0] != key:
            _judge = (key, build_judge(config))
        return _judge[1]


def adopt_judge(config: Config, judge: LLMJudge) -> None:
    """Make `judge` (built elsewhere on these settings) the shared one from now on."""
    global _judge
    with _lock:
        _judge = (judge_settings(config), judge)


def shared_embedder(config: Config) -> Any:
    """The graph runtime's embedder when it is running, else one built once from EMBEDDING_* settings."""
    global _embedder
    from app.services import graphiti_adapter

    if graphiti_adapter.graphiti_is_built():
        runtime = graphiti_adapter._get_graphiti()
        if runtime.config.embedding_provider == config.embedding_provider:
            return runtime.graphiti.embedder
    key = (config.embedding_provider, config.embedding_base_url, config.embedding_model, config.embedding_dim)
    with _lock:
        if _embedder is None or _embedder[0] != key:
            _embedder = (key, graphiti_adapter._build_llm_and_embedder(config)[1])
        return _embedder[1]
