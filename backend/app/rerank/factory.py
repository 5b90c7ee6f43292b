"""The process-wide pieces a reranker is built from: the judge, the rerank_api client, the breaker.

Which of them a RERANKER_PROVIDER uses is app/rerank/providers.py, the one place that turns `Config`
into a cross encoder; the app (`_build_reranker` inside `_get_graphiti()`), /api/rerank, the
benchmark, the demo and the load command all build through it, so a RERANKER_* setting means the same
thing everywhere.

The judge owns the bound on concurrent model requests, the score cache and the counters; two
judges on the same model server would each allow RERANKER_MAX_PARALLEL requests. So the graph
reranker and /api/rerank share one: `shared_judge(config)`. It is rebuilt only when the RERANKER_*
settings it is made from change (tests switch settings; production builds it once). The benchmark
asks for a private judge per strategy (`build_reranker(config, judge=build_judge(config))`) so one
strategy's cache and counters never leak into another's.

RERANKER_PROVIDER=rerank_api (a dedicated reranker behind POST {base}/rerank) is built the same way:
one process-wide `RerankApiReranker` per settings (`shared_rerank_api`), which graph search and
/api/rerank share, so its request bound, cache, counters and breaker cover both.

The circuit breaker belongs to the model, not to one caller: the one graph search's reranker uses
(`judge_breaker`, or the shared rerank_api client's) is the one /api/rerank consults and feeds
(`providers.shared_breaker`), so a model that keeps failing is skipped by both.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from app.config import Config
from app.rerank.circuit_breaker import CircuitBreaker
from app.rerank.judge import LLMJudge
from app.rerank.rerank_api import RerankApiReranker
from app.rerank.rerank_api_client import RerankApiClient

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


def guard_settings(config: Config) -> dict[str, Any]:
    """The deadline / budget / breaker settings every reranker's wrapper (app/rerank/guarded.py) takes."""
    return _settings(config, *_GUARD_SETTINGS)


def judge_breaker(config: Config) -> CircuitBreaker:
    """The process-wide circuit breaker of the judge's model (see the module docstring)."""
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
