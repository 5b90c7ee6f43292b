"""The one place that turns `Config` into a judge and a cross-encoder client.

The app (`_build_reranker` inside `_get_graphiti()`), /api/rerank, the benchmark, the demo and the
load command all build through here, so a RERANKER_* setting means the same thing everywhere.

The judge owns the bound on concurrent model requests, the score cache and the counters; two
judges on the same model server would each allow RERANKER_MAX_PARALLEL requests. So the graph
reranker and /api/rerank share one: `shared_judge(config)`. It is rebuilt only when the RERANKER_*
settings it is made from change (tests switch settings; production builds it once). The benchmark
asks for a private judge per strategy (`build_reranker(config, judge=build_judge(config))`) so one
strategy's cache and counters never leak into another's.

RERANKER_PROVIDER=rerank_api (a dedicated reranker behind POST {base}/rerank) is built the same way:
one process-wide `RerankApiReranker` per settings (`shared_rerank_api`), which graph search and
/api/rerank share, so its request bound, cache, counters and breaker cover both.

The circuit breaker belongs to the model, not to one caller: `shared_breaker(config)` is the one
graph search's reranker uses (the shared judge's, or the shared rerank_api client's), and /api/rerank
consults and feeds the same one, so a model that keeps failing is skipped by both.
"""

from __future__ import annotations

import threading
from typing import Any

from graphiti_core.cross_encoder.client import CrossEncoderClient

from app.config import RERANKER_PROVIDERS, Config
from app.rerank.circuit_breaker import CircuitBreaker
from app.rerank.judge import LLMJudge
from app.rerank.ollama_reranker import OllamaReranker
from app.rerank.passthrough import PassthroughReranker
from app.rerank.rerank_api import RerankApiReranker
from app.rerank.rerank_api_client import RerankApiClient
from app.rerank.strategies.registry import strategy_from_config

_lock = threading.Lock()
_shared: tuple[tuple, LLMJudge] | None = None
_shared_api: tuple[tuple, RerankApiReranker] | None = None
_shared_breaker: tuple[tuple, CircuitBreaker] | None = None


def _judge_settings(config: Config) -> dict[str, Any]:
    """The RERANKER_* settings a judge is made from, by LLMJudge's argument names."""
    return dict(
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


def build_judge(config: Config) -> LLMJudge:
    """A new judge on the RERANKER_* settings (no network I/O)."""
    return LLMJudge(**_judge_settings(config))


def shared_judge(config: Config) -> LLMJudge:
    """The process-wide judge for these settings."""
    global _shared
    key = tuple(_judge_settings(config).values())
    with _lock:
        if _shared is None or _shared[0] != key:
            _shared = (key, build_judge(config))
        return _shared[1]


def shared_breaker(config: Config) -> CircuitBreaker:
    """The process-wide circuit breaker of the configured reranking model (see the module docstring)."""
    global _shared_breaker
    if config.reranker_provider == "rerank_api":
        return shared_rerank_api(config).breaker
    key = (*_judge_settings(config).values(), config.reranker_breaker_threshold, config.reranker_breaker_cooldown_s)
    with _lock:
        if _shared_breaker is None or _shared_breaker[0] != key:
            _shared_breaker = (key, CircuitBreaker(config.reranker_breaker_threshold,
                                                   config.reranker_breaker_cooldown_s))
        return _shared_breaker[1]


def _rerank_api_settings(config: Config) -> tuple[dict[str, Any], dict[str, Any]]:
    """The RERANKER_* settings of the rerank_api provider: (client's, reranker's) by argument name."""
    client = dict(
        base_url=config.reranker_base_url,
        model=config.reranker_model,
        api_key=config.reranker_api_key,
        style=config.reranker_api_style,
        timeout_s=config.reranker_timeout_s,
        max_parallel=config.reranker_max_parallel,
        max_documents=config.reranker_api_max_documents,
    )
    reranker = dict(
        cache_size=config.reranker_cache_size,
        max_document_chars=config.reranker_max_document_chars,
        deadline_s=config.reranker_deadline_s,
        breaker_threshold=config.reranker_breaker_threshold,
        breaker_cooldown_s=config.reranker_breaker_cooldown_s,
    )
    return client, reranker


def build_rerank_api(config: Config) -> RerankApiReranker:
    """A new rerank_api cross encoder on the RERANKER_* settings (no network I/O)."""
    client, reranker = _rerank_api_settings(config)
    return RerankApiReranker(RerankApiClient(**client), **reranker)


def shared_rerank_api(config: Config) -> RerankApiReranker:
    """The process-wide rerank_api cross encoder for these settings."""
    global _shared_api
    client, reranker = _rerank_api_settings(config)
    key = (*client.values(), *reranker.values())
    with _lock:
        if _shared_api is None or _shared_api[0] != key:
            _shared_api = (key, build_rerank_api(config))
        return _shared_api[1]


def build_reranker(config: Config, *, judge: LLMJudge | None = None, embedder: Any = None) -> CrossEncoderClient:
    """The cross encoder for RERANKER_PROVIDER: the passthrough, the shared rerank_api client, or the
    LLM judge running RERANKER_STRATEGY with its settings (mmr needs the embedder). No network I/O."""
    provider = config.reranker_provider
    if provider not in RERANKER_PROVIDERS:
        raise ValueError(f"Unknown RERANKER_PROVIDER={provider}; allowed: {RERANKER_PROVIDERS}")
    if provider == "none":
        return PassthroughReranker()
    if provider == "rerank_api":
        return shared_rerank_api(config)
    reranker = OllamaReranker(
        judge or shared_judge(config),
        strategy=strategy_from_config(config, embedder=embedder),
        deadline_s=config.reranker_deadline_s,
        budget_s=config.reranker_budget_s,
        context_tokens=config.reranker_context_tokens,
        breaker_threshold=config.reranker_breaker_threshold,
        breaker_cooldown_s=config.reranker_breaker_cooldown_s,
    )
    if judge is None:  # on the shared judge, the model's breaker is shared too (/api/rerank reads it)
        reranker.breaker = shared_breaker(config)
    return reranker
