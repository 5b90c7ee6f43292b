"""RERANKER_PROVIDER by name: what each provider builds and what it can do.

    provider = provider_for(config)        # ValueError naming the allowed values for an unknown one
    reranker = provider.build(config)      # the Graphiti cross encoder (no network I/O)
    provider.judges, provider.runs_strategy, provider.breaker(config)

The names users choose from are `config.PROVIDERS`; this registry maps each to its builder and must
hold exactly those names. Callers ask a provider what
it can do (`judges`: a model orders passages; `runs_strategy`: RERANKER_STRATEGY steers it) instead
of comparing its name, so a new provider is one entry here and its name in config.

Every function here takes a `RerankerConfig` (or an app's settings object with `reranker_<field>`
attributes, read through `RerankerConfig.from_prefixed`). This module is the one place that turns it
into a cross encoder, together with the process-wide pieces rerankers are built from (the judge, the rerank_api client, the breaker): the app
(`_build_reranker` inside `_get_graphiti()`), /api/rerank, the benchmark, the demo and the load
command all build through it, so a RERANKER_* setting means the same thing everywhere.

The judge owns the bound on concurrent model requests, the score cache and the counters; two
judges on the same model server would each allow RERANKER_MAX_PARALLEL requests. So the graph
reranker and /api/rerank share one: `shared_judge(config)`. It is rebuilt only when the RERANKER_*
settings it is made from change (tests switch settings; production builds it once). The benchmark
asks for a private judge per strategy (`build_reranker(config, judge=build_judge(config))`) so one
strategy's cache and counters never leak into another's.

RERANKER_PROVIDER=rerank_api (a dedicated reranker behind POST {base}/rerank) is built the same way:
one process-wide `RerankApiReranker` per settings (`shared_rerank_api`), which graph search and
/api/rerank share, so its request bound, cache, counters and breaker cover both.

An app reaches these through one object, `Reranking.shared(config)`: the provider, its shared judge,
rerank_api client and breaker, the strategy a name means, and the reranker to hand Graphiti.

The circuit breaker belongs to the model, not to one caller: the one graph search's reranker uses
(`judge_breaker`, or the shared rerank_api client's) is the one /api/rerank consults and feeds
(`shared_breaker`), so a model that keeps failing is skipped by both. Its state is the one /metrics
is reported to the app's observer (observer.py); private breakers (the benchmark's) are not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from graphiti_core.cross_encoder.client import CrossEncoderClient

from graphiti_llm_rerank.circuit_breaker import CircuitBreaker
from graphiti_llm_rerank.config import PROVIDERS, RerankerConfig, as_config
from graphiti_llm_rerank.judge import LLMJudge
from graphiti_llm_rerank.observer import breaker_state
from graphiti_llm_rerank.rerank_api import RerankApiReranker
from graphiti_llm_rerank.rerank_api_client import RerankApiClient
from graphiti_llm_rerank.ollama_reranker import OllamaReranker
from graphiti_llm_rerank.passthrough import PassthroughReranker
from graphiti_llm_rerank.strategies.registry import strategy_from_config


_lock = threading.Lock()
# The settings of the deadline / breaker / fallback guard (ollama_reranker.py) every reranker takes.
_GUARD_SETTINGS = ("deadline_s", "budget_s", "breaker_threshold", "breaker_cooldown_s")
# What each shared_* function built last, with the settings it was built from.
_shared: dict[str, tuple[tuple, Any]] = {}


def _shared_for(kind: str, key: tuple, build: Callable[[], Any]) -> Any:
    """The process-wide object of `kind`, rebuilt only when its settings (`key`) change."""
    with _lock:
        if kind not in _shared or _shared[kind][0] != key:
            _shared[kind] = (key, build())
        return _shared[kind][1]


def _settings(config: Any, *names: str, **renamed: str) -> dict[str, Any]:
    """Keyword arguments read from the config's fields (`argument="<field>"` where they differ)."""
    config = as_config(config)
    fields = {**{name: name for name in names}, **renamed}
    return {argument: getattr(config, name) for argument, name in fields.items()}


