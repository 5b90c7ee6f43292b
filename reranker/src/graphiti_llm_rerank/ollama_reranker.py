"""Graphiti cross encoder backed by a chat model on an OpenAI-compatible server (Ollama, llama.cpp).

    OllamaReranker(RerankerConfig(base_url="http://localhost:11434/v1", model="qwen2.5:3b"))
    OllamaReranker(judge=shared_judge, strategy=get_strategy("listwise"))  # what the config would build, given

runs one reranking strategy (the config's, pointwise by default: one request per distinct passage,
concurrently under the judge's bound) on an `LLMJudge` (its own, or one shared with other callers),
inside the deadline / breaker / fallback guard of graphiti_llm_rerank/cross_encoder.py. Passages come back
byte for byte, each exactly once (duplicates too), best first, every score > 0.

Scores: pointwise returns the judge's relevance (floored at SCORE_FLOOR); a passage whose own
request failed sits below every scored one, failed ones keeping their incoming order. The other
strategies give rank-derived scores (1.0 for the best, descending). Passages with no text cannot be
judged and go last. A failed window, group or pair keeps its incoming order (counted in `stats()`);
a failure of the whole call falls back to the incoming order with one WARNING.

Pointwise reports each finished score as it arrives (graphiti_llm_rerank/judgement.py), so a call cut short by
RERANKER_BUDGET_S or the deadline keeps the scores it has; the other strategies answer all or nothing.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from graphiti_llm_rerank.config import RerankerConfig
from graphiti_llm_rerank.cross_encoder import GuardedReranker
from graphiti_llm_rerank.judge import LLMJudge
from graphiti_llm_rerank.judgement import SCORE_FLOOR
from graphiti_llm_rerank.strategies.base import JudgeCall, run_checked, strategy_name
from graphiti_llm_rerank.strategies.pointwise import UNSCORED, PointwiseStrategy
from graphiti_llm_rerank.strategies.registry import strategy_from_config
from graphiti_llm_rerank.strategies.strategy_prompts import STRATEGY_PROMPT_VERSION
from graphiti_llm_rerank.types import Document, RerankResult, rank_score
from graphiti_llm_rerank.warmup import start_warmup

_STRATEGY_COUNTERS = ("unit_fallbacks", "repairs", "ties")


class OllamaReranker(GuardedReranker):
    """LLM-as-judge cross encoder; see the module docstring for its ordering and failure semantics."""

    def __init__(
        self,
        config: RerankerConfig | None = None,
        *,
        judge: LLMJudge | None = None,
        strategy: Any = None,
        embedder: Any = None,
        deadline_s: float | None = None,
        budget_s: float | None = None,
        context_tokens: int | None = None,
        breaker_threshold: int | None = None,
        breaker_cooldown_s: float | None = None,
    ) -> None:
        """`config` (default: a local Ollama's) says what to build; `judge` and `strategy`, when given,
        are used instead of what it would build (`embedder`: for the mmr strategy); the keyword
        numbers override its fields. No network I/O here: an app must start while the model server is down."""
        config = config if config is not None else RerankerConfig()

        def chosen(value: Any, name: str) -> Any:
            return getattr(config, name) if value is None else value

        judge = judge if judge is not None else LLMJudge.from_config(config)
        super().__init__(counters=judge.counters, deadline_s=chosen(deadline_s, "deadline_s"),
                         budget_s=chosen(budget_s, "budget_s"),
                         breaker_threshold=chosen(breaker_threshold, "breaker_threshold"),
                         breaker_cooldown_s=chosen(breaker_cooldown_s, "breaker_cooldown_s"))
        self.judge = judge  # possibly shared: its bound on concurrent requests covers every caller
        self.strategy = strategy if strategy is not None else strategy_from_config(config, embedder=embedder)
        self.context_tokens = chosen(context_tokens, "context_tokens")
        self._strategy_counts: Counter[str] = Counter()
        self._counts_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OllamaReranker({strategy_name(self.strategy)!r}, {self.judge!r})"

    def describe(self) -> str:
        return f"{strategy_name(self.strategy)} with model {self.judge.model!r}"

    @property
    def scores_are_relevance(self) -> bool:
        """Pointwise scores are the judge's relevance; the other strategies' only encode their order."""
        return bool(getattr(self.strategy, "scores_are_relevance", False))

    @property
    def reports_progress(self) -> bool:
        """The pointwise strategy reports each finished score (so partial work is kept)."""
        return isinstance(self.strategy, PointwiseStrategy)

    def stats(self) -> dict[str, Any]:
        with self._counts_lock:
            counts = dict(self._strategy_counts)
        return {
            "provider": "ollama",
            "strategy": strategy_name(self.strategy),
            **self.judge.stats(),
            "strategy_prompt_version": STRATEGY_PROMPT_VERSION,
            "strategy_counters": {name: counts.get(name, 0) for name in _STRATEGY_COUNTERS},
            **self.guard_stats(),
        }

    async def aclose(self) -> None:
        await self.judge.aclose()

    # -- internals --------------------------------------------------------------------------

    def _needs_model(self, query: str, passages: list[str]) -> bool:
        all_cached = getattr(self.strategy, "all_cached", None)
        return not (callable(all_cached) and all_cached(self.judge, query, _judgeable(passages)))

    def start_warmup(self, timeout_s: float) -> None:
        """Warm the judge's model (graphiti_llm_rerank/warmup.py; timeout_s 0: no warm-up)."""
        start_warmup(self.judge, timeout_s)

    async def _model_not_ready(self, wait_s: float) -> str | None:
        warmup = self.judge.warmup  # set by start_warmup when the app built the reranker
        # A search waits for a load no longer than one of its own requests would wait for an answer.
        return None if warmup is None else await warmup.until_ready(min(wait_s, self.judge.timeout_s))

    def not_ready(self) -> str | None:
        """Not ready while the model loads, after a warm-up that got no answer (each such check starts
        another, so the app becomes ready once the model answers), or while the breaker is open."""
        warmup = self.judge.warmup
        reason = warmup.not_ready() if warmup is not None else None
        if reason is not None:
            if warmup.ended:
                start_warmup(self.judge, warmup.timeout_s)
            return reason
        return super().not_ready()

    async def _rank(self, query: str, passages: list[str]) -> list[tuple[int, float]]:
        rankable = [index for index, passage in enumerate(passages) if passage.strip()]
        documents = [Document(id=str(index), text=passages[index]) for index in rankable]
        # Lenient: a failed window, group or pair keeps its incoming order; only a whole call fails.
        call = JudgeCall(self.judge, strict=False, context_tokens=self.context_tokens)
        # Every passage must come back (graph search applies its own limit): no strategy default cap.
        kept, dropped = await run_checked(self.strategy, query, documents, call, top_k=len(documents))
        self._count(call.stats())
        results = kept + dropped
        order = [rankable[result.original_index] for result in results]
        placed = set(order)
        unjudged = [index for index in range(len(passages)) if index not in placed]
        if self.scores_are_relevance:
            scores = _relevance_scores(results) + _below(len(unjudged), results)
        else:
            scores = [rank_score(rank, len(passages)) for rank in range(1, len(passages) + 1)]
        return list(zip(order + unjudged, scores))

    def _count(self, stats: dict[str, Any]) -> None:
        with self._counts_lock:
            self._strategy_counts.update(
                unit_fallbacks=stats["fallbacks"], repairs=stats["repairs"], ties=stats["ties"]
            )
        if self.scores_are_relevance:
            self.judge.counters.add("passage_failures", stats["fallbacks"])


def _judgeable(passages: list[str]) -> list[str]:
    return [passage for passage in passages if passage.strip()]


def _relevance_scores(results: list[RerankResult]) -> list[float]:
    """The judge's scores floored above 0; unscored results (already last) share half the lowest."""
    real = [max(result.score, SCORE_FLOOR) for result in results if not result.metadata.get(UNSCORED)]
    failed = min(real, default=2 * SCORE_FLOOR) / 2
    return [failed if result.metadata.get(UNSCORED) else max(result.score, SCORE_FLOOR) for result in results]


def _below(count: int, results: list[RerankResult]) -> list[float]:
    """Scores for passages that could not be judged: below everything else, descending, > 0."""
    lowest = min((max(result.score, SCORE_FLOOR) for result in results), default=1.0) / 4
    return [lowest * (1 - index / (count + 1)) for index in range(count)]
