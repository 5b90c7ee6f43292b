"""The strategies a benchmark compares, built the way the app builds them, plus their call estimates.

A strategy label is a strategy name with an optional score mode: `original` (the first-stage
order, no model), `pointwise`, `pointwise:json`, `pointwise:logprobs`, ... Without a mode the
`--score-mode` option applies. Each label gets its own reranker (and so its own judge, counters
and cache), so one label's results never leak into another's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from app.config import RERANKER_SCORE_MODES, RERANKER_STRATEGIES, Config
from app.services.graph_search import rerank_positions

ORIGINAL = "original"
STRATEGY_NAMES = (ORIGINAL, *RERANKER_STRATEGIES)


@dataclass(frozen=True)
class StrategySpec:
    label: str
    name: str
    score_mode: str | None  # None for `original`

    @property
    def uses_model(self) -> bool:
        return self.name != ORIGINAL


def parse_strategies(text: str, default_score_mode: str) -> list[StrategySpec]:
    """'original,pointwise:json,pointwise' -> specs; raises ValueError naming the bad entry."""
    specs: list[StrategySpec] = []
    for raw in (part.strip() for part in text.split(",")):
        if not raw:
            continue
        name, _, mode = raw.partition(":")
        if name not in STRATEGY_NAMES:
            raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGY_NAMES)}")
        if name == ORIGINAL:
            if mode:
                raise ValueError("'original' takes no score mode")
            spec = StrategySpec(ORIGINAL, ORIGINAL, None)
        else:
            mode = mode or default_score_mode
            if mode not in RERANKER_SCORE_MODES:
                raise ValueError(f"unknown score mode {mode!r} in {raw!r}; choose from {RERANKER_SCORE_MODES}")
            spec = StrategySpec(f"{name}:{mode}", name, mode)
        if spec.label not in {s.label for s in specs}:
            specs.append(spec)
    if not specs:
        raise ValueError("no strategy given")
    return specs


@dataclass(frozen=True)
class ModelSettings:
    """How to reach the judge model; defaults come from the RERANKER_* settings."""

    model: str
    base_url: str
    api_key: str | None
    concurrency: int
    timeout_s: float
    deadline_s: float
    cache_size: int
    max_tokens: int
    breaker_threshold: int
    breaker_cooldown_s: float
    instructions: str | None

    @classmethod
    def from_config(cls, config: Config, **overrides: Any) -> "ModelSettings":
        values = dict(
            model=config.reranker_model, base_url=config.reranker_base_url, api_key=config.reranker_api_key,
            concurrency=config.reranker_max_parallel, timeout_s=config.reranker_timeout_s,
            deadline_s=config.reranker_deadline_s, cache_size=config.reranker_cache_size,
            max_tokens=config.reranker_max_tokens, breaker_threshold=config.reranker_breaker_threshold,
            breaker_cooldown_s=config.reranker_breaker_cooldown_s, instructions=config.reranker_instructions,
        )
        values.update({key: value for key, value in overrides.items() if value is not None})
        return cls(**values)


class ModelWaitClock:
    """Seconds during which at least one model request was in flight (the union of their spans).

    Wall time minus this is the reranker's own overhead. It wraps the judge's request method on
    this one instance; benchmark instrumentation only, the app never does this.
    """

    def __init__(self) -> None:
        self.total_s = 0.0
        self._in_flight = 0
        self._since = 0.0

    def attach(self, judge: Any) -> None:
        request = getattr(judge, "_chat", None)
        if request is None:
            return
        clock = self

        async def timed(*args: Any, **kwargs: Any) -> Any:
            if clock._in_flight == 0:
                clock._since = time.perf_counter()
            clock._in_flight += 1
            try:
                return await request(*args, **kwargs)
            finally:
                clock._in_flight -= 1
                if clock._in_flight == 0:
                    clock.total_s += time.perf_counter() - clock._since

        judge._chat = timed


class BenchReranker:
    """One strategy label: `order(query, passages)` -> candidate positions, best first."""

    def __init__(self, spec: StrategySpec, settings: ModelSettings | None, config: Config | None = None) -> None:
        self.spec = spec
        self.client = None if not spec.uses_model else _build_client(spec, settings, config or Config())
        self.judge = getattr(self.client, "judge", None)
        self.wait_clock = ModelWaitClock()
        if self.judge is not None:
            self.wait_clock.attach(self.judge)

    def estimate_calls(self, passages: list[str]) -> int:
        """Model requests one rank call over these passages makes, with an empty cache."""
        if not self.spec.uses_model:
            return 0
        if self.spec.name == "pointwise":
            return len(set(passages))  # duplicates are scored once
        return int(self.client.strategy.estimate_calls(len(passages)))

    async def order(self, query: str, passages: list[str]) -> list[int]:
        if self.client is None:
            return list(range(len(passages)))
        return [position for position, _ in await rerank_positions(self.client, query, passages)]

    def counters(self) -> dict[str, Any]:
        return self.judge.counters.snapshot() if self.judge is not None else {}

    async def aclose(self) -> None:
        close = getattr(self.client, "aclose", None)
        if close is not None:
            await close()


def _build_client(spec: StrategySpec, settings: ModelSettings | None, config: Config):
    """pointwise: OllamaReranker (what graph search uses); others: StrategyReranker over the registry.

    Each label gets its own judge, so its counters and cache are its own.
    """
    if settings is None:
        raise ValueError(f"strategy {spec.label} needs model settings")
    from app.rerank.judge import LLMJudge
    from app.services.ollama_reranker import OllamaReranker

    judge_options = dict(
        model=settings.model, base_url=settings.base_url, api_key=settings.api_key,
        score_mode=spec.score_mode or "auto", max_parallel=settings.concurrency, timeout_s=settings.timeout_s,
        cache_size=settings.cache_size, max_tokens=settings.max_tokens, instructions=settings.instructions,
    )
    breaker = dict(breaker_threshold=settings.breaker_threshold, breaker_cooldown_s=settings.breaker_cooldown_s)
    if spec.name == "pointwise":
        return OllamaReranker(**judge_options, deadline_s=settings.deadline_s, **breaker)

    from app.rerank.strategies import strategy_from_config
    from app.services.strategy_reranker import StrategyReranker

    embedder = _embedder(config) if spec.name == "mmr" else None
    return StrategyReranker(
        strategy_from_config(config, spec.name, embedder=embedder), LLMJudge(**judge_options),
        deadline_s=settings.deadline_s, context_tokens=config.reranker_context_tokens, **breaker,
    )


def _embedder(config: Config):
    """mmr's similarity embedder, as the app would configure it."""
    if config.embedding_provider == "local":
        from app.services.local_embedder import LocalE5Embedder

        return LocalE5Embedder()
    from graphiti_core.embedder.openai import OpenAIEmbedder, OpenAIEmbedderConfig

    return OpenAIEmbedder(config=OpenAIEmbedderConfig(
        api_key=config.embedding_api_key, base_url=config.embedding_base_url,
        embedding_model=config.embedding_model, embedding_dim=config.embedding_dim,
    ))