def _judge_settings(config: Any) -> dict[str, Any]:
    """The RERANKER_* settings a judge is made from, by LLMJudge's argument names."""
    return _settings(config, "model", "base_url", "api_key", "score_mode", "max_parallel", "timeout_s",
                     "cache_size", "max_tokens", "instructions")


def build_judge(config: Any) -> LLMJudge:
    """A new judge on the RERANKER_* settings (no network I/O)."""
    return LLMJudge(**_judge_settings(config))


def shared_judge(config: Any) -> LLMJudge:
    """The process-wide judge for these settings."""
    return _shared_for("judge", tuple(_judge_settings(config).values()), lambda: build_judge(config))


def guard_settings(config: Any) -> dict[str, Any]:
    """The deadline / budget / breaker settings every reranker's guard (ollama_reranker.py) takes."""
    return _settings(config, *_GUARD_SETTINGS)


def judge_breaker(config: Any) -> CircuitBreaker:
    """The process-wide circuit breaker of the judge's model (see the module docstring)."""
    threshold, cooldown_s = as_config(config).breaker_threshold, as_config(config).breaker_cooldown_s
    return _shared_for("breaker", (*_judge_settings(config).values(), threshold, cooldown_s),
                       lambda: _reported(CircuitBreaker(threshold, cooldown_s)))


def _reported(breaker: CircuitBreaker) -> CircuitBreaker:
    """A process-wide breaker, its states told to the app's observer."""
    breaker.report_to(breaker_state)
    return breaker


