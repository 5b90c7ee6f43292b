"""The strategies a benchmark compares, built the way the app builds them, plus their call estimates.

A strategy label is a strategy name with an optional score mode: `original` (the first-stage
order, no model), `pointwise`, `pointwise:json`, `pointwise:logprobs`, ... Without a mode the
`--score-mode` option applies. Each label gets its own reranker (and so its own judge, counters
and cache), so one label's results never leak into another's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from app.config import RERANKER_SCORE_MODES, RERANKER_STRATEGIES, Config
from app.graph.runtime import shared_embedder
from graphiti_llm_rerank import build_reranker
from graphiti_llm_rerank.providers import build_judge
from graphiti_llm_rerank.ollama_reranker import rerank_positions

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


def with_model_options(config: Config, *, base_url: str | None = None, model: str | None = None,
                       concurrency: int | None = None, timeout_s: float | None = None,
                       deadline_s: float | None = None) -> Config:
    """`config` with the benchmark's command-line overrides of the RERANKER_* settings (None keeps it)."""
    overrides = dict(reranker_base_url=base_url, reranker_model=model, reranker_max_parallel=concurrency,
                     reranker_timeout_s=timeout_s, reranker_deadline_s=deadline_s)
    return replace(config, **{key: value for key, value in overrides.items() if value is not None})


class ModelWaitClock:
    """Seconds during which at least one of the judge's model requests was in flight (the union of
    their spans, as the judge's request bound records them). Wall time minus this is the reranker's
    own overhead."""

    def __init__(self, judge: Any = None) -> None:
        self._judge = judge

    @property
    def total_s(self) -> float:
        return self._judge.model_busy_s() if self._judge is not None else 0.0


class BenchReranker:
    """One strategy label: `order(query, passages)` -> candidate positions, best first."""

    def __init__(self, spec: StrategySpec, config: Config) -> None:
        self.spec = spec
        self.client = None if not spec.uses_model else _build_client(spec, config)
        self.judge = getattr(self.client, "judge", None)
        self.wait_clock = ModelWaitClock(self.judge)

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
        """The judge's counters plus the strategy's repairs and pairwise ties (OllamaReranker.stats)."""
        if self.judge is None:
            return {}
        strategy = self.client.stats().get("strategy_counters", {})
        return {**self.judge.counters.snapshot(), "repairs": strategy.get("repairs", 0), "ties": strategy.get("ties", 0)}

    async def aclose(self) -> None:
        close = getattr(self.client, "aclose", None)
        if close is not None:
            await close()


def _build_client(spec: StrategySpec, config: Config):
    """The reranker graph search would use for this label, from the app's own factory, with a
    judge of its own so its counters and cache are its own."""
    config = replace(config, reranker_provider="ollama", reranker_strategy=spec.name,
                     reranker_score_mode=spec.score_mode or "auto")
    embedder = shared_embedder(config) if spec.name == "mmr" else None
    return build_reranker(config, judge=build_judge(config), embedder=embedder)
