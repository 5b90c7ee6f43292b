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
from typing import Any, Callable

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
# The settings of the deadline / breaker / fallback wrapper (app/rerank/guarded.py) every reranker takes.
_GUARD_SETTINGS = ("deadline_s", "budget_s", "breaker_threshold", "breaker_cooldown_s")
# What each shared_* function built last, with the settings it was built from.
_shared: dict[str, tuple[tuple, Any]] = {}


def _shared_for(kind: str, key: tuple, build: Callable[[], Any]) -> Any:
    """The process-wide object of `kind`, rebuilt only when its settings (`key`) change."""
    with _lock:
        if kind not in _shared or _shared[kind][0] != key:
            _shared[kind] = (key, build())
        return _shared[kind][1]


def _settings(config: Config, *names: str, **renamed: str) -> dict[str, Any]:
    """Keyword arguments read from the `reranker_<name>` settings (`argument="<name>"` where they differ)."""
    fields = {**{name: name for name in names}, **renamed}
    return {argument: getattr(config, f"reranker_{name}") for argument, name in fields.items()}


def _judge_settings(config: Config) -> dict[str, Any]:
    """The RERANKER_* settings a judge is made from, by LLMJudge's argument names."""
    return _settings(config, "model", "base_url", "api_key", "score_mode", "max_parallel", "timeout_s",
                     "cache_size", "max_tokens", "instructions")


def build_judge(config: Config) -> LLMJudge:
    """A new judge on the RERANKER_* settings (no network I/O)."""
    return LLMJudge(**_judge_settings(config))


def shared_judge(config: Config) -> LLMJudge:
    """The process-wide judge for these settings."""
    return _shared_for("judge", tuple(_judge_settings(config).values()), lambda: build_judge(config))


def shared_breaker(config: Config) -> CircuitBreaker:
    """The process-wide circuit breaker of the configured reranking model (see the module docstring)."""
    if config.reranker_provider == "rerank_api":
        return shared_rerank_api(config).breaker
    threshold, cooldown_s = config.reranker_breaker_threshold, config.reranker_breaker_cooldown_s
    return _shared_for("breaker", (*_judge_settings(config).values(), threshold, cooldown_s),
                       lambda: CircuitBreaker(threshold, cooldown_s))


def _rerank_api_settings(config: Config) -> tuple[dict[str, Any], dict[str, Any]]:
    """The RERANKER_* settings of the rerank_api provider: (client's, reranker's) by argument name."""
    client = _settings(config, "base_url", "model", "api_key", "timeout_s", "max_parallel",
                       style="api_style", max_documents="api_max_documents")
    return client, _settings(config, "cache_size", "max_document_chars", *_GUARD_SETTINGS)


def build_rerank_api(config: Config) -> RerankApiReranker:
    """A new rerank_api cross encoder on the RERANKER_* settings (no network I/O)."""
    client, reranker = _rerank_api_settings(config)
    return RerankApiReranker(RerankApiClient(**client), **reranker)


def shared_rerank_api(config: Config) -> RerankApiReranker:
    """The process-wide rerank_api cross encoder for these settings."""
    client, reranker = _rerank_api_settings(config)
    return _shared_for("rerank_api", (*client.values(), *reranker.values()), lambda: build_rerank_api(config))


def check_provider(provider: str) -> str:
    """`provider` if it is a RERANKER_PROVIDER we can build, else ValueError naming the allowed ones."""
    if provider not in RERANKER_PROVIDERS:
        raise ValueError(f"Unknown RERANKER_PROVIDER={provider}; allowed: {RERANKER_PROVIDERS}")
    return provider


def build_reranker(config: Config, *, judge: LLMJudge | None = None, embedder: Any = None) -> CrossEncoderClient:
    """The cross encoder for RERANKER_PROVIDER: the passthrough, the shared rerank_api client, or the
    LLM judge running RERANKER_STRATEGY with its settings (mmr needs the embedder). No network I/O."""
    provider = check_provider(config.reranker_provider)
    if provider == "none":
        return PassthroughReranker()
    if provider == "rerank_api":
        return shared_rerank_api(config)
    reranker = OllamaReranker(judge or shared_judge(config), strategy=strategy_from_config(config, embedder=embedder),
                              **_settings(config, "context_tokens", *_GUARD_SETTINGS))
    if judge is None:  # on the shared judge, the model's breaker is shared too (/api/rerank reads it)
        reranker.breaker = shared_breaker(config)
    return reranker