def _rerank_api_settings(config: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The RERANKER_* settings of the rerank_api provider: (client's, reranker's) by argument name."""
    client = _settings(config, "base_url", "model", "api_key", "timeout_s", "max_parallel",
                       style="api_style", max_documents="api_max_documents")
    return client, _settings(config, "cache_size", "max_document_chars", *_GUARD_SETTINGS)


def build_rerank_api(config: Any) -> RerankApiReranker:
    """A new rerank_api cross encoder on the RERANKER_* settings (no network I/O)."""
    client, reranker = _rerank_api_settings(config)
    return RerankApiReranker(RerankApiClient(**client), **reranker)


def shared_rerank_api(config: Any) -> RerankApiReranker:
    """The process-wide rerank_api cross encoder for these settings."""
    client, reranker = _rerank_api_settings(config)

    def build() -> RerankApiReranker:
        built = build_rerank_api(config)
        _reported(built.breaker)
        return built

    return _shared_for("rerank_api", (*client.values(), *reranker.values()), build)


@dataclass(frozen=True)
class Provider:
    """One RERANKER_PROVIDER."""

    name: str
    # (config, judge, embedder) -> the cross encoder; judge: a private LLMJudge instead of the shared one.
    builder: Callable[[RerankerConfig, LLMJudge | None, Any], CrossEncoderClient]
    # The model's process-wide circuit breaker, which graph search and /api/rerank share; None: no model.
    breaker_of: Callable[[RerankerConfig], CircuitBreaker] | None
    runs_strategy: bool  # RERANKER_STRATEGY steers it (the LLM judge); else the model scores each passage itself

    @property
    def judges(self) -> bool:
        """A model orders the passages (graph search reranks, /api/rerank serves, /health names the model)."""
        return self.breaker_of is not None

    def build(self, config: Any, *, judge: LLMJudge | None = None, embedder: Any = None) -> CrossEncoderClient:
        """The cross encoder for these settings (mmr needs the embedder). No network I/O."""
        return self.builder(config, judge, embedder)

    def breaker(self, config: Any) -> CircuitBreaker:
        if self.breaker_of is None:
            raise ValueError(f"RERANKER_PROVIDER={self.name} calls no model and has no circuit breaker")
        return self.breaker_of(config)


def _llm_judge(config: Any, judge: LLMJudge | None, embedder: Any) -> OllamaReranker:
    """OllamaReranker running RERANKER_STRATEGY on the shared judge (or a private one)."""
    reranker = OllamaReranker(judge=judge or shared_judge(config),
                              strategy=strategy_from_config(config, embedder=embedder),
                              context_tokens=as_config(config).context_tokens, **guard_settings(config))
    if judge is None:  # on the shared judge, the model's breaker is shared too (/api/rerank reads it)
        reranker.breaker = judge_breaker(config)
    return reranker


def _rerank_api(config: Any, judge: LLMJudge | None, embedder: Any) -> CrossEncoderClient:
    return shared_rerank_api(config)


def _passthrough(config: Any, judge: LLMJudge | None, embedder: Any) -> CrossEncoderClient:
    return PassthroughReranker()


_PROVIDERS = {
    provider.name: provider
    for provider in (
        Provider("ollama", _llm_judge, judge_breaker, runs_strategy=True),  # any OpenAI-compatible /v1 server
        Provider("rerank_api", _rerank_api, lambda config: shared_rerank_api(config).breaker, runs_strategy=False),
        Provider("none", _passthrough, None, runs_strategy=False),
    )
}
if tuple(_PROVIDERS) != PROVIDERS:
    raise RuntimeError(f"reranker providers {tuple(_PROVIDERS)} differ from config.PROVIDERS {PROVIDERS}")


def provider_for(config_or_name: Any) -> Provider:
    """The provider of these settings (or of this RERANKER_PROVIDER value, any case); ValueError naming
    the allowed values for an unknown one."""
    name = config_or_name if isinstance(config_or_name, str) else as_config(config_or_name).provider
    provider = _PROVIDERS.get(name.lower())
    if provider is None:
        raise ValueError(f"Unknown RERANKER_PROVIDER={name}; allowed: {PROVIDERS}")
    return provider


def build_reranker(config: Any, *, judge: LLMJudge | None = None, embedder: Any = None) -> CrossEncoderClient:
    """The cross encoder for RERANKER_PROVIDER: the passthrough, the shared rerank_api client, or the
    LLM judge running RERANKER_STRATEGY with its settings (mmr needs the embedder). No network I/O."""
    return provider_for(config).build(config, judge=judge, embedder=embedder)


def shared_breaker(config: Any) -> CircuitBreaker:
    """The process-wide circuit breaker of the configured reranking model (see the module docstring)."""
    return provider_for(config).breaker(config)


class Reranking:
    """The process-wide reranking pieces of one config, for an app that shares them between graph
    search and a rerank endpoint: `Reranking.shared(config)`. Asking builds nothing twice (the pieces
    are cached by the settings they are made from) and does no network I/O."""

    def __init__(self, config: Any) -> None:
        self.config = as_config(config)
        self.provider = provider_for(self.config)

    @classmethod
    def shared(cls, config: Any) -> "Reranking":
        return cls(config)

    @property
    def judges(self) -> bool:
        """A model orders passages (RERANKER_PROVIDER is not none)."""
        return self.provider.judges

    @property
    def runs_strategy(self) -> bool:
        """RERANKER_STRATEGY steers the model (the LLM judge); else it scores each passage itself."""
        return self.provider.runs_strategy

    @property
    def judge(self) -> LLMJudge:
        return shared_judge(self.config)

    @property
    def rerank_api(self) -> RerankApiReranker:
        return shared_rerank_api(self.config)

    @property
    def breaker(self) -> CircuitBreaker:
        """The model's breaker, shared by graph search and every other caller."""
        return shared_breaker(self.config)

    def reranker(self, *, embedder: Any = None) -> CrossEncoderClient:
        """The cross encoder for Graphiti (mmr needs the embedder)."""
        return build_reranker(self.config, embedder=embedder)

    def strategy(self, name: str | None = None, *, embedder: Any = None) -> Any:
        """The strategy `name` (default: the config's) with the config's knobs; ValueError for a bad knob."""
        return strategy_from_config(self.config, name, embedder=embedder)
