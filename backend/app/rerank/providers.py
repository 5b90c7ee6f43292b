"""RERANKER_PROVIDER by name: what each provider builds and what it can do.

    provider = provider_for(config)        # ValueError naming the allowed values for an unknown one
    reranker = provider.build(config)      # the Graphiti cross encoder (no network I/O)
    provider.judges, provider.runs_strategy, provider.breaker(config)

The names users choose from are `config.RERANKER_PROVIDERS` (validated before anything is imported);
this registry maps each to its builder and must hold exactly those names. Callers ask a provider what
it can do (`judges`: a model orders passages; `runs_strategy`: RERANKER_STRATEGY steers it) instead
of comparing its name, so a new provider is one entry here and its name in config.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from graphiti_core.cross_encoder.client import CrossEncoderClient

from app.config import RERANKER_PROVIDERS, Config
from app.rerank.circuit_breaker import CircuitBreaker
from app.rerank.factory import guard_settings, judge_breaker, shared_judge, shared_rerank_api
from app.rerank.judge import LLMJudge
from app.rerank.ollama_reranker import OllamaReranker
from app.rerank.passthrough import PassthroughReranker
from app.rerank.strategies.registry import strategy_from_config


@dataclass(frozen=True)
class Provider:
    """One RERANKER_PROVIDER."""

    name: str
    # (config, judge, embedder) -> the cross encoder; judge: a private LLMJudge instead of the shared one.
    builder: Callable[[Config, LLMJudge | None, Any], CrossEncoderClient]
    # The model's process-wide circuit breaker, which graph search and /api/rerank share; None: no model.
    breaker_of: Callable[[Config], CircuitBreaker] | None
    runs_strategy: bool  # RERANKER_STRATEGY steers it (the LLM judge); else the model scores each passage itself

    @property
    def judges(self) -> bool:
        """A model orders the passages (graph search reranks, /api/rerank serves, /health names the model)."""
        return self.breaker_of is not None

    def build(self, config: Config, *, judge: LLMJudge | None = None, embedder: Any = None) -> CrossEncoderClient:
        """The cross encoder for these settings (mmr needs the embedder). No network I/O."""
        return self.builder(config, judge, embedder)

    def breaker(self, config: Config) -> CircuitBreaker:
        if self.breaker_of is None:
            raise ValueError(f"RERANKER_PROVIDER={self.name} calls no model and has no circuit breaker")
        return self.breaker_of(config)


def _llm_judge(config: Config, judge: LLMJudge | None, embedder: Any) -> OllamaReranker:
    """OllamaReranker running RERANKER_STRATEGY on the shared judge (or a private one)."""
    reranker = OllamaReranker(judge or shared_judge(config), strategy=strategy_from_config(config, embedder=embedder),
                              context_tokens=config.reranker_context_tokens, **guard_settings(config))
    if judge is None:  # on the shared judge, the model's breaker is shared too (/api/rerank reads it)
        reranker.breaker = judge_breaker(config)
    return reranker


def _rerank_api(config: Config, judge: LLMJudge | None, embedder: Any) -> CrossEncoderClient:
    return shared_rerank_api(config)


def _passthrough(config: Config, judge: LLMJudge | None, embedder: Any) -> CrossEncoderClient:
    return PassthroughReranker()


_PROVIDERS = {
    provider.name: provider
    for provider in (
        Provider("ollama", _llm_judge, judge_breaker, runs_strategy=True),  # any OpenAI-compatible /v1 server
        Provider("rerank_api", _rerank_api, lambda config: shared_rerank_api(config).breaker, runs_strategy=False),
        Provider("none", _passthrough, None, runs_strategy=False),
    )
}
if tuple(_PROVIDERS) != RERANKER_PROVIDERS:
    raise RuntimeError(f"reranker providers {tuple(_PROVIDERS)} differ from RERANKER_PROVIDERS {RERANKER_PROVIDERS}")


def provider_for(config_or_name: Config | str) -> Provider:
    """The provider of these settings (or of this RERANKER_PROVIDER value, any case); ValueError naming
    the allowed values for an unknown one."""
    name = config_or_name if isinstance(config_or_name, str) else config_or_name.reranker_provider
    provider = _PROVIDERS.get(name.lower())
    if provider is None:
        raise ValueError(f"Unknown RERANKER_PROVIDER={name}; allowed: {RERANKER_PROVIDERS}")
    return provider


def build_reranker(config: Config, *, judge: LLMJudge | None = None, embedder: Any = None) -> CrossEncoderClient:
    """The cross encoder for RERANKER_PROVIDER: the passthrough, the shared rerank_api client, or the
    LLM judge running RERANKER_STRATEGY with its settings (mmr needs the embedder). No network I/O."""
    return provider_for(config).build(config, judge=judge, embedder=embedder)


def shared_breaker(config: Config) -> CircuitBreaker:
    """The process-wide circuit breaker of the configured reranking model (see app/rerank/factory.py)."""
    return provider_for(config).breaker(config)
